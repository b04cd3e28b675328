#include "bench/load_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainlet::bench {
namespace {

// Fixed-size, so that KillTracked reads it without allocating.
constexpr int kMaxTracked = 256;
pid_t g_pids[kMaxTracked];
volatile int g_count = 0;

void OnSignal(int sig) {
  KillTracked();
  _exit(128 + sig);
}

}  // namespace

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void TrackPid(pid_t pid) {
  if (g_count >= kMaxTracked) {
    fprintf(stderr, "too many processes to track\n");
    KillAll();
    exit(1);
  }
  g_pids[g_count] = pid;
  g_count = g_count + 1;
}

void UntrackPid(pid_t pid) {
  int n = g_count;
  for (int i = 0; i < n; ++i) {
    if (g_pids[i] != pid) continue;
    g_pids[i] = g_pids[n - 1];
    g_count = n - 1;
    return;
  }
}

void KillTracked() {
  for (int i = 0; i < g_count; ++i) {
    if (g_pids[i] > 0) kill(g_pids[i], SIGKILL);
  }
}

void KillAll() {
  KillTracked();
  for (int i = 0; i < g_count; ++i) {
    if (g_pids[i] > 0) waitpid(g_pids[i], nullptr, 0);
  }
  g_count = 0;
}

void InstallSignalHandlers() {
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
}

std::vector<Child> StartGenerators(int procs, bool sched_idle,
                                   const std::function<void(int k, FILE* in, FILE* out)>& serve) {
  std::vector<Child> children;
  for (int k = 0; k < procs; ++k) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
      perror("pipe");
      exit(1);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (sched_idle) {
        sched_param none{};
        if (sched_setscheduler(0, SCHED_IDLE, &none) != 0) perror("sched_setscheduler(SCHED_IDLE)");
      }
      close(down[1]);
      close(up[0]);
      for (const Child& other : children) {
        fclose(other.to);
        fclose(other.from);
      }
      serve(k, fdopen(down[0], "r"), fdopen(up[1], "w"));
      _exit(0);
    }
    if (pid < 0) {
      perror("fork");
      KillAll();
      exit(1);
    }
    close(down[0]);
    close(up[1]);
    TrackPid(pid);
    children.push_back({pid, fdopen(down[1], "w"), fdopen(up[0], "r")});
  }
  return children;
}

std::vector<std::string> Broadcast(const std::vector<Child>& children, const std::string& cmd) {
  for (const Child& ch : children) {
    fprintf(ch.to, "%s\n", cmd.c_str());
    fflush(ch.to);
  }
  std::vector<std::string> answers;
  for (const Child& ch : children) {
    std::string line;
    char buf[65536];
    while (fgets(buf, sizeof(buf), ch.from) != nullptr) {
      line += buf;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (line.empty()) {
      fprintf(stderr, "generator %d died\n", ch.pid);
      KillAll();
      exit(1);
    }
    line.pop_back();
    answers.push_back(line);
  }
  return answers;
}

void StopGenerators(std::vector<Child>* children) {
  Broadcast(*children, "quit");
  for (Child& ch : *children) {
    fclose(ch.to);
    fclose(ch.from);
    waitpid(ch.pid, nullptr, 0);
    UntrackPid(ch.pid);
  }
  children->clear();
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    perror("bind");
    exit(1);
  }
  close(fd);
  return ntohs(a.sin_port);
}

bool PortOpen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

void PrintServerLog(const std::string& why, const std::string& path, int max_lines) {
  fprintf(stderr, "%s; its log (%s):\n", why.c_str(), path.c_str());
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line) && n++ < max_lines) fprintf(stderr, "  %s\n", line.c_str());
}

int64_t ProcCpuMs(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t p = all.rfind(')');
  if (p == std::string::npos) return 0;
  std::vector<std::string> w = absl::StrSplit(all.substr(p + 2), ' ');
  // After ")": state(3) ... utime is field 14, stime 15 (1-based overall).
  int64_t ut = 0, st = 0;
  if (w.size() > 13) {
    (void)absl::SimpleAtoi(w[11], &ut);
    (void)absl::SimpleAtoi(w[12], &st);
  }
  return (ut + st) * 1000 / sysconf(_SC_CLK_TCK);
}

int64_t ProcStatusKb(pid_t pid, const char* key) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return strtoll(line.c_str() + strlen(key), nullptr, 10);
  }
  return 0;
}

int64_t ProcRunQueueWaitMs(pid_t pid) {
  int64_t total_ns = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::ifstream f(e.path() / "schedstat");
    int64_t run = 0, wait = 0;
    if (f >> run >> wait) total_ns += wait;
  }
  return total_ns / 1000000;
}

bool RaiseDescriptorLimitFor(int agents) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < static_cast<rlim_t>(agents) + 64) {
    fprintf(stderr,
            "RLIMIT_NOFILE %llu is too low for %d agents: raise the hard limit (ulimit -Hn)\n",
            static_cast<unsigned long long>(rl.rlim_cur), agents);
    return false;
  }
  return true;
}

std::string MakeRunDir(const std::string& prefix, const std::string& token) {
  std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    perror("mkdtemp");
    return "";
  }
  const std::string path = tmpl + "/token";
  {
    std::ofstream t(path);
    t << token << "\n";
  }
  chmod(path.c_str(), 0600);
  return tmpl;
}

void ServeCommands(
    FILE* in, FILE* out,
    const std::function<std::optional<std::string>(const std::vector<std::string>& words)>&
        handle) {
  char buf[256];
  while (fgets(buf, sizeof(buf), in) != nullptr) {
    const std::vector<std::string> words = absl::StrSplit(absl::StripAsciiWhitespace(buf), ' ');
    if (words[0] == "quit") {
      fprintf(out, "bye\n");
      fflush(out);
      _exit(0);
    }
    const std::optional<std::string> answer = handle(words);
    fprintf(out, "%s\n", answer.has_value() ? answer->c_str() : "unknown-command");
    fflush(out);
  }
  _exit(0);
}

double LoadAvg() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace trainlet::bench

#include "mpi/ssh_master.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/descriptors.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "launcher/children.h"
#include "mpi/formats.h"
#include "mpi/state_dir.h"

namespace trainlet::mpi {
namespace {

constexpr size_t kMaxOutput = 4096;
constexpr size_t kMaxShown = 300;

int MillisLeft(absl::Time deadline) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 1 << 30));
}

// Reads exactly `size` bytes unless EOF or the deadline comes first.
bool ReadFully(int fd, void* data, size_t size, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    pollfd pfd{fd, POLLIN, 0};
    const int n = poll(&pfd, 1, MillisLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const ssize_t r = read(fd, p + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

BoundedRun RunBounded(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      absl::Time deadline) {
  BoundedRun out;
  if (argv.empty()) return out;
  int output[2], status[2];
  if (pipe2(output, O_CLOEXEC) != 0) return out;
  if (pipe2(status, O_CLOEXEC) != 0) {
    close(output[0]);
    close(output[1]);
    return out;
  }
  // Everything the children use is built before fork (only async-signal-safe
  // calls after it: this process has threads).
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t helper = fork();
  if (helper == 0) {
    // The helper: the agent's reaper may reap it, never the program, whose
    // exit status it passes on.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, nullptr);
    // It outlives the exec of the program (it waits for it): only its own
    // three descriptors stay open in it, at 3, 4 and 5 (close-on-exec), so
    // it holds none of the agent's, such as a worker's exec-status pipe (a
    // Start() on another thread would wait for this probe to end).
    const int kOut = 3, kStatus = 4, kNull = 5;
    const int moved_out = fcntl(output[1], F_DUPFD_CLOEXEC, kNull + 1);
    const int moved_status = fcntl(status[1], F_DUPFD_CLOEXEC, kNull + 1);
    const int moved_null = devnull >= 0 ? fcntl(devnull, F_DUPFD_CLOEXEC, kNull + 1) : -1;
    if (moved_out < 0 || moved_status < 0 || dup2(moved_out, kOut) < 0 ||
        dup2(moved_status, kStatus) < 0 || (moved_null >= 0 && dup2(moved_null, kNull) < 0)) {
      _exit(0);  // no status: the caller's read fails, as for a failed fork.
    }
    CloseDescriptorsFrom(kNull + 1);
    if (moved_null < 0) close(kNull);
    for (int fd : {kOut, kStatus, kNull}) fcntl(fd, F_SETFD, FD_CLOEXEC);
    const pid_t program = fork();
    if (program == 0) {
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(kOut, 1);
      dup2(kOut, 2);
      if (moved_null >= 0) dup2(kNull, 0);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    close(kOut);
    int code = -1;
    if (program > 0) {
      (void)!write(kStatus, &program, sizeof(program));
      int st = 0;
      while (waitpid(program, &st, 0) < 0 && errno == EINTR) {
      }
      code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    (void)!write(kStatus, &code, sizeof(code));
    _exit(0);
  }
  if (devnull >= 0) close(devnull);
  close(output[1]);
  close(status[1]);
  if (helper < 0) {
    close(output[0]);
    close(status[0]);
    return out;
  }
  pid_t program = -1;
  ReadFully(status[0], &program, sizeof(program), deadline);
  char buffer[1024];
  for (;;) {
    pollfd pfd{output[0], POLLIN, 0};
    const int n = poll(&pfd, 1, MillisLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the deadline
    const ssize_t r = read(output[0], buffer, sizeof(buffer));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // EOF: the program (and whatever kept its output) is done
    if (out.output.size() < kMaxOutput)
      out.output.append(buffer, std::min<size_t>(r, kMaxOutput - out.output.size()));
  }
  int code = -1;
  if (!ReadFully(status[0], &code, sizeof(code), deadline)) {
    out.timed_out = true;
    // The helper has not reaped it, so the number is still the program's.
    if (program > 0) kill(program, SIGKILL);
    ReadFully(status[0], &code, sizeof(code), absl::Now() + absl::Seconds(5));
    code = -1;
  }
  out.exit_code = code;
  close(output[0]);
  close(status[0]);
  // Already reaped by the agent's reaper, or exiting now.
  while (waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  return out;
}

OpenSshMasterProber::OpenSshMasterProber(std::string ssh, std::string config,
                                         std::string control_dir, std::vector<std::string> env,
                                         SshProber* diagnose, std::string connect_helper)
    : ssh_(std::move(ssh)),
      config_(std::move(config)),
      control_dir_(std::move(control_dir)),
      env_(std::move(env)),
      diagnose_(diagnose) {
  // ssh expands % in a ProxyCommand and runs it with a shell: only an
  // absolute path of the state directory's characters is taken as is.
  if (connect_helper.empty() || connect_helper[0] != '/' || !IsSafeStatePath(connect_helper)) {
    return;
  }
  connect_helper_ = std::move(connect_helper);
  // ssh runs a ProxyCommand with $SHELL -c: the pod's SHELL (nologin, a
  // missing path) must not decide whether the check can connect.
  env_.erase(std::remove_if(env_.begin(), env_.end(),
                            [](const std::string& e) { return absl::StartsWith(e, "SHELL="); }),
             env_.end());
  env_.push_back("SHELL=/bin/sh");
}

ProbeResult OpenSshMasterProber::Probe(const ProbeTarget& target, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // What the libssh probe would refuse before dialing, it refuses here too
  // (and a name starting with '-' never reaches ssh's command line).
  if (!IsValidHost(target.name) || target.port <= 0 || target.port > 65535)
    return diagnose_->Probe(target, timeout);
  const int64_t connect_s = std::max<int64_t>(1, absl::ToInt64Seconds(timeout));
  std::vector<std::string> argv = {ssh_,
                                   "-F",
                                   config_,
                                   "-o",
                                   "ControlMaster=auto",
                                   "-o",
                                   "ControlPersist=yes",
                                   "-o",
                                   "ConnectionAttempts=1",
                                   "-o",
                                   absl::StrCat("ConnectTimeout=", connect_s)};
  if (!connect_helper_.empty()) {
    // The master's connection, which COMMAND's sessions then ride on.
    argv.insert(argv.end(),
                {"-o", absl::StrCat("ProxyCommand=", connect_helper_, " ssh-connect %h %p"), "-o",
                 "ProxyUseFdpass=yes"});
  }
  argv.insert(argv.end(), {"-p", absl::StrCat(target.port), target.name, kReadinessCommand});
  const absl::Time started = absl::Now();
  BoundedRun run = RunBounded(argv, env_, deadline);
  if (run.exit_code == 0) {
    TLOG(kDebug) << "SSH probe of " << SafeForLog(target.name, 128)
                 << " (OpenSSH, master left): " << absl::ToDoubleMilliseconds(absl::Now() - started)
                 << "ms";
    return {};
  }
  // A master that no longer answers (its worker gone or cut off) must not
  // take the next attempt's command too.
  const std::string socket =
      ControlSocketPath(target.name, target.port, target.host_public_key, control_dir_);
  if (!socket.empty()) {
    if (absl::StatusOr<std::vector<launcher::ChildProcess>> children = launcher::ListChildren();
        children.ok()) {
      for (const launcher::ChildProcess& c : *children) {
        if (IsSshMaster(c, control_dir_) && MasterSocket(c) == socket) kill(c.pid, SIGTERM);
      }
    }
  }
  // Which step failed, in the libssh probe's words, within what is left of
  // the bound (none left: ssh itself ran out of time, which is the answer).
  const absl::Duration left = deadline - absl::Now();
  if (!run.timed_out && left > absl::ZeroDuration()) {
    ProbeResult why = diagnose_->Probe(target, left);
    if (why.stage != ProbeStage::kOk) return why;
  }
  const std::string said = SafeForLog(absl::StripAsciiWhitespace(run.output), kMaxShown);
  return {ProbeStage::kCommand,
          absl::StrCat(SafeForLog(target.name, 128), ":", target.port, ": OpenSSH's ssh ",
                       run.timed_out ? "did not finish in time"
                                     : absl::StrCat("exited with status ", run.exit_code),
                       said.empty() ? "" : absl::StrCat(": ", said), " (the job's ssh_config is ",
                       SafeForLog(config_, 256), ")")};
}

std::string MasterSocket(const launcher::ChildProcess& child) {
  std::ifstream in(absl::StrCat("/proc/", child.pid_in_proc, "/cmdline"), std::ios::binary);
  std::string cmdline;
  cmdline.resize(4096);
  in.read(cmdline.data(), static_cast<std::streamsize>(cmdline.size()));
  cmdline.resize(static_cast<size_t>(in.gcount()));
  absl::string_view v = cmdline;
  if (!absl::ConsumePrefix(&v, "ssh: ")) return "";
  const size_t end = v.find(" [mux]");
  return end == absl::string_view::npos ? "" : std::string(v.substr(0, end));
}

bool IsSshMaster(const launcher::ChildProcess& child, const std::string& control_dir,
                 const std::string& ssh) {
  if (control_dir.empty() || child.comm != "ssh") return false;
  if (!absl::StartsWith(MasterSocket(child), absl::StrCat(control_dir, "/"))) return false;
  if (ssh.empty()) return true;
  const std::string proc = absl::StrCat("/proc/", child.pid_in_proc);
  char exe[4096], want[4096];
  const ssize_t n = readlink((proc + "/exe").c_str(), exe, sizeof(exe) - 1);
  if (n <= 0 || realpath(ssh.c_str(), want) == nullptr) return false;
  exe[n] = '\0';
  return strcmp(exe, want) == 0;
}

int StopMasters(const std::string& control_dir, const std::set<std::string>& keep) {
  if (control_dir.empty()) return 0;
  absl::StatusOr<std::vector<launcher::ChildProcess>> children = launcher::ListChildren();
  if (!children.ok()) return 0;
  int stopped = 0;
  for (const launcher::ChildProcess& c : *children) {
    if (!IsSshMaster(c, control_dir) || keep.count(MasterSocket(c)) != 0) continue;
    if (kill(c.pid, SIGTERM) == 0) ++stopped;
  }
  return stopped;
}

}  // namespace trainlet::mpi

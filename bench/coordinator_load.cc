// Coordinator load generator: N simulated agents (up to 10,000 and more)
// against a real `trainlet coordinator` running as a SEPARATE process, so that
// the figures are the server's and not the generator's.
//
// The simulated agents speak the agent's side of the protocol (Join, Watch,
// UDP liveness and Reports, acks, re-joins by datagram, released streams,
// Leave) on a few completion queues: bench/simulated_agents.h says what they
// mirror and why. --procs=K forks K generator processes (before any gRPC
// object exists), each owning the agents i with i % K == its index; the parent
// drives them over pipes (one text command, one text answer) and never uses
// gRPC itself. Every timestamp is CLOCK_MONOTONIC, which all processes share.
// Liveness as the agent (--acks=false ignores the coordinator's acks: the
// agent before them; --udp-liveness=false: no datagrams, Reports every
// interval, the fallback of a network that drops UDP; --heartbeat-interval
// overrides the interval).
//
// Phases (--phases, comma-separated; each server is a fresh process):
//   last    static job (--nnodes=N). Channels connected first; N-1 agents join
//           in waves of --wave (the next wave once the server is quiet), then,
//           200 ms later, the last agent joins. Figure: every response minus
//           the last join's send time (p50/p99/max), and the server CPU from
//           just before the last join to the last response.
//   steady  after `last`, on the same server: N agents running and
//           heartbeating for --steady seconds; server CPU in % of one core,
//           heartbeats sent/answered, then every agent Leaves (server CPU and
//           time of the N Leaves).
//   burst   static job; all N agents make their first Join at once, without
//           pre-connected channels (connection storm included).
//   wave    static job; like `last` but the closing increment is a whole wave
//           of --wave agents released at once (the current benchmark's
//           --wave is only the size of `last`'s preparatory waves).
//   loss1   elastic job (--nnodes=MIN:N, MIN = N-1-N/10, --max-restarts=5,
//           --last-call=--loss-last-call). After round 1 (N nodes) and a
//           settle time, one agent is lost (--loss-mode=close: its Watch is
//           cancelled and its channel closed, as a killed pod; silent: it only
//           stops heartbeating, as a frozen one). Figures: detection = loss ->
//           the coordinator's "opening round" log line (server) and -> the
//           first Rejoin an agent receives (client); re-round = loss -> every
//           survivor holds its next round's assignment (p50/p99/max), and
//           restart ("opening round", logged before the Rejoins go out) ->
//           the server's "all N answers sent"; how the survivors were told
//           (client_rejoin_datagrams, repeats included; client_stream_rejoins).
//   loss10  on the same server, N/10 agents are lost at once; same figures.
//           Today the survivors' round then closes only after MIN joined and
//           --last-call passed (the lost agents were expected back).
//
// Measured on the server: CPU (utime+stime from /proc/PID/stat) per phase,
// the time its threads waited for a CPU (run queue, /proc/PID/task/*/schedstat:
// what other work on the machine cost it), VmRSS/VmHWM/threads from
// /proc/PID/status, and its log lines ("round N
// closed", "opening round N"), whose wall-clock times are mapped onto the
// monotonic clock (1 ms resolution). Measured on the clients: their CPU
// (getrusage in each generator), reported separately. The load average is
// printed: other work on the machine disturbs the figures.
//
// Output: a table for humans, then one JSON line starting with
// {"bench":"coordinator_load". Exit status 0 when every phase completed (every
// round closed with the expected nodes and every Join answered), 1 otherwise,
// 64 on bad arguments. No target is asserted.
//
// Build and run:
//   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release
//   ninja -C build-rel -j2 trainlet bench_coordinator_load
//   build-rel/bench/bench_coordinator_load --trainlet=build-rel/trainlet
//       [--agents=1000] [--procs=2] [--cqs=2] [--phases=last,steady,burst,wave,loss1,loss10]
//       [--wave=100] [--steady=10] [--heartbeat-timeout=5] [--heartbeat-interval=0]
//       [--udp-liveness=true] [--join-timeout=120] [--loss-mode=close|silent]
//       [--loss-last-call=1] [--rejoin-by-datagram=true|false]
//       [--rejoin-datagram=true|false] [--release=true|false] [--server-cpu=N]
//       [--keep-logs=false|true]
//       [--generators-sched=normal|idle]
//
// --generators-sched=idle runs the generator processes under SCHED_IDLE: they
// get a CPU only when the coordinator (and everything else) has none to use,
// as the agents of a real job, which run on other machines, take none of
// node 0's CPUs. The server-side figures then say what the coordinator itself
// needs; the client-side ones include the generators' wait for a CPU.
//
// ctest runs a short version (coordinator_load_short): 2,000 agents, `last`.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/flags.h"
#include "bench/load_harness.h"
#include "bench/simulated_agents.h"
#include "common/deadlock_detection.h"

namespace trainlet::bench {
namespace {

constexpr char kJobId[] = "bench";
// 127.0.0.1:PORT of the current server; set before the generators fork.
std::string g_target;
constexpr char kToken[] = "coordinator-load-bench-token";

struct Config {
  int agents = 1000;
  int procs = 2;
  int cqs = 2;
  std::vector<std::string> phases = {"last", "steady", "burst", "wave", "loss1", "loss10"};
  int wave = 100;
  int steady_s = 10;
  double heartbeat_timeout_s = 5;
  double heartbeat_interval_s = 0;  // 0: the Assignment's.
  bool udp_liveness = true;         // JoinRequest.udp_liveness, as the agent sends it.
  bool acks = true;                 // take the coordinator's liveness acks, as the agent does.
  // After a Rejoin that allows it, re-join with READY datagrams and take the
  // assignment from the open stream, as the agent does (false: a Join call).
  bool rejoin_by_datagram = true;
  // ... and take the Rejoin as a REJOIN datagram when the coordinator sends
  // one, as the agent does (false: only from the stream).
  bool rejoin_datagram = true;
  // Accept the coordinator's release of the stream, as the agent (a round of
  // --release-streams-from nodes or more: the server's option).
  bool release = true;
  int join_timeout_s = 600;  // the agent's --join-timeout default (10m)
  std::string loss_mode = "close";
  double loss_last_call_s = 1;
  std::string trainlet;
  std::vector<std::string> server_args;     // --server-arg, appended to the coordinator's.
  std::vector<std::string> server_env;      // --server-env=NAME=VALUE, for the coordinator only.
  std::string generators_sched = "normal";  // normal | idle: the generators' CPU policy.
  bool keep_logs = false;                   // keep the server logs of a run that passed too.
  // >= 0: the coordinator runs on this CPU alone and the generators on the
  // others (as on a cluster, where the agents are other machines).
  int server_cpu = -1;
};

// Pins the calling process (and the threads it starts later) to `cpu`, or
// with `except` to every CPU but it. Best effort: a failure is printed.
void PinCpu(int cpu, bool except) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int n = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 0; i < n; ++i) {
    if ((i == cpu) != except) CPU_SET(i, &set);
  }
  if (CPU_COUNT(&set) == 0 || sched_setaffinity(0, sizeof(set), &set) != 0) {
    perror("sched_setaffinity");
  }
}

// ---------------------------------------------------------------------------
// Parent: the server process, the generator processes, the phases.

std::vector<Child> StartGenerators(const Config& c) {
  return trainlet::bench::StartGenerators(c.procs, c.generators_sched == "idle",
                                          [&c](int k, FILE* in, FILE* out) {
                                            if (c.server_cpu >= 0) PinCpu(c.server_cpu, true);
                                            SimulatedAgentsOptions o;
                                            o.target = g_target;
                                            o.job_id = kJobId;
                                            o.token = kToken;
                                            o.agents = c.agents;
                                            o.cqs = c.cqs;
                                            o.heartbeat_timeout_s = c.heartbeat_timeout_s;
                                            o.heartbeat_interval_s = c.heartbeat_interval_s;
                                            o.udp_liveness = c.udp_liveness;
                                            o.acks = c.acks;
                                            o.rejoin_by_datagram = c.rejoin_by_datagram;
                                            o.rejoin_datagram = c.rejoin_datagram;
                                            o.release = c.release;
                                            o.join_timeout_s = c.join_timeout_s;
                                            ServeSimulatedAgents(o, k, c.procs, in, out);
                                          });
}

std::vector<int64_t> Ints(const std::string& s) {
  std::vector<int64_t> v;
  for (absl::string_view w : absl::StrSplit(s, ' ', absl::SkipEmpty())) {
    int64_t x = 0;
    (void)absl::SimpleAtoi(w, &x);
    v.push_back(x);
  }
  return v;
}

// The server's watchdog: a coordinator that exits during a phase (a job it
// declared failed, a crash) would leave the simulated agents retrying their
// joins until --join-timeout; the watchdog prints its log and ends the run.
std::atomic<pid_t> g_watched_server{-1};
std::string g_watched_log;  // written before g_watched_server is set.

void WatchServer() {
  std::thread([] {
    for (;;) {
      usleep(200000);
      const pid_t pid = g_watched_server.load();
      if (pid <= 0) continue;
      siginfo_t info{};
      if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid) {
        continue;
      }
      if (g_watched_server.load() != pid) continue;  // StopServer is taking it down.
      PrintServerLog(
          absl::StrCat("the coordinator exited during the phase (status ", info.si_status, ")"),
          g_watched_log);
      KillTracked();
      _exit(1);
    }
  }).detach();
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log_path;
};

std::string g_tmpdir;

Server StartServer(const Config& c, const std::string& nnodes, int max_restarts, double last_call_s,
                   const std::string& name) {
  Server s;
  s.port = FreePort();
  s.log_path = absl::StrCat(g_tmpdir, "/", name, ".log");
  const std::string token_file = absl::StrCat(g_tmpdir, "/token");
  std::vector<std::string> args = {
      c.trainlet,
      "coordinator",
      absl::StrCat("--port=", s.port),
      "--bind-addr=127.0.0.1",
      absl::StrCat("--nnodes=", nnodes),
      absl::StrCat("--job-id=", kJobId),
      absl::StrCat("--token-file=", token_file),
      absl::StrCat("--max-restarts=", max_restarts),
      absl::StrFormat("--last-call=%dms", static_cast<int>(last_call_s * 1000)),
      absl::StrFormat("--heartbeat-timeout=%dms", static_cast<int>(c.heartbeat_timeout_s * 1000)),
  };
  args.insert(args.end(), c.server_args.begin(), c.server_args.end());
  fflush(stdout);
  fflush(stderr);
  s.pid = fork();
  if (s.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (c.server_cpu >= 0) PinCpu(c.server_cpu, false);
    for (const std::string& e : c.server_env) putenv(strdup(e.c_str()));
    int fd = open(s.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    dup2(fd, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    perror("execv");
    _exit(127);
  }
  TrackPid(s.pid);
  const int64_t until = MonoNs() + 30000000000;
  while (!PortOpen(s.port)) {
    int st;
    if (waitpid(s.pid, &st, WNOHANG) == s.pid || MonoNs() > until) {
      PrintServerLog("the coordinator did not start", s.log_path);
      KillAll();
      exit(1);
    }
    usleep(10000);
  }
  g_target = absl::StrCat("127.0.0.1:", s.port);
  g_watched_log = s.log_path;
  g_watched_server.store(s.pid);
  return s;
}

void StopServer(Server* s) {
  g_watched_server.store(-1);
  kill(s->pid, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(s->pid, nullptr, WNOHANG) == s->pid) {
      s->pid = -1;
      break;
    }
    usleep(10000);
  }
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, nullptr, 0);
  }
  UntrackPid(s->pid);
}

// The server's CPU in ms per 100 ms while nothing but keepalive pings and
// its ticker run (measured over 500 ms after the channels connected).
int64_t ServerBaseline(pid_t pid) {
  const int64_t a = ProcCpuMs(pid);
  usleep(500000);
  return (ProcCpuMs(pid) - a) / 5;
}

// Waits until the server used at most its baseline + 30 ms of CPU over
// 100 ms (the joins sent are parked), or `max_s` passed. An absolute bound
// would never be met at 10,000 agents, whose keepalive pings alone keep the
// server busy.
void AwaitServerQuiet(pid_t pid, int64_t baseline_ms, double max_s) {
  const int64_t until = MonoNs() + static_cast<int64_t>(max_s * 1e9);
  int64_t prev = ProcCpuMs(pid);
  while (MonoNs() < until) {
    usleep(100000);
    const int64_t now = ProcCpuMs(pid);
    if (now - prev <= baseline_ms + 30) return;
    prev = now;
  }
}

// The monotonic times of the server's log lines that contain `needle`.
std::vector<int64_t> LogTimes(const std::string& path, const std::string& needle) {
  // Wall-clock -> monotonic, sampled now (the log has 1 ms resolution).
  const int64_t offset = absl::GetCurrentTimeNanos() - MonoNs();
  std::vector<int64_t> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find(needle) == std::string::npos || line.size() < 24) continue;
    absl::Time t;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E3SZ", line.substr(0, 24), &t, &err)) continue;
    out.push_back(absl::ToUnixNanos(t) - offset);
  }
  return out;
}

struct Joined {
  int ok = 0, err = 0, min_nnodes = 1 << 30, max_nnodes = 0;
  uint64_t max_round = 0;
  std::string first_error;
  std::vector<int64_t> sent, recv, rejoin;
};

Joined WaitAll(const std::vector<Child>& children, uint64_t min_round, int timeout_s) {
  Joined j;
  for (const std::string& ans :
       Broadcast(children, absl::StrCat("wait ", min_round, " ", timeout_s))) {
    std::vector<std::string> w = absl::StrSplit(ans, ' ', absl::SkipEmpty());
    if (w.size() < 6) continue;
    int ok = 0, err = 0, mn = 0, mx = 0;
    uint64_t r = 0;
    (void)absl::SimpleAtoi(w[0], &ok);
    (void)absl::SimpleAtoi(w[1], &err);
    (void)absl::SimpleAtoi(w[2], &mn);
    (void)absl::SimpleAtoi(w[3], &mx);
    (void)absl::SimpleAtoi(w[4], &r);
    j.ok += ok;
    j.err += err;
    if (ok) j.min_nnodes = std::min(j.min_nnodes, mn);
    j.max_nnodes = std::max(j.max_nnodes, mx);
    j.max_round = std::max(j.max_round, r);
    if (err && j.first_error.empty()) j.first_error = w[5];
    for (size_t i = 6; i < w.size(); ++i) {
      std::vector<int64_t> t;
      for (absl::string_view x : absl::StrSplit(w[i], ':')) {
        int64_t v = 0;
        (void)absl::SimpleAtoi(x, &v);
        t.push_back(v);
      }
      if (t.size() != 3) continue;
      j.sent.push_back(t[0]);
      j.recv.push_back(t[1]);
      j.rejoin.push_back(t[2]);
    }
  }
  if (j.ok == 0) j.min_nnodes = 0;
  return j;
}

struct ClientStats {
  int64_t cpu_ms = 0, hb_sent = 0, hb_ok = 0, hb_err = 0, watch_err = 0, maxrss_kb = 0;
  int64_t dgram_sent = 0, dgram_err = 0, hb_heard = 0, acks = 0, ready_fallbacks = 0, rejoins = 0,
          stream_rejoins = 0, released = 0, directive_datagrams = 0;
};

ClientStats Stats(const std::vector<Child>& children) {
  ClientStats s;
  for (const std::string& a : Broadcast(children, "stats")) {
    std::vector<int64_t> v = Ints(a);
    if (v.size() < 6) continue;
    s.cpu_ms += v[0] / 1000;
    s.hb_sent += v[1];
    s.hb_ok += v[2];
    s.hb_err += v[3];
    s.watch_err += v[4];
    s.maxrss_kb += v[5];
    if (v.size() >= 9) {
      s.dgram_sent += v[6];
      s.dgram_err += v[7];
      s.hb_heard += v[8];
    }
    if (v.size() >= 10) s.acks += v[9];
    if (v.size() >= 11) s.ready_fallbacks += v[10];
    if (v.size() >= 12) s.rejoins += v[11];
    if (v.size() >= 13) s.stream_rejoins += v[12];
    if (v.size() >= 15) {
      s.released += v[13];
      s.directive_datagrams += v[14];
    }
  }
  return s;
}

// One phase's figures: printed as a table row and as JSON.
struct Figures {
  std::string phase;
  bool ok = true;
  std::string error;
  std::vector<std::pair<std::string, double>> values;  // name -> value
  void Set(const std::string& k, double v) { values.emplace_back(k, v); }
  void Fail(const std::string& e) {
    if (ok) error = e;
    ok = false;
  }
};

std::vector<Figures> g_results;

// Progress on stderr as each phase ends (the table comes at the end).
void Report(const Figures& f) {
  g_results.push_back(f);
  fprintf(stderr, "phase %s: %s\n", f.phase.c_str(),
          f.ok ? "ok" : absl::StrCat("FAILED: ", f.error).c_str());
}

void AddServerFigures(Figures* f, pid_t pid) {
  f->Set("server_rss_mb", ProcStatusKb(pid, "VmRSS:") / 1024.0);
  f->Set("server_hwm_mb", ProcStatusKb(pid, "VmHWM:") / 1024.0);
  f->Set("server_threads", static_cast<double>(ProcStatusKb(pid, "Threads:")));
}

void AddLatencies(Figures* f, const std::string& prefix, const std::vector<int64_t>& t,
                  int64_t from) {
  std::vector<double> ms;
  for (int64_t x : t) ms.push_back((x - from) / 1e6);
  f->Set(prefix + "_p50_ms", Percentile(ms, 50));
  f->Set(prefix + "_p99_ms", Percentile(ms, 99));
  f->Set(prefix + "_max_ms", ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()));
}

void CheckRound(Figures* f, const Joined& j, int expected_ok, int nnodes, uint64_t round) {
  if (j.err > 0) f->Fail(absl::StrCat(j.err, " join(s) failed; first: ", j.first_error));
  if (j.ok != expected_ok) f->Fail(absl::StrCat(j.ok, " of ", expected_ok, " agents joined"));
  if (j.min_nnodes != nnodes || j.max_nnodes != nnodes) {
    f->Fail(
        absl::StrCat("round of ", j.min_nnodes, "..", j.max_nnodes, " nodes, expected ", nnodes));
  }
  if (j.max_round < round) f->Fail(absl::StrCat("round ", j.max_round, ", expected ", round));
}

// Joins [0, upto) in waves of `wave`, each once the server is quiet.
void JoinInWaves(const std::vector<Child>& ch, pid_t server, int upto, int wave) {
  const int64_t baseline = ServerBaseline(server);
  for (int lo = 0; lo < upto; lo += wave) {
    Broadcast(ch, absl::StrCat("join ", lo, " ", std::min(upto, lo + wave)));
    AwaitServerQuiet(server, baseline, 10);
  }
}

// last / wave: the round closes with the final `final_count` joins.
void RunClosingPattern(const Config& c, const std::string& phase, int final_count, bool steady) {
  const int n = c.agents;
  Figures f;
  f.phase = phase;
  Server s = StartServer(c, absl::StrCat(n), 0, 0.5, phase);
  std::vector<Child> ch = StartGenerators(c);
  int connected = 0;
  for (const std::string& a : Broadcast(ch, "connect 60"))
    connected += static_cast<int>(Ints(a)[0]);
  if (connected != n) f.Fail(absl::StrCat(connected, " of ", n, " channels connected"));
  JoinInWaves(ch, s.pid, n - final_count, c.wave);
  usleep(200000);  // let the machine go quiet
  const ClientStats cs0 = Stats(ch);
  const int64_t cpu0 = ProcCpuMs(s.pid);
  const int64_t wait0 = ProcRunQueueWaitMs(s.pid);
  int64_t last_sent = 0;
  for (const std::string& a : Broadcast(ch, absl::StrCat("join ", n - final_count, " ", n))) {
    std::vector<int64_t> v = Ints(a);
    if (v.size() == 3 && v[0] > 0) last_sent = std::max(last_sent, v[2]);
  }
  Joined j = WaitAll(ch, 1, c.join_timeout_s + 5);
  const int64_t cpu1 = ProcCpuMs(s.pid);
  const int64_t wait1 = ProcRunQueueWaitMs(s.pid);
  const ClientStats cs1 = Stats(ch);
  CheckRound(&f, j, n, n, 1);
  const int64_t last_recv = j.recv.empty() ? 0 : *std::max_element(j.recv.begin(), j.recv.end());
  AddLatencies(&f, "response_after_last_join", j.recv, last_sent);
  std::vector<int64_t> closed = LogTimes(s.log_path, "round 1 closed");
  if (!closed.empty())
    f.Set("server_round_closed_after_last_join_ms", (closed[0] - last_sent) / 1e6);
  // The server's own "every response sent": its log line when the last Join
  // answer of the round was handed to the transport (RoundAnswerTracker).
  std::vector<int64_t> sent_all = LogTimes(s.log_path, "round 1: all ");
  if (!sent_all.empty())
    f.Set("server_all_answers_sent_after_last_join_ms", (sent_all[0] - last_sent) / 1e6);
  f.Set("server_cpu_ms", static_cast<double>(cpu1 - cpu0));
  f.Set("client_cpu_ms", static_cast<double>(cs1.cpu_ms - cs0.cpu_ms));
  f.Set("window_ms", (last_recv - last_sent) / 1e6);
  f.Set("server_runqueue_wait_ms", static_cast<double>(wait1 - wait0));
  AddServerFigures(&f, s.pid);
  Report(f);

  if (steady && f.ok) {
    Figures st;
    st.phase = "steady";
    // Let the heartbeats of every agent start (they are phase-aligned, as
    // those of real agents whose round closed at one instant).
    usleep(static_cast<useconds_t>(std::max(1.0, 2 * c.heartbeat_timeout_s / 10) * 1e6));
    const ClientStats a = Stats(ch);
    const int64_t c0 = ProcCpuMs(s.pid);
    const int64_t w0 = ProcRunQueueWaitMs(s.pid);
    const int64_t t0 = MonoNs();
    usleep(static_cast<useconds_t>(c.steady_s) * 1000000);
    const int64_t c1 = ProcCpuMs(s.pid);
    const int64_t w1 = ProcRunQueueWaitMs(s.pid);
    const int64_t t1 = MonoNs();
    const ClientStats b = Stats(ch);
    const double secs = (t1 - t0) / 1e9;
    st.Set("seconds", secs);
    st.Set("server_cpu_pct_of_one_core", 100.0 * (c1 - c0) / 1000.0 / secs);
    st.Set("server_runqueue_wait_ms", static_cast<double>(w1 - w0));
    st.Set("heartbeats_per_s", (b.hb_sent - a.hb_sent) / secs);
    st.Set("heartbeat_errors", static_cast<double>(b.hb_err - a.hb_err));
    st.Set("datagrams_per_s", (b.dgram_sent - a.dgram_sent) / secs);
    st.Set("datagram_errors", static_cast<double>(b.dgram_err - a.dgram_err));
    // Reports whose answer said the coordinator hears the datagrams.
    st.Set("reports_udp_heard", static_cast<double>(b.hb_heard - a.hb_heard));
    st.Set("acks_per_s", (b.acks - a.acks) / secs);
    st.Set("watch_errors", static_cast<double>(b.watch_err - a.watch_err));
    // Agents whose stream the coordinator released (since the round began).
    st.Set("client_released", static_cast<double>(b.released));
    st.Set("client_cpu_pct_of_one_core", 100.0 * (b.cpu_ms - a.cpu_ms) / 1000.0 / secs);
    if (b.hb_err > a.hb_err) st.Fail(absl::StrCat(b.hb_err - a.hb_err, " heartbeats failed"));
    if (b.hb_sent == a.hb_sent && b.dgram_sent == a.dgram_sent) {
      st.Fail("no heartbeat (Report or datagram) was sent");
    }
    AddServerFigures(&st, s.pid);
    // Leave: every agent departs (the first Leave of a running static job
    // fails it; the others are answered), and the coordinator then exits.
    g_watched_server.store(-1);
    const int64_t lc0 = ProcCpuMs(s.pid);
    const int64_t lt0 = MonoNs();
    int64_t left_ok = 0, leave_end = lt0;
    for (const std::string& ans : Broadcast(ch, "leave")) {
      std::vector<int64_t> v = Ints(ans);
      if (v.size() == 4) {
        left_ok += v[1];
        leave_end = std::max(leave_end, v[3]);
      }
    }
    st.Set("leave_all_ms", (leave_end - lt0) / 1e6);
    st.Set("leave_ok", static_cast<double>(left_ok));
    st.Set("leave_server_cpu_ms", static_cast<double>(ProcCpuMs(s.pid) - lc0));
    Report(st);
  }
  StopGenerators(&ch);
  StopServer(&s);
}

void RunBurst(const Config& c) {
  const int n = c.agents;
  Figures f;
  f.phase = "burst";
  Server s = StartServer(c, absl::StrCat(n), 0, 0.5, "burst");
  std::vector<Child> ch = StartGenerators(c);
  usleep(200000);
  const ClientStats cs0 = Stats(ch);
  const int64_t cpu0 = ProcCpuMs(s.pid);
  const int64_t wait0 = ProcRunQueueWaitMs(s.pid);
  int64_t first_sent = INT64_MAX, last_sent = 0;
  for (const std::string& a : Broadcast(ch, absl::StrCat("join 0 ", n))) {
    std::vector<int64_t> v = Ints(a);
    if (v.size() == 3 && v[0] > 0) {
      first_sent = std::min(first_sent, v[1]);
      last_sent = std::max(last_sent, v[2]);
    }
  }
  Joined j = WaitAll(ch, 1, c.join_timeout_s + 5);
  const int64_t cpu1 = ProcCpuMs(s.pid);
  const int64_t wait1 = ProcRunQueueWaitMs(s.pid);
  const ClientStats cs1 = Stats(ch);
  CheckRound(&f, j, n, n, 1);
  f.Set("server_runqueue_wait_ms", static_cast<double>(wait1 - wait0));
  AddLatencies(&f, "response_after_last_join", j.recv, last_sent);
  AddLatencies(&f, "response_after_first_join", j.recv, first_sent);
  std::vector<int64_t> closed = LogTimes(s.log_path, "round 1 closed");
  if (!closed.empty())
    f.Set("server_round_closed_after_first_join_ms", (closed[0] - first_sent) / 1e6);
  f.Set("joins_sent_spread_ms", (last_sent - first_sent) / 1e6);
  f.Set("server_cpu_ms", static_cast<double>(cpu1 - cpu0));
  f.Set("client_cpu_ms", static_cast<double>(cs1.cpu_ms - cs0.cpu_ms));
  AddServerFigures(&f, s.pid);
  Report(f);
  StopGenerators(&ch);
  StopServer(&s);
}

// One loss event on a running elastic job: `lo..hi` lost; every survivor must
// hold round `round`.
void LossEvent(const Config& c, const Server& s, const std::vector<Child>& ch,
               const std::string& phase, int lo, int hi, int survivors, uint64_t round,
               double min_wait_s) {
  Figures f;
  f.phase = phase;
  const bool silent = c.loss_mode == "silent";
  const size_t open_before = LogTimes(s.log_path, "opening round").size();
  const ClientStats cs0 = Stats(ch);
  const int64_t cpu0 = ProcCpuMs(s.pid);
  const int64_t wait0 = ProcRunQueueWaitMs(s.pid);
  int64_t lost_at = INT64_MAX;
  int lost = 0;
  for (const std::string& a :
       Broadcast(ch, absl::StrCat("kill ", lo, " ", hi, " ", silent ? 1 : 0))) {
    std::vector<int64_t> v = Ints(a);
    if (v.size() == 2 && v[0] > 0) {
      lost += static_cast<int>(v[0]);
      lost_at = std::min(lost_at, v[1]);
    }
  }
  Joined j = WaitAll(ch, round, static_cast<int>(min_wait_s) + c.join_timeout_s);
  const int64_t cpu1 = ProcCpuMs(s.pid);
  const int64_t wait1 = ProcRunQueueWaitMs(s.pid);
  const ClientStats cs1 = Stats(ch);
  CheckRound(&f, j, survivors, survivors, round);
  f.Set("server_runqueue_wait_ms", static_cast<double>(wait1 - wait0));
  f.Set("lost", lost);
  f.Set("survivors", survivors);
  std::vector<int64_t> opened = LogTimes(s.log_path, "opening round");
  if (opened.size() > open_before) {
    f.Set("server_detection_ms", (opened[open_before] - lost_at) / 1e6);
  } else {
    f.Fail("the coordinator logged no new round");
  }
  int64_t first_rejoin = INT64_MAX;
  for (int64_t r : j.rejoin) {
    if (r > 0) first_rejoin = std::min(first_rejoin, r);
  }
  if (first_rejoin != INT64_MAX) f.Set("client_first_rejoin_ms", (first_rejoin - lost_at) / 1e6);
  AddLatencies(&f, "survivor_assigned_after_loss", j.recv, lost_at);
  std::vector<int64_t> closed = LogTimes(s.log_path, absl::StrCat("round ", round, " closed"));
  if (!closed.empty()) f.Set("server_round_closed_after_loss_ms", (closed[0] - lost_at) / 1e6);
  // The re-round itself: from the restart (the server's "opening round") to
  // its last answer handed to the transport (a Join answered, or an
  // assignment written to a kept stream).
  std::vector<int64_t> sent_all = LogTimes(s.log_path, absl::StrCat("round ", round, ": all "));
  if (!sent_all.empty() && opened.size() > open_before) {
    f.Set("server_every_answer_sent_after_restart_ms", (sent_all[0] - opened[open_before]) / 1e6);
  }
  f.Set("server_cpu_ms", static_cast<double>(cpu1 - cpu0));
  f.Set("client_cpu_ms", static_cast<double>(cs1.cpu_ms - cs0.cpu_ms));
  // Survivors whose READYs got no ack in time and re-joined with a Join call.
  f.Set("client_ready_fallbacks", static_cast<double>(cs1.ready_fallbacks - cs0.ready_fallbacks));
  // REJOIN datagrams the survivors received (repeats included).
  f.Set("client_rejoin_datagrams", static_cast<double>(cs1.rejoins - cs0.rejoins));
  // Rejoins that came down the streams (all of them with
  // --rejoin-datagram=false; else those the datagrams did not settle in time).
  f.Set("client_stream_rejoins", static_cast<double>(cs1.stream_rejoins - cs0.stream_rejoins));
  // DIRECTIVE datagrams the released survivors received (their assignments).
  f.Set("client_directive_datagrams",
        static_cast<double>(cs1.directive_datagrams - cs0.directive_datagrams));
  AddServerFigures(&f, s.pid);
  Report(f);
}

void RunLoss(const Config& c, bool one, bool ten) {
  const int n = c.agents;
  const int tenth = std::max(1, n / 10);
  const int min_nodes = n - 1 - tenth;
  Figures f;
  f.phase = "loss_setup";
  Server s = StartServer(c, absl::StrCat(min_nodes, ":", n), 5, c.loss_last_call_s, "loss");
  std::vector<Child> ch = StartGenerators(c);
  int connected = 0;
  for (const std::string& a : Broadcast(ch, "connect 60"))
    connected += static_cast<int>(Ints(a)[0]);
  if (connected != n) f.Fail(absl::StrCat(connected, " of ", n, " channels connected"));
  // MIN-1 first, then the rest at once: the round must close at N, before
  // the last call that starts at MIN.
  JoinInWaves(ch, s.pid, min_nodes - 1, c.wave);
  Broadcast(ch, absl::StrCat("join ", min_nodes - 1, " ", n));
  Joined j = WaitAll(ch, 1, c.join_timeout_s + 5);
  CheckRound(&f, j, n, n, 1);
  if (!f.ok) {
    f.error += " (raise --loss-last-call if the round closed before every agent joined)";
    Report(f);
    StopGenerators(&ch);
    StopServer(&s);
    return;
  }
  // Every agent's stream open and heartbeats running.
  usleep(static_cast<useconds_t>(std::max(1.0, 2 * c.heartbeat_timeout_s / 10) * 1e6));
  uint64_t round = 1;
  int alive = n;
  if (one) {
    LossEvent(c, s, ch, "loss1", n - 1, n, alive - 1, ++round, c.heartbeat_timeout_s * 2);
    alive -= 1;
    usleep(static_cast<useconds_t>(std::max(1.0, 2 * c.heartbeat_timeout_s / 10) * 1e6));
  }
  if (ten) {
    LossEvent(c, s, ch, "loss10", alive - tenth, alive, alive - tenth, ++round,
              c.heartbeat_timeout_s * 2 + c.loss_last_call_s);
  }
  StopGenerators(&ch);
  StopServer(&s);
}

void PrintResults(const Config& c, double load_before, double load_after) {
  printf(
      "\n%d agents, %d generator process(es) x %d CQ thread(s) (CPU policy %s), %u CPUs%s, load "
      "average %.2f -> %.2f\n",
      c.agents, c.procs, c.cqs, c.generators_sched.c_str(), std::thread::hardware_concurrency(),
      c.server_cpu >= 0 ? absl::StrFormat(" (coordinator alone on CPU %d)", c.server_cpu).c_str()
                        : "",
      load_before, load_after);
  for (const Figures& f : g_results) {
    printf("%-8s %s\n", f.phase.c_str(), f.ok ? "ok" : absl::StrCat("FAILED: ", f.error).c_str());
    for (const auto& [k, v] : f.values) printf("    %-45s %12.1f\n", k.c_str(), v);
  }
  std::string json = absl::StrFormat(
      "{\"bench\":\"coordinator_load\",\"agents\":%d,\"procs\":%d,\"cqs\":%d,\"cpus\":%u,"
      "\"heartbeat_timeout_s\":%g,\"loss_mode\":\"%s\",\"generators_sched\":\"%s\","
      "\"server_cpu\":%d,\"load_before\":%.2f,\"load_after\":%.2f,\"phases\":{",
      c.agents, c.procs, c.cqs, std::thread::hardware_concurrency(), c.heartbeat_timeout_s,
      c.loss_mode, c.generators_sched, c.server_cpu, load_before, load_after);
  bool first = true;
  for (const Figures& f : g_results) {
    std::string err = f.error;
    err.erase(
        std::remove_if(err.begin(), err.end(), [](char ch) { return ch == '"' || ch == '\\'; }),
        err.end());
    absl::StrAppend(&json, first ? "" : ",", "\"", f.phase, "\":{\"ok\":", f.ok ? "true" : "false");
    if (!f.ok) absl::StrAppend(&json, ",\"error\":\"", err, "\"");
    for (const auto& [k, v] : f.values) absl::StrAppendFormat(&json, ",\"%s\":%.3f", k, v);
    absl::StrAppend(&json, "}");
    first = false;
  }
  absl::StrAppend(&json, "}}");
  printf("%s\n", json.c_str());
}

}  // namespace

int Main(int argc, char** argv) {
  // As `trainlet` does (common/deadlock_detection.h): off in release builds.
  // The generators hold one mutex per simulated agent; with the detection
  // on (Debian's Abseil is built without NDEBUG) their heartbeat threads
  // spent their time in its lock graph, on the coordinator's CPUs.
  trainlet::ConfigureDeadlockDetection();
  Config c;
  std::string v;
  UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--agents", &v)) {
      bad.Int("--agents", v, &c.agents);
    } else if (Flag(argv[i], "--procs", &v)) {
      bad.Int("--procs", v, &c.procs);
    } else if (Flag(argv[i], "--cqs", &v)) {
      bad.Int("--cqs", v, &c.cqs);
    } else if (Flag(argv[i], "--phases", &v)) {
      c.phases = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (Flag(argv[i], "--wave", &v)) {
      bad.Int("--wave", v, &c.wave);
    } else if (Flag(argv[i], "--steady", &v)) {
      bad.Int("--steady", v, &c.steady_s);
    } else if (Flag(argv[i], "--heartbeat-timeout", &v)) {
      bad.Number("--heartbeat-timeout", v, &c.heartbeat_timeout_s);
    } else if (Flag(argv[i], "--heartbeat-interval", &v)) {
      bad.Number("--heartbeat-interval", v, &c.heartbeat_interval_s);
    } else if (Flag(argv[i], "--acks", &v)) {
      bad.Bool("--acks", v, &c.acks);
    } else if (Flag(argv[i], "--server-cpu", &v)) {
      bad.Int("--server-cpu", v, &c.server_cpu);
      const int cpus = static_cast<int>(std::thread::hardware_concurrency());
      bad.Require(c.server_cpu < cpus && cpus >= 2,
                  absl::StrCat("--server-cpu=", v, ": needs a CPU below ", cpus,
                               " and at least 2 CPUs (one for the generators)"));
    } else if (Flag(argv[i], "--keep-logs", &v)) {
      bad.Bool("--keep-logs", v, &c.keep_logs);
    } else if (Flag(argv[i], "--rejoin-by-datagram", &v)) {
      bad.Bool("--rejoin-by-datagram", v, &c.rejoin_by_datagram);
    } else if (Flag(argv[i], "--release", &v)) {
      bad.Bool("--release", v, &c.release);
    } else if (Flag(argv[i], "--rejoin-datagram", &v)) {
      bad.Bool("--rejoin-datagram", v, &c.rejoin_datagram);
    } else if (Flag(argv[i], "--udp-liveness", &v)) {
      bad.Bool("--udp-liveness", v, &c.udp_liveness);
    } else if (Flag(argv[i], "--join-timeout", &v)) {
      bad.Int("--join-timeout", v, &c.join_timeout_s);
    } else if (Flag(argv[i], "--loss-mode", &v)) {
      bad.OneOf("--loss-mode", v, {"close", "silent"});
      c.loss_mode = v;
    } else if (Flag(argv[i], "--loss-last-call", &v)) {
      bad.Number("--loss-last-call", v, &c.loss_last_call_s);
    } else if (Flag(argv[i], "--server-arg", &v)) {
      c.server_args.push_back(v);
    } else if (Flag(argv[i], "--server-env", &v)) {
      bad.Require(v.find('=') != std::string::npos,
                  absl::StrCat("--server-env=", v, ": not NAME=VALUE"));
      c.server_env.push_back(v);
    } else if (Flag(argv[i], "--generators-sched", &v)) {
      bad.OneOf("--generators-sched", v, {"normal", "idle"});
      c.generators_sched = v;
    } else if (Flag(argv[i], "--trainlet", &v)) {
      c.trainlet = v;
    } else {
      bad.Unknown(argv[i]);
    }
  }
  for (const std::string& p : c.phases) {
    bad.OneOf("--phases", p, {"last", "steady", "burst", "wave", "loss1", "loss10"});
  }
  bad.AtLeast("--agents", c.agents, 20);
  bad.InRange("--procs", c.procs, 1, 64);
  bad.AtLeast("--cqs", c.cqs, 1);
  bad.Require(c.wave >= 1 && c.wave < c.agents,
              absl::StrCat("--wave=", c.wave, ": at least 1 and below --agents (", c.agents, ")"));
  bad.AtLeast("--steady", c.steady_s, 1);
  bad.Require(c.heartbeat_timeout_s > 0, "--heartbeat-timeout: above 0 seconds");
  bad.AtLeast("--join-timeout", c.join_timeout_s, 1);
  bad.Executable("--trainlet", c.trainlet);
  if (bad.Print(argv[0])) {
    fprintf(stderr,
            "usage: %s --trainlet=PATH [--agents=1000 (>= 20)] [--procs=2] [--cqs=2]\n"
            "    [--phases=last,steady,burst,wave,loss1,loss10] [--wave=100] [--steady=SECONDS]\n"
            "    [--heartbeat-timeout=SECONDS (5)] [--heartbeat-interval=SECONDS (0: the "
            "coordinator's)]\n"
            "    [--udp-liveness=true|false (true: the agent's default; false: Reports only)]\n"
            "    [--acks=true|false (true: take the coordinator's liveness acks, as the agent\n"
            "     does; false: ignore them, as the agent before them)]\n"
            "    [--rejoin-by-datagram=true|false (true: after a Rejoin that allows it, READY\n"
            "     datagrams and the assignment on the stream, as the agent; false: a Join call)]\n"
            "    [--rejoin-datagram=true|false (true: take the Rejoin as a REJOIN datagram when\n"
            "     the coordinator sends one, as the agent; false: only from the stream)]\n"
            "    [--release=true|false (true: take the coordinator's release of the stream in a\n"
            "     round of its --release-streams-from nodes or more, as the agent)]\n"
            "    [--join-timeout=SECONDS (600)] [--loss-mode=close|silent] "
            "[--loss-last-call=SECONDS (1)]\n"
            "    [--server-arg=ARG]... [--server-env=NAME=VALUE]...\n"
            "    [--generators-sched=normal|idle] [--keep-logs=false|true]\n"
            "    [--server-cpu=N (the coordinator alone on CPU N, the generators on the others)]\n",
            argv[0]);
    return 64;
  }
  // Descriptors: one connection per agent in the generators (a process holds
  // at most all of them), one per agent in the server (which raises its own
  // limit and checks its budget).
  if (!RaiseDescriptorLimitFor(c.agents)) return 1;
  InstallSignalHandlers();
  WatchServer();
  g_tmpdir = MakeRunDir("coordinator_load", kToken);
  if (g_tmpdir.empty()) return 1;
  auto has = [&](const char* p) {
    return std::find(c.phases.begin(), c.phases.end(), p) != c.phases.end();
  };
  const double load_before = LoadAvg();
  const int64_t t0 = MonoNs();
  if (has("last") || has("steady")) RunClosingPattern(c, "last", 1, has("steady"));
  if (has("burst")) RunBurst(c);
  if (has("wave")) RunClosingPattern(c, "wave", c.wave, false);
  if (has("loss1") || has("loss10")) RunLoss(c, has("loss1"), has("loss10"));
  const double load_after = LoadAvg();
  PrintResults(c, load_before, load_after);
  printf("total %.1f s\n", (MonoNs() - t0) / 1e9);
  bool all_ok = true;
  for (const Figures& f : g_results) all_ok &= f.ok;
  KillAll();
  // Keep the server logs of a failed run (or when asked).
  if (all_ok && !c.keep_logs) {
    std::error_code ec;
    std::filesystem::remove_all(g_tmpdir, ec);
  } else {
    fprintf(stderr, "server logs kept in %s\n", g_tmpdir.c_str());
  }
  return all_ok ? 0 : 1;
}

}  // namespace trainlet::bench

int main(int argc, char** argv) { return trainlet::bench::Main(argc, argv); }

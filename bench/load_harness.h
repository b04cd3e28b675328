// What the load generators share (bench/coordinator_load.cc,
// bench/controller_load.cc): generator processes forked before any gRPC
// object and driven over pipes (one text command, one text answer each), the
// pids to kill on the way out, and the server process's figures read from
// /proc. Not for production code: errors print and exit.
//
// Threading: everything from the parent's main thread, except KillTracked,
// which is async-signal-safe (signal handlers, a watchdog thread).
#ifndef TRAINLET_BENCH_LOAD_HARNESS_H_
#define TRAINLET_BENCH_LOAD_HARNESS_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainlet::bench {

// CLOCK_MONOTONIC in ns: shared by every process of a run.
int64_t MonoNs();

// Processes to kill when the run ends or is interrupted (the server, the
// generators).
void TrackPid(pid_t pid);
void UntrackPid(pid_t pid);
// SIGKILL to every tracked process; async-signal-safe.
void KillTracked();
// SIGKILL, reap and forget every tracked process.
void KillAll();
// SIGINT and SIGTERM kill the tracked processes and exit 128 + signal;
// SIGPIPE is ignored.
void InstallSignalHandlers();

// A generator process and the two ends of its pipes.
struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;
};

// Forks `procs` generator processes; child k runs serve(k, in, out) and exits.
// Each dies with the parent (PR_SET_PDEATHSIG). sched_idle: each runs under
// SCHED_IDLE (set before it starts a thread, so that all of them inherit it).
std::vector<Child> StartGenerators(int procs, bool sched_idle,
                                   const std::function<void(int k, FILE* in, FILE* out)>& serve);
// Sends `cmd` (one line) to every generator at once; returns their one-line
// answers. A generator that died ends the run (exit 1).
std::vector<std::string> Broadcast(const std::vector<Child>& children, const std::string& cmd);
// The generator's side: reads one command a line from `in`, split on spaces
// (never empty), and answers what `handle` returns on one line of `out`
// ("unknown-command" for nullopt). "quit" is answered "bye" and the process
// exits at once (tearing down thousands of channels takes long and measures
// nothing; the kernel closes the sockets), as it does when `in` closes.
[[noreturn]] void ServeCommands(
    FILE* in, FILE* out,
    const std::function<std::optional<std::string>(const std::vector<std::string>& words)>& handle);
// Sends "quit", then reaps them.
void StopGenerators(std::vector<Child>* children);

// Raises the soft open-file limit to the hard one; false (with a message
// on stderr) when that leaves fewer than `agents` + 64 descriptors: one
// connection per simulated agent, and some to spare.
bool RaiseDescriptorLimitFor(int agents);
// A fresh directory "/tmp/PREFIX.XXXXXX" holding `token` in a file "token"
// (mode 0600); empty (with a message on stderr) when it cannot be made.
std::string MakeRunDir(const std::string& prefix, const std::string& token);

// A free TCP port on 127.0.0.1 (bound, then released), and whether something
// listens there.
int FreePort();
bool PortOpen(int port);
// Copies a server's log to stderr, indented, after `why` (at most
// `max_lines` lines).
void PrintServerLog(const std::string& why, const std::string& path, int max_lines = 100000);

// /proc figures of a process: utime + stime in ms; a /proc/PID/status field
// in kB ("VmRSS:"); the time its threads waited for a CPU, in ms (the second
// field of /proc/PID/task/*/schedstat: what other work on the machine cost
// it).
int64_t ProcCpuMs(pid_t pid);
int64_t ProcStatusKb(pid_t pid, const char* key);
int64_t ProcRunQueueWaitMs(pid_t pid);
// The 1-minute load average.
double LoadAvg();
// The p-th percentile (0-100, nearest rank) of `v`; 0 when empty.
double Percentile(std::vector<double> v, double p);

}  // namespace trainlet::bench

#endif  // TRAINLET_BENCH_LOAD_HARNESS_H_

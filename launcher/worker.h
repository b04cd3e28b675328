// Plain descriptions of a supervised process: what to start (ProcessSpec)
// and how it ended (ProcessExit). Value types; no behaviour.
//
// A process is either a *worker* (one of the round's local ranks: started
// together by WorkerGroup::Start, stopped together, never restarted by the
// supervisor: a failed worker ends the round) or a *helper* (a daemon the
// agent needs beside the workers, such as sshd for MPI: started on its own,
// restarted by the supervisor according to its RestartPolicy, its exits
// reported as their own events).
#ifndef TRAINLET_LAUNCHER_WORKER_H_
#define TRAINLET_LAUNCHER_WORKER_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace trainlet {
namespace launcher {

enum class ProcessRole { kWorker, kHelper };

// Helpers only; workers are always kNever (rounds restart workers).
enum class RestartPolicy {
  kNever,      // report the exit, leave it dead.
  kOnFailure,  // restart after a non-zero exit or a signal.
  kAlways,     // restart after any exit.
};

// Where a process's stdout and stderr go.
enum class OutputMode {
  // Straight to the agent's stdout/stderr (the process writes them itself).
  kDirect,
  // Through the agent, unchanged (--progress-from-output without
  // --prefix-output): the agent reads a copy for progress and writes the
  // bytes as they came, from its own thread, never blocking on the reader.
  kRelay,
  // Through the agent, each line as "[rank <global_rank>] <line>" (workers)
  // or "[<name>] <line>" (helpers) (--prefix-output).
  kPrefix,
};

// Whether the agent reads this process's output (kRelay or kPrefix).
inline bool Relayed(OutputMode mode) { return mode != OutputMode::kDirect; }

struct ProcessSpec {
  ProcessRole role = ProcessRole::kWorker;
  // For logs and helper events: "sshd". Workers may leave it empty (their
  // ranks name them).
  std::string name;
  RestartPolicy restart = RestartPolicy::kNever;
  // Workers: their ranks.
  int local_rank = 0;
  int global_rank = 0;
  // argv[0] is the COMMAND as the user gave it; it is resolved against the
  // PATH in `env` (see command_resolver.h) and passed to the process unchanged.
  std::vector<std::string> argv;
  // The complete environment, "KEY=VALUE" each; nothing is inherited.
  std::vector<std::string> env;
  // Where this process's stdout/stderr go (OutputMode).
  OutputMode output = OutputMode::kDirect;
  // Give this process's group the terminal on the agent's stdin as its
  // foreground process group (like tini), so that an interactive worker
  // (pdb, input()) can read it. Only meaningful for a single worker.
  bool foreground_tty = false;
  // Placement (--bind-numa), applied in the child before exec: the CPU
  // affinity when `cpus` is non-empty (a failure fails the start), and the
  // memory policy "preferred node" when numa_node >= 0 (best effort: container
  // seccomp profiles often refuse set_mempolicy without CAP_SYS_NICE; see
  // MemoryPolicyAvailable() in worker_spawner.h).
  std::vector<int> cpus;
  int numa_node = -1;
  // Workers: become the warm standby of this local rank, if one is ready,
  // rather than start cold (WorkerGroup::StartStandby). The standby was
  // started with this spec's argv rewritten for it; it is handed
  // `standby_env` (the environment the interpreter is to see), or `env` when
  // that is empty.
  bool from_standby = false;
  std::vector<std::string> standby_env;
  // Helpers: false for one that starts no processes (the agent's store), so
  // that the orphans at a round's end are still known to be the workers'
  // and are killed (Supervisor; docs/pid1.md).
  bool leaves_orphans = true;
};

struct ProcessExit {
  ProcessRole role = ProcessRole::kWorker;
  std::string name;
  int local_rank = -1;
  int global_rank = -1;
  pid_t pid = -1;
  // Shell style: the exit status, or 128+N if signal N killed it (see
  // ExitCodeFromWaitStatus in common/exit_codes.h).
  int exit_code = 0;
  // Helpers: the supervisor will start it again (RestartPolicy).
  bool will_restart = false;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_WORKER_H_

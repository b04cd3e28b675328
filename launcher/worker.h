// Plain descriptions of a local worker process: what to start (WorkerSpec)
// and how it ended (WorkerExit). Value types; no behaviour.
#ifndef TRAINLET_LAUNCHER_WORKER_H_
#define TRAINLET_LAUNCHER_WORKER_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace trainlet {
namespace launcher {

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  // argv[0] is the COMMAND as the user gave it; it is resolved against the
  // PATH in `env` (see command_resolver.h) and passed to the worker unchanged.
  std::vector<std::string> argv;
  // The complete environment, "KEY=VALUE" each; nothing is inherited.
  std::vector<std::string> env;
  // If true, each stdout/stderr line of this worker is written as
  // "[rank <global_rank>] <line>" to the agent's stdout/stderr respectively.
  // If false, the worker writes to them directly.
  bool prefix_output = false;
};

struct WorkerExit {
  int local_rank = -1;
  int global_rank = -1;
  pid_t pid = -1;
  // Shell style: the exit status, or 128+N if signal N killed the worker
  // (see ExitCodeFromWaitStatus in common/exit_codes.h).
  int exit_code = 0;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_WORKER_H_

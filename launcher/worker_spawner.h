// Starts one worker process with clone(CLONE_VM|CLONE_VFORK)+execve(), as
// posix_spawn does (fork() would copy the agent's page tables): its own
// process group, default signal dispositions and an empty signal mask, PR_SET_PDEATHSIG
// (SIGKILL), exactly the environment given, stdout/stderr either to the
// given fds or to fresh pipes, and with spec.foreground_tty the terminal on
// stdin (tcsetpgrp, done before exec while every signal is blocked), and
// spec.cpus / spec.numa_node placement. Exec failures come back
// through a CLOEXEC pipe, so "started" means the execve succeeded.
//
// Threading: may be called from any thread, but the worker gets SIGKILL when
// the calling THREAD exits (PR_SET_PDEATHSIG tracks the forking thread), so
// call it from a thread that outlives the worker. Between clone and exec the
// child only calls async-signal-safe functions, so this is safe in a
// multithreaded (gRPC) process. Does not reap: the caller owns the child.
#ifndef TRAINLET_LAUNCHER_WORKER_SPAWNER_H_
#define TRAINLET_LAUNCHER_WORKER_SPAWNER_H_

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "launcher/worker.h"

namespace trainlet {
namespace launcher {

struct SpawnedWorker {
  pid_t pid = -1;  // also the process group id
  // Read ends (O_NONBLOCK, O_CLOEXEC) of the worker's stdout/stderr when
  // Relayed(spec.output); -1 otherwise. The caller closes them.
  int stdout_pipe = -1;
  int stderr_pipe = -1;
};

// A relayed worker's stdout and stderr pipes (ProcessSpec::output),
// shared by a cold start and a standby's handover: made O_CLOEXEC, the
// write ends handed to the process, then the read ends (made O_NONBLOCK)
// released into a SpawnedWorker. Whatever is still open is closed at the
// end. Thread-compatible.
class OutputPipes {
 public:
  OutputPipes() = default;
  ~OutputPipes();
  OutputPipes(const OutputPipes&) = delete;
  OutputPipes& operator=(const OutputPipes&) = delete;
  // ResourceExhausted naming `what` when the pipes cannot be made.
  absl::Status Make(const std::string& what);
  int stdout_write() const { return out_[1]; }
  int stderr_write() const { return err_[1]; }
  void CloseWriteEnds();
  // The worker `pid` with the read ends; they are the caller's now.
  SpawnedWorker Release(pid_t pid);

 private:
  int out_[2] = {-1, -1};
  int err_[2] = {-1, -1};
};

// Resolves spec.argv[0] with ResolveCommand (PATH taken from spec.env) and
// starts the worker. When !Relayed(spec.output) the worker's stdout/stderr are
// `stdout_fd`/`stderr_fd`. Errors: NotFound (127), PermissionDenied (126),
// ResourceExhausted (fork/pipe limits), Internal; the message names the
// command. On error no child is left behind. With `control_fd` >= 0 the
// child has it as fd kControlFd (a standby's control socket,
// standby_pool.h); every other fd of the agent is CLOEXEC.
inline constexpr int kControlFd = 3;
absl::StatusOr<SpawnedWorker> SpawnWorker(const ProcessSpec& spec, int stdout_fd, int stderr_fd,
                                          int control_fd = -1);

// Whether this process may set a memory policy (set_mempolicy(2), tried with
// MPOL_DEFAULT on the calling thread, which changes nothing): false under a
// seccomp profile that refuses it, or on a kernel without NUMA.
bool MemoryPolicyAvailable();

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_WORKER_SPAWNER_H_

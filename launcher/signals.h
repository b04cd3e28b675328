// Process-wide signal setup for a supervisor that may run as PID 1.
//
// The agent never installs signal handlers: SIGCHLD and the forwarded signals
// are blocked in every thread and read synchronously from a signalfd by the
// Supervisor (see supervisor.h). Blocking must happen in main() before any
// thread exists, because threads inherit the mask of the thread that creates
// them; a thread with a forwarded signal unblocked would receive (and die of)
// it instead of the signalfd.
#ifndef TRAINLET_LAUNCHER_SIGNALS_H_
#define TRAINLET_LAUNCHER_SIGNALS_H_

#include <signal.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainlet {
namespace launcher {

// Call once at the start of main(), before any thread exists. Blocks SIGCHLD
// and ForwardedSignals() in the calling thread; ignores SIGPIPE (a closed
// stdout must not kill the agent), and, as tini does, SIGTTOU and SIGTTIN (so
// that the agent can take the terminal back from a foreground worker, and is
// never stopped for writing to the terminal from the background); and,
// unless this process is PID 1, makes it a child subreaper so that orphaned
// worker descendants are reparented to it and reaped. SIGTSTP, SIGTTIN and
// SIGTTOU are not forwarded. Workers get every disposition back to the
// default and an empty mask (worker_spawner.h). Idempotent. Fails only if a
// syscall fails.
absl::Status PrepareProcessForSupervision();

// The signals relayed to every worker process group:
// SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2.
const std::vector<int>& ForwardedSignals();

// True for SIGTERM, SIGINT, SIGHUP and SIGQUIT: on these the agent starts its
// grace period. False for SIGUSR1/SIGUSR2, which are only relayed.
bool IsTerminatingSignal(int sig);

// SIGCHLD plus ForwardedSignals(): the set PrepareProcessForSupervision()
// blocks and the Supervisor's signalfd reads.
sigset_t SupervisedSignalSet();

// A non-blocking, close-on-exec signalfd of SupervisedSignalSet(), for the
// one reader of those signals (the Supervisor, or a SignalWait). The caller
// closes it. FailedPrecondition when one of them is not blocked in the
// calling thread (PrepareProcessForSupervision() did not run before it);
// Internal when signalfd(2) fails.
absl::StatusOr<int> OpenSupervisedSignalFd();

// True if stdin is a terminal whose foreground process group is this
// process's group: the agent then may hand it to a single local worker
// (ProcessSpec::foreground_tty), as tini does, so that pdb and input() work.
bool StdinIsForegroundTerminal();

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_SIGNALS_H_

// Supervisor: the tini-like core of the agent. It starts the local workers,
// each in its own process group, reaps every child that dies (workers, and as
// PID 1 or child subreaper also orphaned grandchildren), reports worker exits
// shell-style, hands the agent the signals it receives, relays signals to the
// workers' process groups, pumps "[rank N] "-prefixed worker output, and on
// shutdown escalates SIGTERM -> grace period -> SIGKILL. No gRPC in here.
//
//   Start() --> workers running --Wait()--> kWorkerExited / kSignal / kWakeup / kTimeout
//                      |                               ^ (caller decides: SignalAll, StopAll)
//                      +--StopAll(grace): SIGTERM, wait <= grace, SIGKILL groups, reap
//
// Threading model: one owning thread calls every method except Wake(), which
// any thread may call (it only writes an eventfd) to interrupt Wait(). The
// thread that calls Start() must live as long as the workers: they get
// PR_SET_PDEATHSIG(SIGKILL), which fires when the forking THREAD exits, not
// the process; in the agent that is the main thread.
//
// Process-wide assumptions (the agent's, documented in docs/pid1.md):
//  - PrepareProcessForSupervision() ran in main() before any thread, so
//    SIGCHLD and the forwarded signals are blocked everywhere and arrive only
//    through this object's signalfd. Create() checks the calling thread.
//  - At most one Supervisor per process, and nothing else in the process
//    waits for children: Wait() calls waitpid(-1, WNOHANG) and would steal
//    them. Spawn helpers through the Supervisor, or not at all.
#ifndef TRAINLET_LAUNCHER_SUPERVISOR_H_
#define TRAINLET_LAUNCHER_SUPERVISOR_H_

#include <sys/types.h>
#include <unistd.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/output_prefixer.h"
#include "launcher/worker.h"

namespace trainlet {
namespace launcher {

class Supervisor {
 public:
  struct Options {
    // Where workers' output goes (prefixed or not). Not owned; must stay open
    // for the Supervisor's lifetime. Injectable for tests.
    int stdout_fd = STDOUT_FILENO;
    int stderr_fd = STDERR_FILENO;
  };

  // Creates the signalfd (SIGCHLD + ForwardedSignals()) and the eventfd for
  // Wake(). FailedPrecondition if those signals are not blocked in the
  // calling thread (PrepareProcessForSupervision() was not called).
  static absl::StatusOr<std::unique_ptr<Supervisor>> Create(const Options& options);

  // SIGKILLs every remaining worker process group (also groups whose leader
  // already exited), reaps them, flushes their output and closes the fds.
  ~Supervisor();

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts all workers (see worker_spawner.h for what each child gets); call
  // it from the thread that outlives the workers (see above). If any worker
  // fails to start, those already started are SIGKILLed and reaped and the
  // error is returned: NotFound (exit 127), PermissionDenied (126), others
  // (see ExitCodeForSpawnError); the message names the command. May be
  // called again once running_count() == 0 (a new round); leftover members
  // of the previous workers' process groups are SIGKILLed first.
  // FailedPrecondition while workers are running.
  absl::Status Start(const std::vector<WorkerSpec>& workers);

  enum class EventType { kWorkerExited, kSignal, kWakeup, kTimeout };
  struct Event {
    EventType type = EventType::kTimeout;
    WorkerExit exit;  // kWorkerExited
    int signal = 0;   // kSignal: one of ForwardedSignals()
  };

  // Blocks until a worker exits (one exit per call; further ones are queued),
  // a forwarded signal arrives (it is NOT relayed to the workers: the caller
  // decides, e.g. SignalAll or StopAll), Wake() was called, or `timeout`
  // passes (absl::InfiniteDuration() to wait forever; zero still collects
  // whatever is ready). Queued exits come before signals, signals before
  // wakeups. Meanwhile reaps every dead child and pumps prefixed output; a
  // worker's available output is written before its exit is reported.
  Event Wait(absl::Duration timeout);

  // Interrupts Wait(); thread-safe and async-signal-safe.
  void Wake();

  // kill(-pgid, sig) for every worker process group that may still have
  // members, including groups whose leader has exited.
  void SignalAll(int sig);

  // Graceful stop: SignalAll(SIGTERM), keep reaping and pumping output until
  // every worker group is empty or `grace` passes, then SIGKILL every group
  // and reap. Returns the worker exits not yet returned by Wait(), in the
  // order observed. Signals and wakeups arriving meanwhile are kept for
  // later Wait() calls.
  std::vector<WorkerExit> StopAll(absl::Duration grace);

  // Workers whose leader process has not been reaped yet.
  int running_count() const;

  // The pid (= process group id) of the worker with `local_rank` from the
  // latest Start(), or -1.
  pid_t worker_pid(int local_rank) const;

 private:
  struct Stream {
    int fd = -1;  // read end of the worker's pipe; -1 when not prefixed or at EOF
    std::unique_ptr<OutputPrefixer> prefixer;
  };
  struct Worker {
    int local_rank = 0;
    int global_rank = 0;
    pid_t pid = -1;
    bool reaped = false;      // the leader has been waited for
    bool group_gone = false;  // kill(-pid, 0) said ESRCH after the leader was reaped
    Stream out;
    Stream err;
  };

  Supervisor(const Options& options, int signal_fd, int wake_fd);

  void ReapChildren();
  // One poll() over the signalfd, the eventfd and the output pipes.
  void PollOnce(absl::Duration timeout);
  void ReadSignals();
  // Reads what is available; once if !until_drained. Closes the stream on EOF.
  void ReadStream(Stream* stream, bool until_drained);
  void CloseStream(Stream* stream);
  bool AnyGroupAlive();
  // SIGKILL every group and wait (bounded) until all are empty and reaped.
  void KillAllAndReap();
  // Drains and closes the workers' pipes, then forgets the workers.
  void ForgetWorkers();
  std::optional<Event> TakeQueuedEvent();
  Worker* FindWorker(pid_t pid);

  const Options options_;
  const int signal_fd_;
  const int wake_fd_;
  std::vector<Worker> workers_;
  std::deque<WorkerExit> pending_exits_;
  std::deque<int> pending_signals_;
  bool wake_pending_ = false;
  std::vector<char> read_buffer_;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_SUPERVISOR_H_

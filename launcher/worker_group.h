// WorkerGroup: what the agent's round needs from the process supervisor, as
// a small interface so that the round can be driven by a fake in unit tests
// (launcher/testing/fake_worker_group.h). The real one is launcher::Supervisor.
//
// Nothing here blocks beyond Wait(): stopping is the caller's policy, built
// from SignalWorkers(SIGTERM), a deadline, and SignalWorkers(SIGKILL); the
// group reports kWorkersGone once every worker process group is empty.
//
// Events, in the order Wait() returns them when several are ready: worker
// exits, helper exits, kWorkersGone, signals, a readable watched fd,
// wakeups; kTimeout when the timeout passed with none.
//
// Threading: one owning thread calls everything except Wake(), which any
// thread may call (to interrupt Wait()).
#ifndef TRAINLET_LAUNCHER_WORKER_GROUP_H_
#define TRAINLET_LAUNCHER_WORKER_GROUP_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "launcher/worker.h"

namespace trainlet {
namespace launcher {

class WorkerGroup {
 public:
  enum class EventType {
    kWorkerExited,  // exit: a worker's leader process ended.
    kHelperExited,  // exit: a helper ended (exit.will_restart says what next).
    kWorkersGone,   // once per Start(), after the last worker exit, when every
                    // worker process group is empty (grandchildren included).
    kSignal,        // signal: one of ForwardedSignals(); NOT relayed.
    kFdReady,       // an fd given to WatchFd() is readable; the caller
                    // reads it (until then Wait() returns this at once).
    kWakeup,        // Wake() was called.
    kTimeout,
  };
  struct Event {
    EventType type = EventType::kTimeout;
    ProcessExit exit;  // kWorkerExited, kHelperExited
    int signal = 0;    // kSignal
  };

  virtual ~WorkerGroup() = default;

  // Starts the round's workers (ProcessRole::kWorker). If one fails to start,
  // those already started are killed and reaped and the error is returned:
  // NotFound (exit 127), PermissionDenied (126), others (see
  // ExitCodeForSpawnError); the message names the command.
  // FailedPrecondition while workers of an earlier Start() are running;
  // leftover members of their process groups are SIGKILLed first.
  virtual absl::Status Start(const std::vector<ProcessSpec>& workers) = 0;

  // Starts a helper (ProcessRole::kHelper); it lives across rounds and is
  // restarted according to spec.restart.
  virtual absl::Status StartHelper(const ProcessSpec& helper) = 0;

  // Blocks until an event is ready or `timeout` passes
  // (absl::InfiniteDuration() waits forever; zero still collects what is
  // ready). Meanwhile reaps every dead child and relays prefixed output.
  virtual Event Wait(absl::Duration timeout) = 0;

  // Interrupts Wait() from any thread.
  virtual void Wake() = 0;

  // kill(-pgid, sig) for every worker process group that may still have
  // members, including groups whose leader has exited.
  virtual void SignalWorkers(int sig) = 0;

  // Workers of the latest Start() whose leader has not been reaped yet.
  virtual int running_workers() const = 0;

  // Also wait for `fd` (e.g. an inotify fd, a UDP socket) to become
  // readable: Wait() returns kFdReady while it is. Each of the
  // kWatchedFdSlots slots watches one fd; -1 stops watching. Not owned. The
  // default ignores it (the caller then polls on its timeouts).
  static constexpr int kWatchedFdSlots = 2;
  virtual void WatchFd(int fd, int slot = 0) {
    (void)fd;
    (void)slot;
  }

  // The pid (= process group id) of the worker with `local_rank` of the
  // latest Start(), or -1; -1 too once its leader has been reaped (the pid
  // may then be reused).
  virtual pid_t worker_pid(int local_rank) const = 0;

  // Warm standbys (launcher/standby_pool.h, docs/warm-workers.md): a
  // process per local rank started ahead of the next round, which Start()
  // makes that rank's worker when its spec says from_standby (else, or when
  // the standby is not ready, the worker starts cold, with one line why).
  // `boot` is written to the standby's control socket before it starts.
  // Replaces a standby of the same local rank. The defaults keep none.
  virtual absl::Status StartStandby(const ProcessSpec& spec, const std::string& boot) {
    (void)spec;
    (void)boot;
    return absl::UnimplementedError("this worker group keeps no standbys");
  }
  // Kills every standby; `why` is logged when there were any (not if empty).
  virtual void DropStandbys(const std::string& why) { (void)why; }
  virtual int ready_standbys() const { return 0; }
  virtual pid_t standby_pid(int local_rank) const {
    (void)local_rank;
    return -1;
  }

  // The last lines (stdout and stderr, in the order read; bounded, see
  // Supervisor) the worker with `local_rank` of the latest Start() wrote,
  // when its output goes through the group (Relayed(ProcessSpec::output));
  // empty otherwise.
  virtual std::vector<std::string> OutputTail(int local_rank) const {
    (void)local_rank;
    return {};
  }
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_WORKER_GROUP_H_

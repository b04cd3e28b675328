// The wait of a command that is a pod's entrypoint but supervises no
// workers (`trainlet coordinator`, `trainlet controller`): it serves until
// SIGTERM, SIGINT, SIGHUP or SIGQUIT (IsTerminatingSignal), read from a
// signalfd as the Supervisor reads them, without the Supervisor's output
// threads, worker bookkeeping and exit-time kills. As PID 1 or a subreaper
// such a process still adopts orphans (an entrypoint script's background
// jobs), so every child that exits meanwhile is reaped: no zombie stays.
// SIGUSR1 and SIGUSR2 mean nothing here and are dropped.
//
// Threading: one thread owns a SignalWait, after
// PrepareProcessForSupervision() ran in main() before any thread (the
// signals then arrive only here). Nothing else in the process may wait for
// children.
#ifndef TRAINLET_LAUNCHER_SIGNAL_WAIT_H_
#define TRAINLET_LAUNCHER_SIGNAL_WAIT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainlet::launcher {

class SignalWait {
 public:
  // Opens the signalfd (OpenSupervisedSignalFd(): FailedPrecondition when
  // the signals are not blocked, Internal when signalfd fails), so that a
  // command finds that out before it starts serving.
  static absl::StatusOr<std::unique_ptr<SignalWait>> Create();
  ~SignalWait();
  SignalWait(const SignalWait&) = delete;
  SignalWait& operator=(const SignalWait&) = delete;

  // The next terminating signal's number, waiting at most `timeout`
  // (absl::InfiniteDuration(): until one comes); 0 when none came in time.
  // Reaps the children that exited meanwhile. A signal that arrived before
  // the call (even before Create()) counts.
  int AwaitTerminatingSignal(absl::Duration timeout);

 private:
  explicit SignalWait(int fd) : fd_(fd) {}

  const int fd_;
};

}  // namespace trainlet::launcher

#endif  // TRAINLET_LAUNCHER_SIGNAL_WAIT_H_

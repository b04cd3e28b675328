// The launcher's wait for its MPI workers: `mpirun` must not start until
// every worker is really reachable over SSH, that is, until one SshProber
// probe of each worker succeeds (name resolves, port answers, pinned host key,
// job key accepted, `true` runs). What it checks, its retries, logs and bound
// as a user sees them: docs/mpi.md, "Readiness that means something".
//
// The states of one worker within a Wait:
//
//               (a thread is free)            kOk
//   PENDING ------------------------> PROBING ------> OK  (stays OK)
//                                      ^   |
//              (its backoff is over)   |   | any other stage
//                                      |   v
//                                     BACKOFF (min_backoff doubling up to max_backoff)
//
//   PENDING, PROBING, BACKOFF --(the bound passes)--> FAILED: DeadlineExceeded
//   any state ------------------------(Cancel)-----> CANCELLED: Cancelled
//
// Time comes from the injected Clock; between attempts the threads wait on a
// condition variable (woken by every result and by Cancel) with a short real
// timeout, so tests drive the waiter with a SimulatedClock, without sleeps.
//
// Threading: Wait() blocks its caller; the probes run on a pool of at most
// `parallelism` threads owned by the waiter. Cancel() and stats() may be
// called from any thread. After Wait returns OK or DeadlineExceeded no probe
// is running; after Cancelled, probes in flight finish (each bounded by
// attempt_timeout) and are joined by the next Wait or the destructor, so the
// prober must outlive the waiter.
#ifndef TRAINLET_MPI_READINESS_H_
#define TRAINLET_MPI_READINESS_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "mpi/ssh_probe.h"

namespace trainlet::mpi {

struct ReadinessOptions {
  absl::Duration timeout = absl::Minutes(5);          // the bound (--ready-timeout)
  absl::Duration attempt_timeout = absl::Seconds(5);  // one Probe
  absl::Duration min_backoff = absl::Milliseconds(50), max_backoff = absl::Seconds(1);
  absl::Duration log_interval = absl::Seconds(5);
  int parallelism = 32;  // probes in flight at once
};

class ReadinessWaiter {
 public:
  // `prober` and `clock` must outlive the waiter.
  ReadinessWaiter(SshProber* prober, Clock* clock, ReadinessOptions options);
  ~ReadinessWaiter();
  ReadinessWaiter(const ReadinessWaiter&) = delete;
  ReadinessWaiter& operator=(const ReadinessWaiter&) = delete;

  // One Wait at a time. Blocks until every target has probed ok (OK), the bound passes
  // (DeadlineExceeded, naming the pending workers, why, and what to check),
  // or Cancel() (Cancelled). InvalidArgument for non-positive durations.
  absl::Status Wait(const std::vector<ProbeTarget>& targets);
  // Any thread, any time; sticky: this and every later Wait return Cancelled.
  void Cancel();

  struct Stats {
    int attempts = 0;  // probes started, over all Waits
  };
  Stats stats() const;

 private:
  struct Target {
    ProbeTarget target;
    bool ok = false;
    bool in_flight = false;
    int attempts = 0;
    ProbeResult last;
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff;
    std::string warned_host_key;  // the detail last warned about
  };
  struct WakeArgs {
    const ReadinessWaiter* self;
    int64_t seen;
  };
  // An absl::Condition: called with mu_ held.
  static bool ShouldWake(WakeArgs* args) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  void ProbeLoop();
  // `cut`: the attempt's timeout was cut to end at the bound.
  void RecordLocked(size_t index, absl::Time started, bool cut, ProbeResult result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "w1 (DNS: ...), w2 (...) and N more".
  std::string PendingListLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs who is pending when log_interval has passed since the last line.
  void MaybeLogProgressLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DeadlineMessageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PendingCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinThreads();

  SshProber* const prober_;
  Clock* const clock_;
  const ReadinessOptions options_;

  mutable absl::Mutex mu_;
  std::vector<Target> targets_ ABSL_GUARDED_BY(mu_);
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  absl::Time next_log_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = true;  // the current Wait has decided
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;    // bumped by results, Cancel, finishing
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<std::thread> threads_;  // only Wait and the destructor touch it
};

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_READINESS_H_

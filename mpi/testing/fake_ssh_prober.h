// A scripted SshProber for unit tests of the readiness wait: no network.
//
// Each target (by node_id) answers from its own script, one result per
// probe; when the script runs out, the last entry repeats (an empty script
// answers kOk). Every probe may advance a SimulatedClock, which stands for
// the time the attempt took; a test that makes each probe take at least the
// waiter's max_backoff never makes the waiter sleep for real. An optional
// hook runs on every probe (to cancel, to check concurrency, ...).
//
// Threading: everything is thread-safe; Probe is called from the waiter's
// threads.
#ifndef TRAINLET_MPI_TESTING_FAKE_SSH_PROBER_H_
#define TRAINLET_MPI_TESTING_FAKE_SSH_PROBER_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "mpi/ssh_probe.h"

namespace trainlet::mpi::testing {

class FakeSshProber : public SshProber {
 public:
  // `clock` may be null (time then never moves); `probe_takes` is how far
  // each probe advances it.
  FakeSshProber(SimulatedClock* clock, absl::Duration probe_takes)
      : clock_(clock), probe_takes_(probe_takes) {}

  // Replaces node_id's script.
  void Script(const std::string& node_id, std::vector<ProbeResult> results);
  // Runs (without the fake's lock held) at the start of every probe.
  void OnProbe(std::function<void(const ProbeTarget&)> hook);

  ProbeResult Probe(const ProbeTarget& target, absl::Duration timeout) override;

  int probes(const std::string& node_id) const;
  int total_probes() const;
  // The most probes that were in flight at once.
  int max_concurrent() const;
  // The timeouts passed, in call order.
  std::vector<absl::Duration> timeouts() const;

 private:
  SimulatedClock* const clock_;
  const absl::Duration probe_takes_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<ProbeResult>> scripts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> probes_ ABSL_GUARDED_BY(mu_);
  std::function<void(const ProbeTarget&)> hook_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_concurrent_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Duration> timeouts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::mpi::testing

#endif  // TRAINLET_MPI_TESTING_FAKE_SSH_PROBER_H_

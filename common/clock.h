// Time as a seam: components take a Clock* so tests can drive time with
// SimulatedClock instead of sleeping.
#ifndef TRAINLET_COMMON_CLOCK_H_
#define TRAINLET_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainlet {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process-wide real (wall) clock: for what is shown to people or sent
  // as a deadline to another host.
  static Clock* Real();
  // CLOCK_MONOTONIC as an absl::Time (its epoch is arbitrary): for local
  // deadlines and timeouts, which a wall-clock step must not stretch or cut.
  static Clock* Monotonic();
};

// A clock that moves only when told to. Thread-safe.
class SimulatedClock : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 50))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet

#endif  // TRAINLET_COMMON_CLOCK_H_

#include "common/clock.h"

#include <time.h>

namespace trainlet {
namespace {
class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};
class MonotonicClock : public Clock {
 public:
  absl::Time Now() const override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::TimeFromTimespec(ts);
  }
};
}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

Clock* Clock::Monotonic() {
  static MonotonicClock* clock = new MonotonicClock();
  return clock;
}
}  // namespace trainlet

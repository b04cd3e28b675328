// A SlowSignalsSampler (progress/slow_signals.h) that reads nothing: it
// records what the agent asks and answers a summary every interval (seq
// counting up; step: the latest OnStep's, else -1). Test-only;
// thread-compatible.
#ifndef TRAINLET_PROGRESS_TESTING_FAKE_SLOW_SAMPLER_H_
#define TRAINLET_PROGRESS_TESTING_FAKE_SLOW_SAMPLER_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "progress/slow_signals.h"

namespace trainlet::agent::testing {

class FakeSlowSampler : public SlowSignalsSampler {
 public:
  struct Start {
    std::vector<pid_t> workers;
    absl::Duration interval;
    absl::Time at;
  };
  void StartRound(const std::vector<pid_t>& workers, absl::Duration interval,
                  absl::Time now) override {
    starts.push_back({workers, interval, now});
    interval_ = interval;
    next_ = now + interval;
    step_ = -1;
  }
  void EndRound() override {
    ++ends;
    next_ = absl::InfiniteFuture();
  }
  void OnStep(int local_rank, int64_t step, absl::Time now) override {
    steps.push_back({local_rank, step});
    step_ = step;
  }
  absl::Time NextDeadline() const override { return next_; }
  std::optional<v1::SlowSignals> Poll(absl::Time now) override {
    if (now < next_) return std::nullopt;
    next_ += interval_;
    v1::SlowSignals s;
    s.set_seq(++seq_);
    s.set_interval_ms(absl::ToInt64Milliseconds(interval_));
    s.set_workers(static_cast<int32_t>(starts.back().workers.size()));
    s.set_step(step_);
    return s;
  }

  std::vector<Start> starts;
  int ends = 0;
  std::vector<std::pair<int, int64_t>> steps;  // (local rank, step)

 private:
  absl::Duration interval_;
  absl::Time next_ = absl::InfiniteFuture();
  uint64_t seq_ = 0;
  int64_t step_ = -1;
};

}  // namespace trainlet::agent::testing

#endif  // TRAINLET_PROGRESS_TESTING_FAKE_SLOW_SAMPLER_H_

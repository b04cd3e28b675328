#include "progress/gpu_sample.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace trainlet::agent {

GpuClockReading SummariseGpuClocks(const std::vector<v1::Gpu>& gpus, absl::Time at) {
  GpuClockReading r;
  r.at = at;
  r.gpus = static_cast<int>(std::min<size_t>(gpus.size(), kMaxGpus));
  int64_t lowest = -1;
  for (size_t i = 0; i < gpus.size() && i < static_cast<size_t>(kMaxGpus); ++i) {
    const v1::Gpu& g = gpus[i];
    // An idle GPU (one this job does not use, or between kernels) drops its
    // clock and says so: its clock tells nothing of this node's speed.
    const bool idle = g.clock_reasons_known() && (g.clock_reasons() & kGpuIdleReason) != 0;
    if (!idle && g.sm_clock_mhz() > 0 && g.sm_clock_max_mhz() > 0) {
      // Boost can read a little above the max on some boards: capped.
      const int64_t p =
          std::min<int64_t>(1000, (int64_t{g.sm_clock_mhz()} * 1000 + g.sm_clock_max_mhz() / 2) /
                                      g.sm_clock_max_mhz());
      lowest = lowest < 0 ? p : std::min(lowest, p);
    }
    if (g.clock_reasons_known()) r.slowdown_reasons |= g.clock_reasons() & kGpuSlowdownReasons;
  }
  // A clock that rounds to 0 per mille is still known: 1.
  r.sm_clock_permille = lowest < 0 ? 0 : static_cast<int32_t>(std::max<int64_t>(lowest, 1));
  return r;
}

GpuClockSampler::GpuClockSampler(ReadFn read, Clock* clock)
    : read_(std::move(read)), clock_(clock) {}

GpuClockSampler::~GpuClockSampler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void GpuClockSampler::Resume(absl::Duration interval) {
  absl::MutexLock lock(&mu_);
  active_ = true;
  interval_ = std::max(interval, absl::Milliseconds(1));
  ++generation_;
  latest_.reset();
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  wake_.SignalAll();
}

void GpuClockSampler::Pause() {
  absl::MutexLock lock(&mu_);
  active_ = false;
  ++generation_;
  latest_.reset();
}

GpuClockReading GpuClockSampler::Read() {
  std::vector<v1::Gpu> gpus;
  read_(&gpus);
  return SummariseGpuClocks(gpus, clock_->Now());
}

void GpuClockSampler::SampleOnce() {
  const GpuClockReading r = Read();
  absl::MutexLock lock(&mu_);
  ++reads_;
  latest_ = r;
}

std::optional<GpuClockReading> GpuClockSampler::Latest(absl::Time now,
                                                       absl::Duration max_age) const {
  absl::MutexLock lock(&mu_);
  if (!latest_.has_value() || now - latest_->at > max_age) return std::nullopt;
  return latest_;
}

int64_t GpuClockSampler::reads() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

void GpuClockSampler::Loop() {
  absl::MutexLock lock(&mu_);
  uint64_t seen = 0;
  // Paced by the real clock: the thread waits, it is not the agent's loop.
  absl::Time next = absl::InfinitePast();
  while (!stop_) {
    if (!active_) {
      wake_.Wait(&mu_);
      continue;
    }
    if (generation_ != seen) {  // resumed: read at once
      seen = generation_;
      next = absl::InfinitePast();
    }
    const absl::Time now = absl::Now();
    if (now < next) {
      wake_.WaitWithDeadline(&mu_, next);
      continue;
    }
    next = now + interval_;
    const uint64_t generation = generation_;
    mu_.Unlock();
    const GpuClockReading r = Read();
    mu_.Lock();
    ++reads_;
    // A read that began before a Pause or Resume belongs to no round now.
    if (generation == generation_) latest_ = r;
  }
}

}  // namespace trainlet::agent

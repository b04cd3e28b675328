#include "progress/gpu_sample.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

v1::Gpu GpuWith(uint32_t mhz, uint32_t max_mhz, bool reasons_known = false, uint64_t reasons = 0) {
  v1::Gpu g;
  g.set_sm_clock_mhz(mhz);
  g.set_sm_clock_max_mhz(max_mhz);
  g.set_clock_reasons_known(reasons_known);
  g.set_clock_reasons(reasons);
  return g;
}

const absl::Time kGpuT0 = absl::FromUnixSeconds(1000);

TEST(SummariseGpuClocks, TheLowestClockShare_AndTheSlowdownReasonsOfAll) {
  const GpuClockReading r = SummariseGpuClocks(
      {GpuWith(1980, 1980, true, 0x1), GpuWith(990, 1980, true, 0x48),
       GpuWith(1500, 2000, true, 0x4),
       GpuWith(0, 1980, true, 0x80)},  // no current clock: its share is unknown, its reasons count
      kGpuT0);
  EXPECT_EQ(r.at, kGpuT0);
  EXPECT_EQ(r.gpus, 4);
  EXPECT_EQ(r.sm_clock_permille, 500);
  // 0x1 (idle) is no slowdown; 0x4, 0x8, 0x40, 0x80 are.
  EXPECT_EQ(r.slowdown_reasons, 0xCCu);
}

TEST(SummariseGpuClocks, IdleGpus_TheirClockIsNotTaken) {
  GpuClockReading r = SummariseGpuClocks(
      {GpuWith(1980, 1980, true, 0), GpuWith(300, 1980, true, 0x1), GpuWith(990, 1980, true, 0x9)},
      kGpuT0);
  EXPECT_EQ(r.gpus, 3);
  EXPECT_EQ(r.sm_clock_permille, 1000) << "idle GPUs' clocks say nothing of the node's speed";
  EXPECT_EQ(r.slowdown_reasons, 0x8u) << "an idle GPU's slowdown reasons still count";
  r = SummariseGpuClocks({GpuWith(300, 1980, true, 0x1)}, kGpuT0);
  EXPECT_EQ(r.sm_clock_permille, 0);
}

TEST(SummariseGpuClocks, UnknownClocksAndReasons_AreZero_AboveMaxIsCapped) {
  GpuClockReading r = SummariseGpuClocks({GpuWith(0, 0, false, 0x8), GpuWith(1980, 0)}, kGpuT0);
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.sm_clock_permille, 0);
  EXPECT_EQ(r.slowdown_reasons, 0u) << "reasons not known are not taken";
  r = SummariseGpuClocks({GpuWith(2010, 1980)}, kGpuT0);
  EXPECT_EQ(r.sm_clock_permille, 1000);
  r = SummariseGpuClocks({GpuWith(1, 100000)}, kGpuT0);
  EXPECT_EQ(r.sm_clock_permille, 1) << "known, however low";
  r = SummariseGpuClocks({}, kGpuT0);
  EXPECT_EQ(r.gpus, 0);
  EXPECT_EQ(SummariseGpuClocks(std::vector<v1::Gpu>(300, GpuWith(1, 1)), kGpuT0).gpus, kMaxGpus);
}

TEST(GpuClockSampler, LatestIsTakenOnlyWhileRecent) {
  SimulatedClock clock(kGpuT0);
  std::vector<v1::Gpu> answer = {GpuWith(990, 1980, true, 0x8)};
  GpuClockSampler sampler([&](std::vector<v1::Gpu>* gpus) { *gpus = answer; }, &clock);
  EXPECT_FALSE(sampler.Latest(kGpuT0, absl::Seconds(20)).has_value()) << "nothing read yet";
  sampler.SampleOnce();
  clock.Advance(absl::Seconds(20));
  std::optional<GpuClockReading> r = sampler.Latest(clock.Now(), absl::Seconds(20));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at, kGpuT0);
  EXPECT_EQ(r->sm_clock_permille, 500);
  EXPECT_EQ(r->slowdown_reasons, 0x8u);
  EXPECT_FALSE(sampler.Latest(clock.Now() + absl::Milliseconds(1), absl::Seconds(20)).has_value())
      << "a reading older than max_age is none (a read hung in the driver)";
  EXPECT_EQ(sampler.reads(), 1);
}

TEST(GpuClockSampler, ResumeReadsAtOnceOnItsThread_PauseForgets_DestructorJoins) {
  SimulatedClock clock(kGpuT0);
  absl::Notification read;
  std::atomic<int> calls{0};
  {
    GpuClockSampler sampler(
        [&](std::vector<v1::Gpu>* gpus) {
          gpus->push_back(GpuWith(1980, 1980));
          if (calls.fetch_add(1) == 0) read.Notify();
        },
        &clock);
    EXPECT_EQ(sampler.reads(), 0) << "no thread before the first Resume";
    // An hour between reads: only the first, at once, is expected here.
    sampler.Resume(absl::Hours(1));
    ASSERT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(60)));
    // The reading is stored just after the read returns.
    for (int i = 0; i < 60000 && !sampler.Latest(kGpuT0, absl::Seconds(1)).has_value(); ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_TRUE(sampler.Latest(kGpuT0, absl::Seconds(1)).has_value());
    EXPECT_EQ(sampler.Latest(kGpuT0, absl::Seconds(1))->sm_clock_permille, 1000);
    sampler.Pause();
    EXPECT_FALSE(sampler.Latest(kGpuT0, absl::Seconds(1)).has_value())
        << "a paused sampler's reading belongs to the round that ended";
  }
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace trainlet::agent

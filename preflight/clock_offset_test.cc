#include "preflight/clock_offset.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {
namespace clock_offset_test {

using ::testing::HasSubstr;

// One exchange: the agent sends at t1 (its clock); the request takes
// `there`, the coordinator answers after `serve`, the answer takes `back`;
// the coordinator's clock reads `skew` more than the agent's.
ClockSample Exchange(absl::Duration skew, absl::Duration there, absl::Duration serve,
                     absl::Duration back) {
  const absl::Time t1 = absl::FromUnixSeconds(1'800'000'000);
  ClockSample s;
  s.agent_sent = t1;
  s.coordinator_received = t1 + there + skew;
  s.coordinator_answered = t1 + there + serve + skew;
  s.agent_received = t1 + there + serve + back;
  return s;
}

TEST(ComputeClockOffset, SymmetricPathsGiveTheSkewExactly) {
  const std::optional<ClockOffset> o =
      ComputeClockOffset(Exchange(absl::Milliseconds(1500), absl::Milliseconds(3),
                                  absl::Milliseconds(10), absl::Milliseconds(3)));
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->offset, absl::Milliseconds(1500));
  EXPECT_EQ(o->rtt, absl::Milliseconds(6));
}

TEST(ComputeClockOffset, AsymmetricPathsStayWithinHalfTheRtt) {
  const absl::Duration skew = -absl::Milliseconds(700);
  const std::optional<ClockOffset> o = ComputeClockOffset(
      Exchange(skew, absl::Milliseconds(9), absl::Milliseconds(1), absl::Milliseconds(1)));
  ASSERT_TRUE(o.has_value());
  EXPECT_LE(absl::AbsDuration(o->offset - skew), o->rtt / 2);
}

TEST(ComputeClockOffset, InconsistentTimestampsGiveNothing) {
  ClockSample s = Exchange(absl::ZeroDuration(), absl::Milliseconds(1), absl::Milliseconds(1),
                           absl::Milliseconds(1));
  ClockSample backwards = s;
  backwards.agent_received = s.agent_sent - absl::Seconds(1);
  EXPECT_FALSE(ComputeClockOffset(backwards).has_value());
  ClockSample served_longer = s;
  served_longer.coordinator_answered = s.coordinator_received + absl::Seconds(5);
  EXPECT_FALSE(ComputeClockOffset(served_longer).has_value());
  ClockSample unset = s;
  unset.coordinator_received = absl::UnixEpoch();
  EXPECT_FALSE(ComputeClockOffset(unset).has_value());
  ClockSample infinite = s;
  infinite.agent_sent = absl::InfinitePast();
  EXPECT_FALSE(ComputeClockOffset(infinite).has_value());
}

TEST(CheckClockOffset, SkewedClockFails) {
  const v1::CheckResult r = CheckClockOffset(Exchange(absl::Seconds(5), absl::Milliseconds(1),
                                                      absl::Milliseconds(1), absl::Milliseconds(1)),
                                             absl::Seconds(1));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("ahead of this node's by 5s"));
  EXPECT_DOUBLE_EQ(r.value(), 5.0);
  EXPECT_EQ(r.threshold(), 1);
  EXPECT_EQ(r.unit(), "seconds");
}

TEST(CheckClockOffset, ClockBehindFailsWithANegativeValue) {
  const v1::CheckResult r = CheckClockOffset(Exchange(
      -absl::Seconds(3), absl::Milliseconds(1), absl::Milliseconds(1), absl::Milliseconds(1)));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("behind"));
  EXPECT_DOUBLE_EQ(r.value(), -3.0);
}

TEST(CheckClockOffset, SmallOffsetPasses) {
  const v1::CheckResult r = CheckClockOffset(Exchange(
      absl::Milliseconds(20), absl::Milliseconds(1), absl::Milliseconds(1), absl::Milliseconds(1)));
  EXPECT_EQ(r.outcome(), v1::CheckResult::PASS) << r.reason();
}

TEST(CheckClockOffset, UncertaintyAcrossTheThresholdIsSkipped) {
  // 0.9 s measured, but the exchange took 600 ms: anywhere in 0.6-1.2 s.
  const v1::CheckResult r =
      CheckClockOffset(Exchange(absl::Milliseconds(900), absl::Milliseconds(300),
                                absl::Milliseconds(1), absl::Milliseconds(300)),
                       absl::Seconds(1));
  EXPECT_EQ(r.outcome(), v1::CheckResult::SKIPPED);
  EXPECT_THAT(r.reason(), HasSubstr("too long to tell"));
}

TEST(CheckClockOffset, NoSampleIsSkipped) {
  EXPECT_EQ(CheckClockOffset(std::nullopt).outcome(), v1::CheckResult::SKIPPED);
}

}  // namespace clock_offset_test
}  // namespace trainlet::preflight

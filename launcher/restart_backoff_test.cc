#include "launcher/restart_backoff.h"

#include "gtest/gtest.h"

namespace trainlet {
namespace launcher {
namespace {

TEST(RestartBackoff, DoublesUpToMax) {
  RestartBackoff backoff{RestartBackoff::Options()};
  const absl::Duration quick = absl::Milliseconds(10);
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(1));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(2));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(4));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(8));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(16));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(30));
  EXPECT_EQ(backoff.NextDelay(quick), absl::Seconds(30));
}

TEST(RestartBackoff, ResetsAfterALongRun) {
  RestartBackoff::Options options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Seconds(1);
  options.reset_after = absl::Seconds(5);
  RestartBackoff backoff(options);
  EXPECT_EQ(backoff.NextDelay(absl::ZeroDuration()), absl::Milliseconds(100));
  EXPECT_EQ(backoff.NextDelay(absl::Seconds(4)), absl::Milliseconds(200));
  EXPECT_EQ(backoff.NextDelay(absl::Seconds(5)), absl::Milliseconds(100));
  EXPECT_EQ(backoff.NextDelay(absl::ZeroDuration()), absl::Milliseconds(200));
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

#include "preflight/bounded.h"

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::preflight {
namespace bounded_test {

using ::testing::HasSubstr;

TEST(BoundedRunner, ReturnsTheAnswer) {
  BoundedRunner runner;
  BoundedRunner::NoAnswer why;
  std::optional<int> got = runner.Run<int>([] { return 42; }, absl::Seconds(30), &why);
  ASSERT_TRUE(got.has_value()) << why.text;
  EXPECT_EQ(*got, 42);
  EXPECT_FALSE(runner.busy());
}

TEST(BoundedRunner, BlockedWorkTimesOutAndBlocksTheNextCallUntilItReturns) {
  BoundedRunner runner;
  auto release = std::make_shared<absl::Notification>();
  BoundedRunner::NoAnswer why;
  std::optional<int> got = runner.Run<int>(
      [release] {
        release->WaitForNotification();
        return 1;
      },
      absl::Milliseconds(50), &why);
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(why.kind, BoundedRunner::NoAnswer::kTimedOut);
  EXPECT_THAT(why.text, HasSubstr("no answer within 50ms"));
  EXPECT_TRUE(runner.busy());

  // The stuck work is not doubled: the next call does not run at all.
  bool ran = false;
  got = runner.Run<int>(
      [&ran] {
        ran = true;
        return 2;
      },
      absl::Seconds(30), &why);
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(why.kind, BoundedRunner::NoAnswer::kBusy);
  EXPECT_THAT(why.text, HasSubstr("still blocked"));
  EXPECT_FALSE(ran);

  // Once it returns, the runner serves again.
  release->Notify();
  for (int i = 0; i < 3000 && runner.busy(); ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_FALSE(runner.busy());
  got = runner.Run<int>([] { return 3; }, absl::Seconds(30), &why);
  ASSERT_TRUE(got.has_value()) << why.text;
  EXPECT_EQ(*got, 3);
}

TEST(BoundedRunner, WorkMayOutliveTheRunner) {
  auto release = std::make_shared<absl::Notification>();
  auto finished = std::make_shared<absl::Notification>();
  {
    BoundedRunner runner;
    BoundedRunner::NoAnswer why;
    EXPECT_FALSE(runner
                     .Run<std::string>(
                         [release, finished] {
                           release->WaitForNotification();
                           finished->Notify();
                           return std::string("late");
                         },
                         absl::Milliseconds(10), &why)
                     .has_value());
  }
  release->Notify();
  EXPECT_TRUE(finished->WaitForNotificationWithTimeout(absl::Seconds(30)));
}

}  // namespace bounded_test
}  // namespace trainlet::preflight

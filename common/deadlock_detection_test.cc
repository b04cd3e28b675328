#include "common/deadlock_detection.h"

#include "gtest/gtest.h"

namespace trainlet {
namespace {

TEST(DeadlockDetection, ReleaseBuild_IsOff) {
  EXPECT_EQ(DeadlockDetectionFor({/*ndebug=*/true, /*sanitized=*/false}),
            absl::OnDeadlockCycle::kIgnore);
}

TEST(DeadlockDetection, DebugOrSanitizerBuild_IsOn) {
  EXPECT_EQ(DeadlockDetectionFor({/*ndebug=*/false, /*sanitized=*/false}),
            absl::OnDeadlockCycle::kAbort);
  EXPECT_EQ(DeadlockDetectionFor({/*ndebug=*/true, /*sanitized=*/true}),
            absl::OnDeadlockCycle::kAbort);
  EXPECT_EQ(DeadlockDetectionFor({/*ndebug=*/false, /*sanitized=*/true}),
            absl::OnDeadlockCycle::kAbort);
}

TEST(DeadlockDetection, ThisBuild_SeesNdebugAsCompiled) {
#ifdef NDEBUG
  EXPECT_TRUE(ThisBuild().ndebug);
#else
  EXPECT_FALSE(ThisBuild().ndebug);
#endif
}

}  // namespace
}  // namespace trainlet

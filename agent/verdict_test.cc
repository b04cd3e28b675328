#include "agent/verdict.h"

#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "rendezvous/error_reason.h"

namespace trainlet::agent {
namespace {

namespace v1 = ::trainlet::v1;
using rendezvous::WithReason;

TEST(ExitCodeForJoinError, VerdictsAreNotConfigErrors) {
  absl::Status pre = absl::FailedPreconditionError("x");
  EXPECT_EQ(ExitCodeForJoinError(WithReason(pre, v1::ErrorInfo::FENCED)), kExitUnavailable);
  EXPECT_EQ(ExitCodeForJoinError(WithReason(pre, v1::ErrorInfo::JOB_FAILED)), kExitPeerFailed);
  EXPECT_EQ(ExitCodeForJoinError(WithReason(pre, v1::ErrorInfo::JOB_SUCCEEDED)), 0);
  EXPECT_EQ(ExitCodeForJoinError(WithReason(pre, v1::ErrorInfo::RESTARTS_EXHAUSTED)),
            kExitRestartsExhausted);
  // Without a reason: the generic mapping.
  EXPECT_EQ(ExitCodeForJoinError(pre), kExitConfig);
  EXPECT_EQ(ExitCodeForJoinError(absl::UnauthenticatedError("token")), kExitRejected);
  EXPECT_EQ(ExitCodeForJoinError(absl::AlreadyExistsError("dup")), kExitConfig);
  EXPECT_EQ(ExitCodeForJoinError(absl::DeadlineExceededError("timeout")), kExitUnavailable);
}

}  // namespace
}  // namespace trainlet::agent

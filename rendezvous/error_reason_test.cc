#include "rendezvous/error_reason.h"

#include "gtest/gtest.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::rendezvous {
namespace {

TEST(ErrorReason, SurvivesTheGrpcRoundTrip) {
  absl::Status fenced =
      WithReason(absl::FailedPreconditionError("x is fenced"), v1::ErrorInfo::FENCED);
  EXPECT_EQ(ReasonOf(fenced), v1::ErrorInfo::FENCED);
  absl::Status back = FromGrpcStatus(ToGrpcStatus(fenced));
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), "x is fenced");
  EXPECT_EQ(ReasonOf(back), v1::ErrorInfo::FENCED);
}

TEST(ErrorReason, AbsentOrGarbage_IsUnspecified) {
  EXPECT_EQ(ReasonOf(absl::FailedPreconditionError("plain")), v1::ErrorInfo::REASON_UNSPECIFIED);
  absl::Status s = absl::AbortedError("x");
  AttachSerializedErrorInfo("\xff\xff not a proto", &s);
  EXPECT_EQ(ReasonOf(s), v1::ErrorInfo::REASON_UNSPECIFIED);
  EXPECT_TRUE(WithReason(absl::OkStatus(), v1::ErrorInfo::FENCED).ok());
}

}  // namespace
}  // namespace trainlet::rendezvous

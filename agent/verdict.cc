#include "agent/verdict.h"

#include "common/exit_codes.h"
#include "rendezvous/error_reason.h"

namespace trainlet::agent {

namespace v1 = ::trainlet::v1;

JoinRefusal JoinRefusalOf(const absl::Status& status) {
  switch (rendezvous::ReasonOf(status)) {
    case v1::ErrorInfo::FENCED:
      return JoinRefusal::kFenced;
    case v1::ErrorInfo::JOB_FAILED:
      return JoinRefusal::kJobFailed;
    case v1::ErrorInfo::RESTARTS_EXHAUSTED:
      return JoinRefusal::kRestartsExhausted;
    case v1::ErrorInfo::JOB_SUCCEEDED:
      return JoinRefusal::kJobSucceeded;
    case v1::ErrorInfo::PREFLIGHT_FAILED:
      return JoinRefusal::kPreflightFailed;
    default:
      return JoinRefusal::kNone;
  }
}

int ExitCodeForJoinError(const absl::Status& status) {
  return ::trainlet::ExitCodeForJoinError(status, JoinRefusalOf(status));
}

}  // namespace trainlet::agent

#include "agent/verdict.h"

#include "common/exit_codes.h"
#include "rendezvous/error_reason.h"

namespace trainlet::agent {

namespace v1 = ::trainlet::v1;

int ExitCodeForJoinError(const absl::Status& status) {
  switch (rendezvous::ReasonOf(status)) {
    case v1::ErrorInfo::FENCED:
      // This pod should be restarted (a new incarnation may scale the job
      // back up), so not a never-retry code.
      return kExitUnavailable;
    case v1::ErrorInfo::JOB_FAILED:
      return kExitPeerFailed;
    case v1::ErrorInfo::RESTARTS_EXHAUSTED:
      return kExitRestartsExhausted;
    case v1::ErrorInfo::JOB_SUCCEEDED:
      // Too late to take part, but there is nothing left to do: the job
      // succeeded (a pod restarted after the end, a left-out survivor).
      return 0;
    default:
      return ExitCodeForRendezvousError(status);
  }
}

}  // namespace trainlet::agent

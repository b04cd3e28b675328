// The exit code of a failed join: the coordinator's reason read off the
// status (rendezvous/error_reason.h), mapped by the exit policy
// (common/exit_codes.h). Pure functions.
#ifndef TRAINLET_AGENT_VERDICT_H_
#define TRAINLET_AGENT_VERDICT_H_

#include "absl/status/status.h"
#include "common/exit_codes.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

// The exit code for a join the coordinator refused or that timed out. A
// refusal because the job is over or this incarnation is fenced is a
// verdict (69, 75, 79), not a configuration error.
int ExitCodeForJoinError(const absl::Status& status);

// The verdict a refused join carries, if any (kNone: another error).
JoinRefusal JoinRefusalOf(const absl::Status& status);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_VERDICT_H_

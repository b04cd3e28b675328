// The exit code of a failed join (the contract in docs/exit-codes.md; the
// exit policy of a round that ran is round.h's ExitCodeFor). Pure function.
#ifndef TRAINLET_AGENT_VERDICT_H_
#define TRAINLET_AGENT_VERDICT_H_

#include "absl/status/status.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

// The exit code for a join the coordinator refused or that timed out. A
// refusal because the job is over or this incarnation is fenced is a
// verdict (69, 75, 79), not a configuration error.
int ExitCodeForJoinError(const absl::Status& status);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_VERDICT_H_

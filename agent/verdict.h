// How the agent turns what the coordinator says into this pod's exit code
// (the contract in docs/exit-codes.md). Pure functions, tested alone.
#ifndef TRAINLET_AGENT_VERDICT_H_
#define TRAINLET_AGENT_VERDICT_H_

#include "absl/status/status.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

// The coordinator declared this incarnation lost (it was frozen or cut off).
bool IsFenced(const absl::Status& status);

// The exit code for a join the coordinator refused or that timed out. A
// refusal because the job is over or this incarnation is fenced is a
// verdict (69, 75, 79), not a configuration error.
int ExitCodeForJoinError(const absl::Status& status);

// The exit code when the coordinator announces that the job failed:
// 79 when the restart budget ran out (the same on every node), else this
// node's first failing worker's code, else 128+signal when the agent was
// being stopped by one, else 75 (another node failed).
int ExitCodeForJobFailed(const ::trainlet::v1::JobFailed& failed, int local_failure,
                         int terminating_signal);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_VERDICT_H_

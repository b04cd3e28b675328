// `trainlet status [--controller=HOST:PORT] [JOB] [--json]`: what the thin
// controller knows (docs/controller.md). Without JOB, one line per job;
// with JOB, the job's nodes and its history. --json prints the controller's
// answer (ListJobsResponse or GetStatusResponse) in the proto3 JSON mapping.
//
// Every text that came from the network is escaped (SafeForLog) before it
// reaches the terminal.
//
// Exit code: 0; 1 when the job is unknown; 64 usage; 69 controller
// unreachable; 77 refused (token or certificate).
//
// Threading: RunStatusCommand owns the calling thread; the formatters are
// pure functions.
#ifndef TRAINLET_AGENT_STATUS_COMMAND_H_
#define TRAINLET_AGENT_STATUS_COMMAND_H_

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::agent {

int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err);

// The tables `trainlet status` prints; `now` (wall time) for ages.
std::string FormatJobs(const v1::ListJobsResponse& jobs, absl::Time now);
std::string FormatJobStatus(const v1::GetStatusResponse& status);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_STATUS_COMMAND_H_

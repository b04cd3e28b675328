// `trainlet run` in production: builds the real seams around the agent's
// executor (agent.h): the process supervisor, the coordinator this agent
// hosts when it is node rank 0 (or the only node), the health server and the
// gRPC rendezvous client; runs the agent; keeps the hosted coordinator up
// until every agent heard the verdict; tears everything down in order.
//
// Threading: call from main()'s thread, after
// launcher::PrepareProcessForSupervision(); it must outlive the workers.
#ifndef TRAINLET_AGENT_RUN_AGENT_H_
#define TRAINLET_AGENT_RUN_AGENT_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "agent/launch_plan.h"
#include "agent/round.h"
#include "config/run_config.h"
#include "launcher/supervisor.h"

namespace trainlet::agent {

// What makes `mpi-launcher` and `mpi-worker` different from `run`: called
// once the supervisor exists and before any rendezvous, it sets up the
// plan (keys, files, the sshd helper) and adjusts the round's options
// (role, SSH facts, local processes). Its error is a configuration error
// (ExitCodeForConfigError). Null: `run`'s workers.
using PlanSetup = std::function<absl::StatusOr<LaunchPlan*>(launcher::Supervisor* supervisor,
                                                            RoundOptions* options)>;

// Runs the agent to completion and returns the process exit code
// (common/exit_codes.h). `base_env` is the environment the workers inherit.
int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env,
             const PlanSetup& setup = nullptr);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_RUN_AGENT_H_

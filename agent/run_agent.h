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

#include <map>
#include <string>

#include "agent/run_config.h"

namespace trainlet::agent {

// Runs the agent to completion and returns the process exit code
// (common/exit_codes.h). `base_env` is the environment the workers inherit.
int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_RUN_AGENT_H_

// The per-pod agent behind `trainlet run`: hosts the coordinator when it is
// node rank 0, joins the rendezvous, starts the local workers with the
// framework environment, relays signals, and turns what happens on any node
// into this pod's exit code (common/exit_codes.h).
//
// One round, as the agent sees it:
//
//   join (long-poll, retried while the coordinator is not up)
//     -> assignment -> open Watch stream -> start workers -> ready
//     -> event loop on the main thread: worker exits, signals, directives
//     -> verdict (JobFinished / JobFailed) -> exit
//        or Rejoin (elastic) -> stop workers -> join round N+1
//
// Threading: Run() owns the main thread, which must outlive the workers
// (PDEATHSIG is tied to the forking thread). gRPC callbacks (directives,
// the join thread, heartbeats) only queue events and wake the loop.
#ifndef TRAINLET_AGENT_AGENT_H_
#define TRAINLET_AGENT_AGENT_H_

#include <map>
#include <string>

#include "agent/run_config.h"

namespace trainlet::agent {

// Runs the agent to completion and returns the process exit code.
// `base_env` is the environment the workers inherit.
// launcher::PrepareProcessForSupervision() must have been called first.
int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_AGENT_H_

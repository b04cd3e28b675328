// `trainlet mpi-launcher` and `trainlet mpi-worker` in production: the
// state directory, then RunAgent() (run_agent.h) with the MPI launch plan
// (mpi_plans.h) in place of `run`'s workers.
//
// Threading: as RunAgent.
#ifndef TRAINLET_AGENT_RUN_MPI_H_
#define TRAINLET_AGENT_RUN_MPI_H_

#include <map>
#include <string>

#include "config/mpi_config.h"

namespace trainlet::agent {

// Returns the process exit code: the launcher's is COMMAND's (or trainlet's
// own, docs/exit-codes.md); a worker's is 0 when the job succeeded.
int RunMpi(const MpiConfig& config, const std::map<std::string, std::string>& env);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_RUN_MPI_H_

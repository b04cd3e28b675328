// `trainlet mpi-worker [OPTIONS]`: an MPI worker pod (agent/run_mpi.h,
// docs/mpi.md).
#include "cmd/agent_command.h"
#include "cmd/command.h"
#include "config/mpi_config.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  return ParseMpiCommand(agent::MpiRole::kWorker, args, env);
}

std::string Help() { return agent::MpiHelpText(agent::MpiRole::kWorker); }

}  // namespace

const Command kMpiWorkerCommand = {
    "mpi-worker",
    "mpi-worker [options]",
    "An MPI worker pod: supervise sshd with the job's key, give SSH\n"
    "sessions the pod's environment, exit with the job.",
    /*reads_env=*/true,
    /*entrypoint=*/true,
    /*exits_at_once=*/true,  // the node probe may still be inside NVML.
    Parse,
    Help,
};

}  // namespace trainlet::cmd

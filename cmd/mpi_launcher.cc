// `trainlet mpi-launcher [OPTIONS] -- COMMAND [ARGS...]`: the MPI launcher
// pod (agent/run_mpi.h, docs/mpi.md).
#include "cmd/agent_command.h"
#include "cmd/command.h"
#include "config/mpi_config.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  return ParseMpiCommand(agent::MpiRole::kLauncher, args, env);
}

std::string Help() { return agent::MpiHelpText(agent::MpiRole::kLauncher); }

}  // namespace

const Command kMpiLauncherCommand = {
    "mpi-launcher",
    "mpi-launcher [options] -- COMMAND [ARGS...]",
    "The MPI launcher pod: host the rendezvous, wait until every worker's\n"
    "sshd is really reachable, write hostfiles, run mpirun, deepspeed, ...",
    /*reads_env=*/true,
    /*entrypoint=*/true,
    /*exits_at_once=*/true,  // a readiness probe may still be inside libssh.
    Parse,
    Help,
};

}  // namespace trainlet::cmd

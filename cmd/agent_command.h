// What the agent's commands (`run`, `mpi-launcher`, `mpi-worker`) share:
// their configuration with the node's facts, the descriptor budget checked
// before any gRPC object exists, and the MPI pair's parse.
#ifndef TRAINLET_CMD_AGENT_COMMAND_H_
#define TRAINLET_CMD_AGENT_COMMAND_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cmd/command.h"
#include "config/mpi_config.h"
#include "config/run_config.h"
#include "config/system_probe.h"

namespace trainlet::cmd {

// The agent commands' configuration: parsed from the machine's facts
// (agent::AgentSystemInfo), then, where the config plans the node probe
// before the workers, completed with its answer (agent::ProbeNodeBeforeWorkers:
// the probe is the agent's, never the config's). A config that plans it for
// once the workers run gets it from RunAgent.
absl::StatusOr<agent::RunConfig> AgentRunConfig(const std::vector<std::string>& args,
                                                const Env& env);

// Sets the log level, then checks the descriptor budget of an agent with
// `local_processes` workers (and the nodes of the coordinator it may host):
// nothing when it fits, else the exit code (71), said as
// `trainlet COMMAND: ...`.
std::optional<int> PrepareAgent(absl::string_view command, const agent::RunConfig& config,
                                int local_processes, std::string* reason);

// `trainlet mpi-launcher` and `trainlet mpi-worker`.
absl::StatusOr<Invocation> ParseMpiCommand(agent::MpiRole role,
                                           const std::vector<std::string>& args, const Env& env);

}  // namespace trainlet::cmd

#endif  // TRAINLET_CMD_AGENT_COMMAND_H_

#include "cmd/agent_command.h"

#include <memory>
#include <utility>

#include "agent/node_probe.h"
#include "agent/run_mpi.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"

namespace trainlet::cmd {

absl::StatusOr<agent::RunConfig> AgentRunConfig(const std::vector<std::string>& args,
                                                const Env& env) {
  const agent::SystemInfo sys = agent::AgentSystemInfo(env);
  absl::StatusOr<agent::RunConfig> config = agent::ParseRunConfig(args, env, sys);
  if (!config.ok() || config->help_requested) return config;
  if (absl::Status s = agent::ProbeNodeBeforeWorkers(env, sys, &*config); !s.ok()) return s;
  return config;
}

std::optional<int> PrepareAgent(absl::string_view command, const agent::RunConfig& config,
                                int local_processes, std::string* reason) {
  SetLogLevel(config.log_level);
  // [server] The descriptor budget, before any gRPC object exists.
  const int hosted = config.host_coordinator != agent::HostCoordinator::kNo ? config.nnodes.max : 0;
  if (absl::Status s = CheckDescriptorBudget(DescriptorsForAgent(local_processes, hosted));
      !s.ok()) {
    return Fail(command, kExitOsError, s.message(), reason);
  }
  return std::nullopt;
}

absl::StatusOr<Invocation> ParseMpiCommand(agent::MpiRole role,
                                           const std::vector<std::string>& args, const Env& env) {
  const agent::SystemInfo sys = agent::AgentSystemInfo(env);
  absl::StatusOr<agent::MpiConfig> config = agent::ParseMpiConfig(role, args, env, sys);
  if (!config.ok()) return config.status();
  Invocation invocation;
  if (config->run.help_requested) {
    invocation.help = true;
    return invocation;
  }
  if (absl::Status s = agent::ProbeNodeBeforeWorkers(env, sys, &config->run); !s.ok()) return s;
  invocation.node = config->run.node_id;
  auto shared = std::make_shared<const agent::MpiConfig>(*std::move(config));
  invocation.run = [role, shared, env](std::string* reason) {
    const char* name = role == agent::MpiRole::kLauncher ? "mpi-launcher" : "mpi-worker";
    if (std::optional<int> failed = PrepareAgent(name, shared->run, 1, reason)) return *failed;
    // A readiness probe cancelled by a stop may still be inside libssh on a
    // detached thread (bounded by its attempt timeout), like the node probe
    // in NVML: the command exits at once (Command::exits_at_once).
    return agent::RunMpi(*shared, env);
  };
  return invocation;
}

}  // namespace trainlet::cmd

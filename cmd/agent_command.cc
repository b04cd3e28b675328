#include "cmd/agent_command.h"

#include <memory>
#include <utility>

#include "agent/node_probe.h"
#include "agent/run_mpi.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"

namespace trainlet::cmd {

agent::SystemInfo ProbeMachine(const Env& env) {
  const topology::ProbeOptions options = agent::AgentProbeOptions(env);
  auto probe = std::make_shared<agent::LazyNodeProbe>(options);
  agent::SystemInfo sys = agent::ProbeSystem(env);
  sys.probe_node = [probe](absl::Duration timeout, std::string* note) {
    return agent::AwaitNodeProbe(probe->Run(), timeout, note);
  };
  if (!agent::ProbeLoadsNvml(options) && agent::ProbeReadsThisMachine(options)) {
    sys.when_node_probed = [probe](agent::NodeProbeCallback done) {
      agent::WhenNodeProbeDone(probe->Run(), std::move(done));
    };
  }
  return sys;
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
  absl::StatusOr<agent::MpiConfig> config =
      agent::ParseMpiConfig(role, args, env, ProbeMachine(env));
  if (!config.ok()) return config.status();
  Invocation invocation;
  if (config->run.help_requested) {
    invocation.help = true;
    return invocation;
  }
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

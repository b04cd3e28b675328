// `trainlet run [OPTIONS] -- COMMAND [ARGS...]`: the agent (agent/run_agent.h).
#include <memory>
#include <utility>

#include "agent/run_agent.h"
#include "cmd/agent_command.h"
#include "cmd/command.h"
#include "config/run_config.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<agent::RunConfig> config = AgentRunConfig(args, env);
  if (!config.ok()) return config.status();
  Invocation invocation;
  if (config->help_requested) {
    invocation.help = true;
    return invocation;
  }
  invocation.node = config->node_id;
  auto shared = std::make_shared<const agent::RunConfig>(*std::move(config));
  invocation.run = [shared, env](std::string* reason) {
    if (std::optional<int> failed = PrepareAgent("run", *shared, shared->nproc_per_node, reason)) {
      return *failed;
    }
    return agent::RunAgent(*shared, env);
  };
  return invocation;
}

}  // namespace

const Command kRunCommand = {
    "run",
    "run [options] -- COMMAND [ARGS...]",
    "Join the job's rendezvous and run COMMAND as the local workers, with\n"
    "the environment torchrun, JAX, TensorFlow, XGBoost and Paddle expect.",
    /*reads_env=*/true,
    /*entrypoint=*/true,
    /*exits_at_once=*/true,  // the node probe may still be inside NVML.
    Parse,
    agent::RunHelpText,
};

}  // namespace trainlet::cmd

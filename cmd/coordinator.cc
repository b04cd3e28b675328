// `trainlet coordinator [OPTIONS]`: the rendezvous coordinator on its own
// (cmd/standalone_coordinator.h).
#include <memory>
#include <utility>

#include "cmd/command.h"
#include "cmd/standalone_coordinator.h"
#include "common/logging.h"
#include "config/coordinator_config.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<agent::CoordinatorConfig> config = agent::ParseCoordinatorConfig(args, env);
  if (!config.ok()) return config.status();
  Invocation invocation;
  invocation.help = config->help_requested;
  auto shared = std::make_shared<const agent::CoordinatorConfig>(*std::move(config));
  invocation.run = [shared](std::string*) {
    SetLogLevel(shared->log_level);
    return agent::RunStandaloneCoordinator(*shared);
  };
  return invocation;
}

}  // namespace

const Command kCoordinatorCommand = {
    "coordinator",
    "coordinator [options]",
    "Run the rendezvous coordinator on its own (normally node rank 0's\n"
    "agent hosts it).",
    /*reads_env=*/true,
    /*entrypoint=*/true,
    /*exits_at_once=*/false,
    Parse,
    agent::CoordinatorHelpText,
};

}  // namespace trainlet::cmd

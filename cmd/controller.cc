// `trainlet controller [OPTIONS]`: the thin controller
// (cmd/controller_command.h, docs/controller.md).
#include <memory>
#include <utility>

#include "cmd/command.h"
#include "cmd/controller_command.h"
#include "common/logging.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<agent::ControllerConfig> config = agent::ParseControllerConfig(args, env);
  if (!config.ok()) return config.status();
  Invocation invocation;
  invocation.help = config->help_requested;
  config->version = Version();
  auto shared = std::make_shared<const agent::ControllerConfig>(*std::move(config));
  invocation.run = [shared](std::string*) {
    SetLogLevel(shared->log_level);
    return agent::RunController(*shared);
  };
  return invocation;
}

}  // namespace

const Command kControllerCommand = {
    "controller",
    "controller [options]",
    "Run the thin controller agents report health and progress to\n"
    "(--controller=HOST:PORT); keeps each job's history (docs/controller.md).",
    /*reads_env=*/true,
    /*entrypoint=*/true,
    /*exits_at_once=*/false,
    Parse,
    agent::ControllerHelpText,
};

}  // namespace trainlet::cmd

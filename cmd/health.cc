// `trainlet health [HOST:]PORT`: an agent's readiness (cmd/health_probe.h).
#include <utility>

#include "cmd/command.h"
#include "cmd/health_probe.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env&) {
  absl::StatusOr<agent::HealthOptions> options = agent::ParseHealthOptions(args);
  if (!options.ok()) return options.status();
  Invocation invocation;
  invocation.help = options->help;
  invocation.run = [options = *std::move(options)](std::string*) {
    return agent::RunHealthProbe(options);
  };
  return invocation;
}

}  // namespace

const Command kHealthCommand = {
    "health",
    "health [HOST:]PORT",
    "Probe an agent's readiness (grpc.health.v1).",
    /*reads_env=*/false,
    /*entrypoint=*/false,
    /*exits_at_once=*/false,
    Parse,
    agent::HealthHelpText,
};

}  // namespace trainlet::cmd

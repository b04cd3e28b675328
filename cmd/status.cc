// `trainlet status [OPTIONS] [JOB]`: the controller's views as a table
// (cmd/status_command.h, docs/controller-views.md).
#include <iostream>
#include <utility>

#include "cmd/command.h"
#include "cmd/status_command.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<agent::StatusOptions> options = agent::ParseStatusOptions(args, env);
  if (!options.ok()) return options.status();
  Invocation invocation;
  invocation.help = options->help;
  invocation.run = [options = *std::move(options)](std::string*) {
    return agent::RunStatus(options, std::cout, std::cerr);
  };
  return invocation;
}

}  // namespace

const Command kStatusCommand = {
    "status",
    "status [--controller=HOST:PORT] [--json] [JOB]",
    "Show the jobs the trainlet controller sees (its HTTP port, default\n"
    "127.0.0.1:29680): nodes, workers, progress, restarts, hangs, GPUs.",
    /*reads_env=*/true,
    /*entrypoint=*/false,
    /*exits_at_once=*/false,
    Parse,
    agent::StatusHelpText,
};

}  // namespace trainlet::cmd

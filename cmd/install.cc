// `trainlet install DEST`: copies this binary into a volume
// (cmd/install_command.h, the init-container pattern).
#include <iostream>
#include <utility>

#include "cmd/command.h"
#include "cmd/install_command.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env&) {
  absl::StatusOr<agent::InstallArgs> parsed = agent::ParseInstallArgs(args);
  if (!parsed.ok()) return parsed.status();
  Invocation invocation;
  invocation.help = parsed->help;
  invocation.run = [dest = parsed->dest](std::string*) {
    return agent::Install(dest, "/proc/self/exe", std::cout, std::cerr);
  };
  return invocation;
}

}  // namespace

const Command kInstallCommand = {
    "install",
    "install DEST",
    "Copy this binary to DEST (the init-container pattern: an image\n"
    "without a shell puts trainlet into a shared volume).",
    /*reads_env=*/false,
    /*entrypoint=*/false,
    /*exits_at_once=*/false,
    Parse,
    agent::InstallHelpText,
};

}  // namespace trainlet::cmd

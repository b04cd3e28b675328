// `trainlet version` (also `trainlet --version`): what this build is. The
// values come from the build (cmd/CMakeLists.txt), so this file is compiled
// into each executable.
#include <iostream>

#include "cmd/command.h"
#include "common/exit_codes.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>&, const Env&) {
  Invocation invocation;
  invocation.run = [](std::string*) {
    std::cout << "trainlet " << TRAINLET_VERSION << "\n"
              << "git commit: " << TRAINLET_GIT_COMMIT << "\n"
              << "build type: " << TRAINLET_BUILD_TYPE << "\n"
              << "linkage: " << TRAINLET_LINKAGE << "\n"
              << "protocol version: " << rendezvous::kProtocolVersion << "\n";
    return kExitSuccess;
  };
  return invocation;
}

std::string Help() { return "Usage: trainlet version\n\nPrints the version.\n"; }

}  // namespace

const char* Version() { return TRAINLET_VERSION; }

const Command kVersionCommand = {
    "version",
    "version",
    "Print the version.",
    /*reads_env=*/false,
    /*entrypoint=*/false,
    /*exits_at_once=*/true,  // no static destructors to run (they fault in ~10 code pages).
    Parse,
    Help,
};

}  // namespace trainlet::cmd

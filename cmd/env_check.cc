#include "cmd/env_check.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cmd/controller_command.h"
#include "cmd/health_probe.h"
#include "cmd/probe_command.h"
#include "cmd/status_command.h"
#include "config/coordinator_config.h"
#include "config/mpi_config.h"
#include "config/options.h"
#include "config/run_config.h"
#include "launcher/termination_log.h"

namespace trainlet::agent {
namespace {

// TRAINLET_* variables that are no option's.
constexpr const char* kOtherVariables[] = {
    // Read by trainlet itself.
    kStrictEnvVariable,
    launcher::kTerminationLogVariable,
    "TRAINLET_CONTROLLER_HTTP",  // `trainlet status`: the controller's HTTP address.
    // Set by trainlet for the processes it starts (docs/environment.md,
    // docs/mpi.md), which may run trainlet again.
    "TRAINLET_PROGRESS_FILE",   // run: each worker's progress file.
    "TRAINLET_TRACEBACK_FILE",  // run: each worker's stack dump file.
    "TRAINLET_STATE_DIR",       // mpi-launcher/mpi-worker: the state directory.
    "TRAINLET_HOSTFILE",        // mpi-launcher: COMMAND's hostfiles and ssh settings.
    "TRAINLET_HYDRA_HOSTFILE",
    "TRAINLET_DISCOVER_HOSTS",
    "TRAINLET_SSH_CONFIG",
    "TRAINLET_NP",
    "TRAINLET_MPI_FLAVOR",
    "TRAINLET_RESTART_COUNT",
    // Read by the project's own scripts and tests (docs/testing.md), which
    // run trainlet with them set.
    "TRAINLET_BIN",
    "TRAINLET_BUILD_DIR",
    "TRAINLET_STATIC",
    "TRAINLET_SLOW",
    "TRAINLET_SKIP_PODMAN",
    "TRAINLET_SKIP_SANITIZE",
    "TRAINLET_ASAN_BUILD_DIR",
    "TRAINLET_UPDATE_GOLDEN",
    "TRAINLET_ROOTS_DIR",
    "TRAINLET_DEBIAN_MIRROR",
    "TRAINLET_MPI5_ROOT",
    "TRAINLET_MPI5_MIRROR",
};

bool HelpRequested(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") return false;
    if (arg == "-h" || arg == "--help") return true;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& KnownTrainletVariables() {
  static const std::vector<std::string>* known = [] {
    auto* names =
        new std::vector<std::string>(std::begin(kOtherVariables), std::end(kOtherVariables));
    auto add = [names](const std::vector<OptionSpec>& table) {
      for (const OptionSpec& spec : table) {
        if (!spec.flag_only) names->push_back(EnvNameFor(spec.name));
      }
    };
    add(RunOptionTable());
    add(MpiOptionTable(MpiRole::kLauncher));
    add(MpiOptionTable(MpiRole::kWorker));
    add(CoordinatorOptionTable());
    add(ControllerOptionTable());
    add(ProbeOptionTable());
    add(StatusOptionTable());
    add(HealthOptionTable());
    std::sort(names->begin(), names->end());
    names->erase(std::unique(names->begin(), names->end()), names->end());
    return names;
  }();
  return *known;
}

absl::StatusOr<std::vector<std::string>> CheckTrainletEnvironment(
    std::vector<std::string>* args, const std::map<std::string, std::string>& env) {
  const bool help = HelpRequested(*args);
  absl::StatusOr<bool> strict = TakeStrictEnvOption(args, env);
  if (!strict.ok() && !help) return strict.status();
  std::vector<std::string> unknown = UnknownTrainletVariables(env, KnownTrainletVariables());
  if (unknown.empty()) return unknown;
  if (strict.ok() && *strict && !help) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(unknown, "; "), ": ", kStrictEnvFlag, " (", kStrictEnvVariable,
                     ") refuses TRAINLET_* variables trainlet does not read; correct or unset it"));
  }
  for (std::string& w : unknown) {
    if (!absl::StartsWith(w, "unknown ")) continue;  // the count of the rest
    absl::StrAppend(&w, ": trainlet reads no such variable and ignores it (", kStrictEnvFlag,
                    " or ", kStrictEnvVariable, "=1 make this an error)");
  }
  return unknown;
}

}  // namespace trainlet::agent

// Unknown TRAINLET_* variables: a typo in the environment (the main interface
// in Kubernetes) gets a warning with a did-you-mean, as a typo in a flag gets
// an error, and with --strict-env (TRAINLET_STRICT_ENV) an error, exit 64
// (docs/configuration.md, "Unknown variables").
//
// KnownTrainletVariables() is the one list of what is known: the variable of
// every option of every command (their option tables), plus the variables
// trainlet reads outside a table, those it sets for the processes it starts
// (a nested trainlet inherits them) and those the project's own scripts and
// tests read. env_check_test checks the list against the sources.
//
// Pure functions; thread-compatible.
#ifndef TRAINLET_CMD_ENV_CHECK_H_
#define TRAINLET_CMD_ENV_CHECK_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::agent {

// Sorted, without duplicates.
const std::vector<std::string>& KnownTrainletVariables();

// For a command that reads TRAINLET_* variables (`args`: the words after
// it): takes --strict-env out of `args` (TakeStrictEnvOption), then returns
// one warning per unknown TRAINLET_* variable of `env` (none when all are
// known). InvalidArgument (exit 64) naming every unknown variable when the
// check is strict, or for a --strict-env value that is not a boolean; never
// when -h/--help comes before `--` (help always works).
absl::StatusOr<std::vector<std::string>> CheckTrainletEnvironment(
    std::vector<std::string>* args, const std::map<std::string, std::string>& env);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_ENV_CHECK_H_

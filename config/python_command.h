// The worker COMMAND read as a Python interpreter's command line, shared by
// the nested-launcher detection (nested_launcher.h) and warm standby workers
// (agent/warm_workers.h, docs/warm-workers.md):
//
//   [env [-i] [-u NAME] [-C DIR] [NAME=VALUE]... [--]] python[3[.N]] [OPTIONS]
//       (SCRIPT | -m MODULE | -c CODE | - | nothing) [ARGS...]
//
// Programs are matched by basename; "-um MODULE", "-mMODULE", "-Wdefault"
// and "-X dev" spellings are understood as Python does. A command wrapped in
// a shell is not Python.
//
// Pure functions; thread-compatible.
#ifndef TRAINLET_CONFIG_PYTHON_COMMAND_H_
#define TRAINLET_CONFIG_PYTHON_COMMAND_H_

#include <optional>
#include <string>
#include <vector>

namespace trainlet::agent {

struct PythonCommand {
  enum class Target {
    kScript,  // python [OPTIONS] SCRIPT ARGS...
    kModule,  // python [OPTIONS] -m MODULE ARGS...
    kCode,    // python [OPTIONS] -c CODE ARGS...
    kStdin,   // python [OPTIONS] - ARGS...
    kNone,    // python [OPTIONS]: the interactive interpreter
  };
  // argv[0 .. interpreter]: an `env` prefix, if any, and the interpreter.
  std::vector<std::string> launcher;
  // The interpreter's options before the target, one word each, values
  // attached ("-u", "-Wdefault", "-Xdev", "--check-hash-based-pycs=always"
  // as separate words "--check-hash-based-pycs" "always" are kept as given).
  std::vector<std::string> options;
  Target target = Target::kNone;
  std::string target_name;  // SCRIPT, MODULE or CODE.
  std::vector<std::string> args;
  // The `env` prefix's options, when there is one.
  bool env_clears = false;              // -i / --ignore-environment / "-"
  std::vector<std::string> env_unsets;  // -u NAME
  std::vector<std::string> env_sets;    // NAME=VALUE
  std::string env_chdir;                // -C DIR
  // An `env` option other than those: its effect is not known here.
  std::string env_unknown_option;
};

// The command as Python's, or nullopt when its program (after an optional
// `env` prefix) is not a Python interpreter ("python", "python3",
// "python3.11"; not "python3-config"), or `env` splits a command line from
// one word (-S).
std::optional<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv);

// The basename of the program `argv` runs after an optional `env` prefix
// ("fleetrun"), or "" when there is none.
std::string ProgramAfterEnv(const std::vector<std::string>& argv);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_PYTHON_COMMAND_H_

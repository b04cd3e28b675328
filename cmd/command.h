// A `trainlet` command as main.cc runs it: a row of its table. Each command
// has a file of its own (cmd/<command>.cc) that says how to parse the words
// after its name, what --help prints, and the run its parse yields; main.cc
// does what every command shares: the usage text and did-you-mean, the
// signal set-up of the entrypoints, the check for unknown TRAINLET_*
// variables, the usage error with its exit code, --help, the termination
// message and the exit itself.
//
// Threading: main()'s thread only.
#ifndef TRAINLET_CMD_COMMAND_H_
#define TRAINLET_CMD_COMMAND_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::cmd {

using Env = std::map<std::string, std::string>;

// A parsed command line: -h/--help, or a run ready to start.
struct Invocation {
  bool help = false;
  // This node's id, for the termination message of an entrypoint.
  std::string node;
  // Runs the command and returns its exit code. `*reason` may say why it
  // failed, for the termination message (else the agent's own reason, else
  // the last ERROR line).
  std::function<int(std::string* reason)> run;
};

struct Command {
  const char* name;
  const char* synopsis;  // after "trainlet ", in the usage text.
  const char* summary;   // lines of at most 70 columns.
  // Reads TRAINLET_* variables: unknown ones are checked (cmd/env_check.h).
  bool reads_env;
  // A pod's entrypoint: supervises (signals to a signalfd, subreaper) and
  // writes the termination message as it exits (launcher/termination_log.h).
  bool entrypoint;
  // The process ends as soon as the run returns, without exit handlers: a
  // thread it started may still be inside NVML (the node probe) or libssh
  // (a readiness probe), where library destructors must not run.
  bool exits_at_once;
  // The words after the name, and trainlet's environment. An error is a
  // usage or configuration error (ExitCodeForConfigError: 64 or 78).
  absl::StatusOr<Invocation> (*parse)(const std::vector<std::string>& args, const Env& env);
  std::string (*help)();
};

// The commands, each defined in its own file.
extern const Command kRunCommand;          // run.cc
extern const Command kMpiLauncherCommand;  // mpi_launcher.cc
extern const Command kMpiWorkerCommand;    // mpi_worker.cc
extern const Command kCoordinatorCommand;  // coordinator.cc
extern const Command kControllerCommand;   // controller.cc
extern const Command kStatusCommand;       // status.cc
extern const Command kHealthCommand;       // health.cc
extern const Command kProbeCommand;        // probe.cc
extern const Command kInstallCommand;      // install.cc
extern const Command kSshConnectCommand;   // ssh_connect.cc
extern const Command kVersionCommand;      // version.cc

// trainlet's version, as the build names it (version.cc).
const char* Version();

// Says `message` as `trainlet COMMAND: message` on stderr, names it as the
// reason of the exit, and returns `code`.
int Fail(absl::string_view command, int code, absl::string_view message, std::string* reason);

}  // namespace trainlet::cmd

#endif  // TRAINLET_CMD_COMMAND_H_

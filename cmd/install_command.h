// `trainlet install DEST`: copies the running binary to DEST. It is what the
// init-container pattern runs (images/README.md, docs/kubernetes.md): the
// trainlet image is FROM scratch with the static binary only, so it has no
// `cp` and no shell; its init container runs `/trainlet install
// /opt/trainlet/trainlet` to put trainlet into an emptyDir, and the training
// container, any image, runs it from there.
//
// Single-threaded; runs before anything else in the process.
#ifndef TRAINLET_CMD_INSTALL_COMMAND_H_
#define TRAINLET_CMD_INSTALL_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainlet::agent {

// Copies the regular file `source` to `dest`, or to `dest`/trainlet when
// `dest` is an existing directory. The copy is written to a temporary file
// beside the target (mode 0755), synced, and renamed over it, so a reader
// never sees a half-written binary and an existing one is replaced whole.
// Returns the path written. Errors name the path and what failed:
// NotFound (no source, or no parent directory of dest), FailedPrecondition
// (source not a regular file), an I/O error's code otherwise.
absl::StatusOr<std::string> InstallBinary(const std::string& source, const std::string& dest);

// The words after "install": DEST, or -h/--help (an empty `dest`).
// InvalidArgument otherwise.
struct InstallArgs {
  bool help = false;
  std::string dest;
};
absl::StatusOr<InstallArgs> ParseInstallArgs(const std::vector<std::string>& args);
std::string InstallHelpText();

// Installs `self` (the caller passes /proc/self/exe) at `dest` and prints
// the path to `out`. Exit code: 0 installed, 71 the copy failed.
int Install(const std::string& dest, const std::string& self, std::ostream& out, std::ostream& err);

// Both: `args` are what follows "install". Exit code: 0 installed (or
// help), 64 bad arguments, 71 the copy failed.
int RunInstall(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
               std::ostream& err);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_INSTALL_COMMAND_H_

// Finds the file a worker's COMMAND refers to, the way execvp(3) would, so
// that "not found" (exit 127) and "not executable" (exit 126) are reported
// with a clear message before anything is forked. Pure functions over the
// filesystem; safe to call from any thread.
#ifndef TRAINLET_LAUNCHER_COMMAND_RESOLVER_H_
#define TRAINLET_LAUNCHER_COMMAND_RESOLVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainlet {
namespace launcher {

// The search path used when the worker environment has no (or an empty) PATH.
inline constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";

// Resolves `command` as execvp would: a command containing '/' is used as is
// (relative to the current directory); otherwise each entry of `path_env`
// (the worker's PATH value; kDefaultPath when empty) is tried in order, an
// empty entry meaning the current directory. Returns the path to exec, or
//   NotFoundError          -> the caller exits 127 (kExitNotFound)
//   PermissionDeniedError  -> exists but is not an executable file (a
//                             directory, or no execute permission): 126.
absl::StatusOr<std::string> ResolveCommand(const std::string& command, const std::string& path_env);

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_COMMAND_RESOLVER_H_

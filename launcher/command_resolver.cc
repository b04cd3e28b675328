#include "launcher/command_resolver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainlet {
namespace launcher {
namespace {

enum class Candidate { kExecutable, kMissing, kNotExecutable, kDirectory };

Candidate Check(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Candidate::kMissing;
  if (S_ISDIR(st.st_mode)) return Candidate::kDirectory;
  // access() rather than mode bits: it accounts for our uid/gid, root and
  // noexec mounts the same way execve will.
  if (access(path.c_str(), X_OK) != 0) return Candidate::kNotExecutable;
  return Candidate::kExecutable;
}

absl::Status NotExecutableError(const std::string& command, const std::string& path,
                                Candidate why) {
  const char* reason = why == Candidate::kDirectory ? "is a directory" : "permission denied";
  return absl::PermissionDeniedError(absl::StrCat("trainlet: COMMAND '", command, "' -> '", path,
                                                  "' is not executable (", reason,
                                                  "); check the path and its mode (chmod +x)"));
}

}  // namespace

absl::StatusOr<std::string> ResolveCommand(const std::string& command,
                                           const std::string& path_env) {
  if (command.empty()) {
    return absl::NotFoundError("trainlet: COMMAND is empty");
  }
  if (command.find('/') != std::string::npos) {
    Candidate c = Check(command);
    switch (c) {
      case Candidate::kExecutable:
        return command;
      case Candidate::kMissing:
        return absl::NotFoundError(
            absl::StrCat("trainlet: COMMAND '", command, "' not found (no such file)"));
      default:
        return NotExecutableError(command, command, c);
    }
  }

  const std::string search = path_env.empty() ? std::string(kDefaultPath) : path_env;
  // Like execvp: remember a match we may not execute, but keep looking for
  // one we may; report "not executable" only if nothing better turns up.
  std::string denied_path;
  Candidate denied_why = Candidate::kMissing;
  for (absl::string_view dir : absl::StrSplit(search, ':')) {
    std::string path = dir.empty() ? absl::StrCat("./", command) : absl::StrCat(dir, "/", command);
    Candidate c = Check(path);
    if (c == Candidate::kExecutable) return path;
    if (c != Candidate::kMissing && denied_path.empty()) {
      denied_path = path;
      denied_why = c;
    }
  }
  if (!denied_path.empty()) return NotExecutableError(command, denied_path, denied_why);
  return absl::NotFoundError(
      absl::StrCat("trainlet: COMMAND '", command, "' not found in PATH (", search, ")"));
}

}  // namespace launcher
}  // namespace trainlet

#include "mpi/state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

constexpr size_t kMaxComponent = 200;
constexpr size_t kMaxPath = 2048;

bool IsSafeChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '+' || c == ',' || c == '=' || c == '@' || c == '/';
}

absl::Status CheckComponent(absl::string_view what, const std::string& value) {
  if (value.empty() || value.size() > kMaxComponent || value == "." || value == ".." ||
      value.find('/') != std::string::npos || !IsSafeStatePath(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", SafeForLog(value),
                     "\" cannot name a state directory: it must be 1-200 letters, digits or "
                     "._-+,=@ (not . or ..); pass --state-dir to choose the directory instead"));
  }
  return absl::OkStatus();
}

std::string ErrnoText(int error) { return absl::StrCat(strerror(error), " (errno ", error, ")"); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) {
    if (this != &other) {
      if (fd_ >= 0) close(fd_);
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens (creating if missing) `name` under `parent`, a directory trainlet
// owns: never through a symlink, owned by us, mode tightened to 0700.
absl::StatusOr<Fd> OpenOwnedDir(const Fd& parent, const std::string& name,
                                const std::string& path) {
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory ", SafeForLog(path, 512), ": ", why,
        "; remove it, or pass --state-dir with a directory of your own (it must not be shared)"));
  };
  if (mkdirat(parent.get(), name.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("creating state directory ", SafeForLog(path, 512), ": ", ErrnoText(errno),
                     "; pass --state-dir with a writable directory"));
  }
  Fd fd(openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    struct stat st;
    if (fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) return refuse("is a symlink");
      if (!S_ISDIR(st.st_mode)) return refuse("is not a directory");
    }
    return refuse(ErrnoText(error));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return refuse(ErrnoText(errno));
  if (st.st_uid != geteuid()) {
    return refuse(
        absl::StrCat("is owned by uid ", st.st_uid, ", not by this user (uid ", geteuid(), ")"));
  }
  if ((st.st_mode & 07777) != 0700 && fchmod(fd.get(), 0700) != 0) {
    return refuse(absl::StrCat("cannot make it mode 0700: ", ErrnoText(errno)));
  }
  return fd;
}

// Opens an existing directory trainlet does not own (/tmp, a parent of
// --state-dir), following symlinks.
absl::StatusOr<Fd> OpenBaseDir(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory parent ", SafeForLog(path, 512), ": ", ErrnoText(errno),
                     "; check TMPDIR or pass --state-dir with an existing, writable parent"));
  }
  return fd;
}

}  // namespace

bool IsSafeStatePath(absl::string_view path) {
  if (path.size() > kMaxPath) return false;
  for (char c : path) {
    if (!IsSafeChar(c)) return false;
  }
  return true;
}

absl::StatusOr<std::string> PrepareStateDir(const std::string& explicit_dir,
                                            const std::string& job_id, const std::string& node_id,
                                            const std::map<std::string, std::string>& env) {
  std::string base;                // exists already; followed if a symlink
  std::vector<std::string> owned;  // components below base, created/checked
  if (!explicit_dir.empty()) {
    std::string absolute = explicit_dir;
    if (absolute.front() != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof(cwd)) == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("--state-dir ", SafeForLog(explicit_dir, 512),
                         " is relative and the current directory is unknown: ", ErrnoText(errno),
                         "; give an absolute path"));
      }
      absolute = absl::StrCat(cwd, "/", absolute);
    }
    std::vector<std::string> parts = absl::StrSplit(absolute, '/', absl::SkipEmpty());
    std::vector<std::string> clean;
    for (const std::string& part : parts) {
      if (part == ".") continue;
      if (part == "..") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--state-dir ", SafeForLog(explicit_dir, 512), " has a \"..\"; give a plain path"));
      }
      clean.push_back(part);
    }
    if (clean.empty()) {
      return absl::InvalidArgumentError("--state-dir cannot be /; give a directory of its own");
    }
    // Parents that exist are someone's (/var, /tmp); those we create and the
    // final directory are ours.
    size_t existing = 0;
    std::string path;
    for (; existing + 1 < clean.size(); ++existing) {
      const std::string next = absl::StrCat(path, "/", clean[existing]);
      struct stat st;
      if (stat(next.c_str(), &st) != 0) break;
      path = next;
    }
    base = path.empty() ? "/" : path;
    owned.assign(clean.begin() + static_cast<long>(existing), clean.end());
  } else {
    auto tmpdir = env.find("TMPDIR");
    base = tmpdir == env.end() || tmpdir->second.empty() ? "/tmp" : tmpdir->second;
    if (base.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("TMPDIR ", SafeForLog(base, 512),
                       " is not an absolute path; fix it or pass --state-dir"));
    }
    if (absl::Status s = CheckComponent("job id", job_id); !s.ok()) return s;
    if (absl::Status s = CheckComponent("node id", node_id); !s.ok()) return s;
    owned = {absl::StrCat("trainlet-", geteuid()), job_id, node_id};
  }

  std::string path = base;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::string full = path;
  for (const std::string& part : owned) absl::StrAppend(&full, full == "/" ? "" : "/", part);
  if (!IsSafeStatePath(full)) {
    return absl::InvalidArgumentError(
        absl::StrCat("state directory ", SafeForLog(full, 512),
                     " has characters MPI's ssh arguments cannot carry (only letters, digits and "
                     "._-+,=@/ are allowed); pass --state-dir with such a path"));
  }

  absl::StatusOr<Fd> dir = OpenBaseDir(path);
  if (!dir.ok()) return dir.status();
  for (const std::string& part : owned) {
    absl::StrAppend(&path, path == "/" ? "" : "/", part);
    absl::StatusOr<Fd> next = OpenOwnedDir(*dir, part, path);
    if (!next.ok()) return next.status();
    dir = std::move(next);
  }
  return path;
}

}  // namespace trainlet::mpi

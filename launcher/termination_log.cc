#include "launcher/termination_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/exit_codes.h"
#include "common/logging.h"

namespace trainlet::launcher {
namespace {

absl::Mutex g_reason_mu;
std::string* g_reason ABSL_GUARDED_BY(g_reason_mu) = new std::string();

absl::Status ErrnoStatus(int error, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// `text` escaped (SafeForLog), cut so that the result is at most `budget`
// bytes; "" when not even the cut's note fits.
std::string EscapedWithin(absl::string_view text, size_t budget) {
  if (std::string all = SafeForLog(text, text.size()); all.size() <= budget) return all;
  // The most input bytes whose escaped form, with the cut's note, fits
  // (an escape takes 1 to 4 bytes, so search).
  size_t lo = 0;
  size_t hi = std::min(text.size(), budget);
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (SafeForLog(text, mid).size() <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  std::string out = SafeForLog(text, lo);
  return out.size() <= budget ? out : "";
}

// "a FIFO", "a directory", ...: what a file that is not a regular one is.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

absl::Status NotRegular(absl::string_view path, mode_t mode) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, " is not a regular file (", FileKind(mode), ")"));
}

}  // namespace

std::string TerminationMessage(int exit_code, absl::string_view node, absl::string_view reason,
                               size_t max_bytes) {
  std::string why(reason);
  if (why.empty() && exit_code > kExitSignalBase && exit_code < kExitSignalBase + 65) {
    const int sig = exit_code - kExitSignalBase;
    why = absl::StrCat("stopped by signal ", sig, " (", strsignal(sig), ")");
  }
  std::string line = absl::StrCat("exit code ", exit_code);
  if (!node.empty()) absl::StrAppend(&line, " on node ", SafeForLog(node, 253));
  if (line.size() + 1 > max_bytes) line.resize(max_bytes > 0 ? max_bytes - 1 : 0);
  if (!why.empty() && line.size() + 3 < max_bytes) {
    const std::string escaped = EscapedWithin(why, max_bytes - line.size() - 3);
    if (!escaped.empty()) absl::StrAppend(&line, ": ", escaped);
  }
  if (max_bytes > 0) line += '\n';
  return line;
}

void SetTerminationReason(absl::string_view reason) {
  absl::MutexLock lock(&g_reason_mu);
  g_reason->assign(reason.data(), std::min(reason.size(), kMaxTerminationMessageBytes));
}

std::string TerminationReason() {
  absl::MutexLock lock(&g_reason_mu);
  return *g_reason;
}

TerminationLog TerminationLog::FromEnv(const std::map<std::string, std::string>& env) {
  auto it = env.find(kTerminationLogVariable);
  if (it != env.end() && !it->second.empty()) return TerminationLog(it->second, /*create=*/true);
  return TerminationLog(kDefaultTerminationLog, /*create=*/false);
}

TerminationLog::TerminationLog(std::string path, bool create)
    : path_(path == "none" ? "" : std::move(path)), create_(create) {
  struct stat st;
  if (!path_.empty() && stat(path_.c_str(), &st) == 0) {
    existed_ = true;
    size_ = st.st_size;
    mtime_ = st.st_mtim;
  }
}

absl::Status TerminationLog::Write(absl::string_view message) const {
  if (path_.empty()) return absl::OkStatus();
  // What is not a regular file is never opened: opening a FIFO waits for a
  // reader, a device's open may act (a tape rewinds).
  if (struct stat st; stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return NotRegular(path_, st.st_mode);
  }
  // Should it change meanwhile: O_NONBLOCK, a FIFO with no reader fails
  // (ENXIO) instead of hanging the exit; O_NOCTTY, a terminal never becomes
  // ours.
  const int fd = open(path_.c_str(),
                      O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (create_ ? O_CREAT : 0), 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path_));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, absl::StrCat("cannot stat ", path_));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return NotRegular(path_, st.st_mode);
  }
  const bool changed = !existed_ || st.st_size != size_ || st.st_mtim.tv_sec != mtime_.tv_sec ||
                       st.st_mtim.tv_nsec != mtime_.tv_nsec;
  if (st.st_size > 0 && changed) {
    close(fd);
    return absl::AlreadyExistsError(
        absl::StrCat(path_, " was written during the run (a worker's own message): kept"));
  }
  if (static_cast<size_t>(st.st_size) > kMaxTerminationMessageBytes) {
    // No termination message is that long (ours or a stale one): the path
    // names somebody's data (a log, through a symlink), which stays whole.
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " holds ", st.st_size, " bytes, more than a termination message can (",
                     kMaxTerminationMessageBytes, "): not a termination message file, kept"));
  }
  absl::Status status;
  if (ftruncate(fd, 0) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot truncate ", path_));
  }
  const char* p = message.data();
  size_t left = message.size();
  while (status.ok() && left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = ErrnoStatus(n < 0 ? errno : EIO, absl::StrCat("cannot write ", path_));
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (close(fd) != 0 && status.ok()) {
    status = ErrnoStatus(errno, absl::StrCat("cannot write ", path_));
  }
  return status;
}

}  // namespace trainlet::launcher

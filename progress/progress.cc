#include "progress/progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kProgressPrefix = "progress.";
constexpr absl::string_view kTracebackPrefix = "traceback.";

bool ValidKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxProgressKeyBytes) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(key[0])) && key[0] != '_') return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

bool ValidValue(absl::string_view value) {
  if (value.empty() || value.size() > kMaxProgressValueBytes) return false;
  return std::all_of(value.begin(), value.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Reads at most `max` bytes from the end of the regular file `path`,
// without following a symlink or blocking on a FIFO. `from_start`: what was
// read is the whole file.
std::optional<std::string> ReadTail(const std::string& path, size_t max, bool* from_start) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return std::nullopt;
  }
  const off_t size = st.st_size;
  const off_t offset = size > static_cast<off_t>(max) ? size - static_cast<off_t>(max) : 0;
  std::string data(static_cast<size_t>(size - offset), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = pread(fd, data.data() + got, data.size() - got, offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  data.resize(got);
  *from_start = offset == 0;
  return data;
}

}  // namespace

std::string ProgressLine::Text() const {
  return absl::StrJoin(fields, " ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=", kv.second);
  });
}

const std::string* ProgressLine::Find(absl::string_view key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<ProgressLine> ParseProgressTail(absl::string_view tail, bool from_start) {
  // The last complete line: up to the last '\n'; a trailing piece without
  // one may still be being written, unless it is the whole file.
  absl::string_view text = tail;
  const size_t last_newline = text.rfind('\n');
  if (last_newline == absl::string_view::npos) {
    if (!from_start) return std::nullopt;  // one line longer than what was read
  } else {
    text = text.substr(0, last_newline);
    const size_t previous = text.rfind('\n');
    if (previous != absl::string_view::npos) {
      text = text.substr(previous + 1);
    } else if (!from_start) {
      return std::nullopt;  // its start was not read: too long a line
    }
  }
  ProgressLine line;
  for (absl::string_view token :
       absl::StrSplit(text, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos || !ValidKey(token.substr(0, eq)) ||
        !ValidValue(token.substr(eq + 1)) || line.fields.size() >= kMaxProgressFields) {
      ++line.skipped;
      continue;
    }
    line.fields.emplace_back(std::string(token.substr(0, eq)), std::string(token.substr(eq + 1)));
  }
  if (line.fields.empty()) return std::nullopt;
  return line;
}

absl::StatusOr<std::unique_ptr<ProgressDir>> ProgressDir::Create(
    const Options& options, const std::map<std::string, std::string>& env) {
  std::string parent = options.parent;
  if (parent.empty()) {
    auto tmpdir = env.find("TMPDIR");
    struct stat st;
    if (tmpdir != env.end() && !tmpdir->second.empty() && tmpdir->second.size() < 512) {
      parent = tmpdir->second;
    } else if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) {
      parent = "/dev/shm";
    } else {
      parent = "/tmp";
    }
  }
  std::string templ = absl::StrCat(parent, "/trainlet-progress-XXXXXX");
  // mkdtemp makes it 0700.
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a progress directory in ", SafeForLog(parent, 200), ": ",
                     strerror(errno), "; set TMPDIR to a writable directory"));
  }
  int fd = -1;
  if (options.use_inotify) {
    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd >= 0 && inotify_add_watch(fd, templ.c_str(),
                                     IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE |
                                         IN_MOVED_TO | IN_ONLYDIR) < 0) {
      close(fd);
      fd = -1;
    }
    if (fd < 0) {
      TLOG(kWarning) << "inotify unavailable (" << strerror(errno)
                     << "): progress files are checked once a second instead";
    }
  }
  return std::unique_ptr<ProgressDir>(new ProgressDir(std::move(templ), fd));
}

ProgressDir::ProgressDir(std::string path, int inotify_fd)
    : path_(std::move(path)), inotify_fd_(inotify_fd) {}

ProgressDir::~ProgressDir() {
  // Closed before Reset, which then has no queued events to drop: a read of
  // the closed descriptor could be another thread's new file by then.
  if (inotify_fd_ >= 0) close(inotify_fd_);
  inotify_fd_ = -1;
  Reset(0);
  if (rmdir(path_.c_str()) != 0) {
    TLOG(kDebug) << "cannot remove " << path_ << ": " << strerror(errno);
  }
}

std::string ProgressDir::ProgressFile(int local_rank) const {
  return absl::StrCat(path_, "/", kProgressPrefix, local_rank);
}

std::string ProgressDir::TracebackFile(int local_rank) const {
  return absl::StrCat(path_, "/", kTracebackPrefix, local_rank);
}

void ProgressDir::Reset(int local_ranks) {
  // Whatever the workers left (files of any name: they own the directory's
  // contents), one level deep.
  if (DIR* dir = opendir(path_.c_str())) {
    std::vector<std::string> names;
    while (struct dirent* e = readdir(dir)) {
      const absl::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
      if (names.size() > 4096) break;
    }
    closedir(dir);
    for (const std::string& name : names) {
      const std::string file = absl::StrCat(path_, "/", name);
      if (unlink(file.c_str()) != 0 && errno == EISDIR) rmdir(file.c_str());
    }
  }
  local_ranks_ = local_ranks;
  seen_.assign(static_cast<size_t>(std::max(0, local_ranks)), Seen{});
  if (inotify_fd_ >= 0) {
    // The removals above queued events: drop them.
    char buffer[4096];
    while (read(inotify_fd_, buffer, sizeof(buffer)) > 0) {
    }
  }
}

int ProgressDir::RankOfProgressFile(absl::string_view name) const {
  if (!absl::ConsumePrefix(&name, kProgressPrefix)) return -1;
  int rank = -1;
  if (name.empty() || name.size() > 6 || !absl::SimpleAtoi(name, &rank)) return -1;
  if (rank < 0 || rank >= local_ranks_ || absl::StrCat(rank) != name) return -1;
  return rank;
}

bool ProgressDir::StatChanged(int local_rank) {
  struct stat st;
  Seen now;
  if (lstat(ProgressFile(local_rank).c_str(), &st) == 0) {
    now.exists = true;
    now.ino = st.st_ino;
    now.size = st.st_size;
    now.mtime = st.st_mtim;
    now.ctime = st.st_ctim;
  }
  Seen& before = seen_[static_cast<size_t>(local_rank)];
  const bool changed =
      now.exists &&
      (!before.exists || now.ino != before.ino || now.size != before.size ||
       now.mtime.tv_sec != before.mtime.tv_sec || now.mtime.tv_nsec != before.mtime.tv_nsec ||
       now.ctime.tv_sec != before.ctime.tv_sec || now.ctime.tv_nsec != before.ctime.tv_nsec);
  before = now;
  return changed;
}

std::optional<ProgressLine> ProgressDir::ReadLine(int local_rank) const {
  bool from_start = false;
  std::optional<std::string> tail =
      ReadTail(ProgressFile(local_rank), kProgressReadBytes, &from_start);
  if (!tail.has_value()) return std::nullopt;
  return ParseProgressTail(*tail, from_start);
}

std::vector<ProgressUpdate> ProgressDir::Collect() {
  std::set<int> changed;
  if (inotify_fd_ >= 0) {
    alignas(struct inotify_event) char buffer[8192];
    bool overflow = false;
    for (;;) {
      const ssize_t n = read(inotify_fd_, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(struct inotify_event)) <= n;) {
        const auto* e = reinterpret_cast<const struct inotify_event*>(buffer + at);
        at += static_cast<ssize_t>(sizeof(struct inotify_event) + e->len);
        if (e->mask & IN_Q_OVERFLOW) overflow = true;
        if (e->len == 0) continue;
        const int rank = RankOfProgressFile(absl::string_view(e->name, strnlen(e->name, e->len)));
        if (rank >= 0) changed.insert(rank);
      }
    }
    if (overflow) {
      for (int r = 0; r < local_ranks_; ++r) changed.insert(r);
    }
    // Keep the stat view current (an event may repeat what was seen).
    for (auto it = changed.begin(); it != changed.end();) {
      const bool differs = StatChanged(*it);
      it = differs || !overflow ? std::next(it) : changed.erase(it);
    }
  } else {
    for (int r = 0; r < local_ranks_; ++r) {
      if (StatChanged(r)) changed.insert(r);
    }
  }
  std::vector<ProgressUpdate> updates;
  for (int rank : changed) {
    // A file removed meanwhile is no progress.
    if (!seen_[static_cast<size_t>(rank)].exists) continue;
    updates.push_back(ProgressUpdate{rank, ReadLine(rank)});
  }
  return updates;
}

bool ProgressDir::TracebackOptedIn(int local_rank) const {
  struct stat st;
  return lstat(TracebackFile(local_rank).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t ProgressDir::TracebackBytes(int local_rank) const {
  struct stat st;
  if (lstat(TracebackFile(local_rank).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return static_cast<int64_t>(st.st_size);
}

std::string ProgressDir::ReadTraceback(int local_rank) const {
  bool from_start = false;
  return ReadTail(TracebackFile(local_rank), kMaxTracebackBytes, &from_start).value_or("");
}

}  // namespace trainlet::agent

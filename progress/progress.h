// Worker progress files (docs/progress.md): each local worker gets
// TRAINLET_PROGRESS_FILE, a path in a private directory of this agent, where
// it may write progress lines ("step=1200 loss=0.31", key=value tokens) or
// simply touch the file; and TRAINLET_TRACEBACK_FILE, which a Python worker
// that registered faulthandler for SIGUSR1 creates (that is its opt-in) and
// where its stacks go when the agent asks.
//
// ProgressDir owns the directory (created 0700 under $TMPDIR, else /dev/shm,
// else /tmp; removed with its files by the destructor) and watches it with
// inotify (IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_MOVED_TO),
// whose fd the agent adds to its poll loop (WorkerGroup::WatchFd), so that a
// change costs one wakeup and nothing is polled hot. Without inotify (fd()
// is -1) Collect() stat()s the files instead, on the agent's loop (at least
// once a second).
//
// What is read is bounded and validated: the last 4 KiB of a file, its last
// complete line (a line still being written is not read), at most 16 tokens
// of key [A-Za-z_][A-Za-z0-9_.-]{0,31} and value of 1-64 printable ASCII
// bytes; invalid tokens are skipped. Files are opened O_NOFOLLOW |
// O_NONBLOCK and must be regular: a worker cannot make the agent read
// elsewhere or block it.
//
// Threading: not thread-safe; the agent's loop thread uses it.
#ifndef TRAINLET_PROGRESS_PROGRESS_H_
#define TRAINLET_PROGRESS_PROGRESS_H_

#include <sys/stat.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::agent {

inline constexpr size_t kProgressReadBytes = 4096;
inline constexpr size_t kMaxProgressFields = 16;
inline constexpr size_t kMaxProgressKeyBytes = 32;
inline constexpr size_t kMaxProgressValueBytes = 64;
// What is kept of a traceback file: its last this many bytes.
inline constexpr size_t kMaxTracebackBytes = 16 * 1024;

// A validated progress line.
struct ProgressLine {
  std::vector<std::pair<std::string, std::string>> fields;
  int skipped = 0;  // tokens that were not valid key=value.

  // "step=1200 loss=0.31": the fields, space-separated.
  std::string Text() const;
  // The value of `key`, or null.
  const std::string* Find(absl::string_view key) const;
};

// The last complete line of `tail` (the end of a file; `from_start`: it is
// the whole file, so a last line without '\n' counts too), validated. Null
// when that line has no valid token (a touch, an empty write).
std::optional<ProgressLine> ParseProgressTail(absl::string_view tail, bool from_start);

// One local worker's progress file changed.
struct ProgressUpdate {
  int local_rank = 0;
  std::optional<ProgressLine> line;  // null: touched, or nothing valid to read.
};

class ProgressDir {
 public:
  struct Options {
    // Where the private directory is made; empty: $TMPDIR (from `env`),
    // else /dev/shm, else /tmp.
    std::string parent;
    bool use_inotify = true;  // false: the stat() fallback (tests).
  };

  // Creates the directory and the inotify watch. An error names the parent
  // and the cause (the agent then runs without progress files).
  static absl::StatusOr<std::unique_ptr<ProgressDir>> Create(
      const Options& options, const std::map<std::string, std::string>& env);
  ~ProgressDir();
  ProgressDir(const ProgressDir&) = delete;
  ProgressDir& operator=(const ProgressDir&) = delete;

  const std::string& path() const { return path_; }
  std::string ProgressFile(int local_rank) const;   // <dir>/progress.<local_rank>
  std::string TracebackFile(int local_rank) const;  // <dir>/traceback.<local_rank>

  // The inotify fd to poll for readability; -1 in the stat() fallback.
  int fd() const { return inotify_fd_; }

  // A new round of `local_ranks` workers: removes every file (progress of
  // an earlier round does not count) and forgets what was seen.
  void Reset(int local_ranks);

  // What changed since the last call, one update per worker at most, in
  // rank order. Drains the inotify fd; in the fallback, stat()s the files.
  std::vector<ProgressUpdate> Collect();

  // The worker created its traceback file (opted in to SIGUSR1).
  bool TracebackOptedIn(int local_rank) const;
  // The traceback file's size; -1 when it is not a regular file.
  int64_t TracebackBytes(int local_rank) const;
  // The traceback file's last kMaxTracebackBytes, raw; empty when none.
  std::string ReadTraceback(int local_rank) const;

 private:
  struct Seen {
    bool exists = false;
    ino_t ino = 0;
    off_t size = 0;
    struct timespec mtime = {0, 0};
    struct timespec ctime = {0, 0};
  };
  ProgressDir(std::string path, int inotify_fd);
  // The rank a file name of this directory is the progress file of, or -1.
  int RankOfProgressFile(absl::string_view name) const;
  // stat() of the rank's progress file changed since last seen (and is
  // recorded).
  bool StatChanged(int local_rank);
  std::optional<ProgressLine> ReadLine(int local_rank) const;

  const std::string path_;
  int inotify_fd_;  // -1 once closed (the destructor)
  int local_ranks_ = 0;
  std::vector<Seen> seen_;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_PROGRESS_H_

// Helpers for launcher tests that run real processes: temp dirs, polling
// with a deadline, /proc inspection, capture fds. Single-threaded use.
#ifndef TRAINLET_LAUNCHER_PROCESS_TEST_UTIL_H_
#define TRAINLET_LAUNCHER_PROCESS_TEST_UTIL_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/worker.h"

namespace trainlet {
namespace launcher {
namespace testing {

// A fresh directory under $TEST_TMPDIR or /tmp, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content, int mode);
// The file's content, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

// Polls `condition` every few milliseconds; true once it holds, false if
// `timeout` passes first.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

// The state letter from /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0 if the
// process does not exist (reaped).
char ProcessState(pid_t pid);
// Zombies whose parent is `parent`.
std::vector<pid_t> ZombieChildrenOf(pid_t parent);

// An in-memory file to capture output; Contents() reads it from offset 0.
class CaptureFd {
 public:
  CaptureFd();
  ~CaptureFd();
  int fd() const { return fd_; }
  std::string Contents() const;

 private:
  int fd_;
};

// `sh -c script` with env {PATH=/usr/bin:/bin, DIR=<dir>}.
ProcessSpec ShellWorker(const std::string& script, const std::string& dir = "/tmp",
                        int local_rank = 0, int global_rank = 0);

}  // namespace testing
}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_PROCESS_TEST_UTIL_H_

#include "launcher/output_readers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/logging.h"
#include "launcher/children.h"

namespace trainlet {
namespace launcher {
namespace {

// Readers are checked this often while waiting: SIGCHLD is blocked and read
// by nobody once the Supervisor is gone.
constexpr absl::Duration kReapInterval = absl::Milliseconds(5);
// Readers named in the log line, at most.
constexpr size_t kMaxListed = 10;

// This process's descriptors that are write ends of pipes, by pipe.
std::map<PipeId, std::vector<int>> PipeWriteEnds() {
  std::map<PipeId, std::vector<int>> ends;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return ends;
  const int dir_fd = dirfd(dir);
  while (struct dirent* entry = readdir(dir)) {
    int fd;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dir_fd) continue;
    const std::optional<PipeId> pipe = PipeOfFd(fd);
    if (!pipe) continue;
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) continue;
    ends[*pipe].push_back(fd);
  }
  closedir(dir);
  return ends;
}

}  // namespace

OutputReaders FinishOutputReaders(absl::Duration timeout) {
  OutputReaders result;
  // No child at all (the usual case): no /proc is read.
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  if (!children.ok() || children->empty()) return result;
  std::map<PipeId, std::vector<int>> write_ends = PipeWriteEnds();
  if (write_ends.empty()) return result;

  std::vector<pid_t> readers;
  std::vector<std::string> names;
  std::vector<PipeId> pipes;
  for (const ChildProcess& child : *children) {
    if (child.state == 'Z' || child.state == 'X') continue;
    // Another user's process or a vanished child: not known to read our
    // output.
    // Its stdin; or, when the agent exits very early, a read end it has
    // not made its stdin yet (a process substitution's shell).
    std::optional<PipeId> pipe = StdinPipe(child);
    if (!pipe || write_ends.count(*pipe) == 0) {
      pipe.reset();
      for (const PipeId& read_end : PipeReadEnds(child)) {
        if (write_ends.count(read_end) > 0) pipe = read_end;
      }
    }
    if (!pipe) continue;
    readers.push_back(child.pid);
    names.push_back(absl::StrCat(child.pid, " (", child.comm, ")"));
    pipes.push_back(*pipe);
  }
  result.found = static_cast<int>(readers.size());
  if (readers.empty()) return result;
  if (names.size() > kMaxListed) names.resize(kMaxListed);
  TLOG(kDebug) << "closing stdout and stderr and waiting at most " << absl::FormatDuration(timeout)
               << " for " << readers.size()
               << " process(es) reading them to finish: " << absl::StrJoin(names, ", ")
               << (static_cast<size_t>(result.found) > names.size() ? ", ..." : "");

  // Our ends go: each reader sees EOF once every other writer is gone too.
  // /dev/null rather than close(), so that a late write goes nowhere instead
  // of into whatever file reuses the number.
  std::fflush(nullptr);
  const int dev_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  for (const PipeId& pipe : pipes) {
    for (int fd : write_ends[pipe]) {
      if (dev_null >= 0) {
        dup2(dev_null, fd);
      } else {
        close(fd);
      }
    }
    write_ends[pipe].clear();  // a pipe read by two readers: once
  }
  if (dev_null >= 0) close(dev_null);

  const absl::Time deadline = Clock::Monotonic()->Now() + timeout;
  for (;;) {
    readers.erase(std::remove_if(readers.begin(), readers.end(),
                                 [](pid_t pid) {
                                   int status;
                                   const pid_t reaped = waitpid(pid, &status, WNOHANG);
                                   return reaped == pid || (reaped < 0 && errno == ECHILD);
                                 }),
                  readers.end());
    const absl::Duration left = deadline - Clock::Monotonic()->Now();
    if (readers.empty() || left <= absl::ZeroDuration()) break;
    absl::SleepFor(std::min(left, kReapInterval));
  }
  result.still_running = static_cast<int>(readers.size());
  if (result.still_running > 0) {
    // Seen only where stderr was not one of the pipes.
    TLOG(kWarning) << result.still_running << " process(es) reading the agent's output still "
                   << "running " << absl::FormatDuration(timeout)
                   << " after it closed stdout and stderr; exiting without them";
  }
  return result;
}

}  // namespace launcher
}  // namespace trainlet

// Lists the children of this process from /proc, for the Supervisor to find
// the orphans it adopted (as PID 1 or child subreaper) and kill them.
//
// A child may hang off any thread of this process (the kernel reparents an
// orphan to some live thread of the reaper), so this reads every process's
// parent (/proc/<pid>/stat, whose ppid is the parent's thread-group id)
// rather than /proc/self/task/<tid>/children.
//
// /proc may belong to another PID namespace than this process: `unshare
// --pid --fork` without --mount-proc leaves the parent namespace's /proc in
// place, where this process, and its children, have other numbers. Pids are
// then mapped through the NSpid lines of /proc/<pid>/status; where that is
// impossible, ListChildren() fails rather than return a number that would
// name another process here.
//
// Threading: stateless; any thread.
#ifndef TRAINLET_LAUNCHER_CHILDREN_H_
#define TRAINLET_LAUNCHER_CHILDREN_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace trainlet {
namespace launcher {

struct ChildProcess {
  pid_t pid = -1;  // in this process's PID namespace, ready for kill(2)
  // Its number in /proc (differs from `pid` when /proc belongs to another
  // PID namespace): for /proc/<pid_in_proc>/... paths.
  pid_t pid_in_proc = -1;
  char state = 0;    // from /proc/<pid>/stat: 'R', 'S', 'D', 'Z', ...
  std::string comm;  // the command name (escaped for logs), e.g. "sleep"
  // When it started, in clock ticks (sysconf(_SC_CLK_TCK)) after boot, as
  // BootTimeTicks() counts them; 0 if unknown.
  uint64_t start_ticks = 0;
};

// Now, in the clock ticks after boot that /proc/<pid>/stat gives a
// process's start time in (rounded down like it): a process whose start
// time is less started before this call. 0 if the clock cannot be read.
uint64_t BootTimeTicks();

// The children of this process (zombies included), in /proc order. When
// this process has no child at all (waitid(2) says ECHILD), empty without
// reading /proc.
// FailedPrecondition if /proc is missing or belongs to a PID namespace whose
// numbers cannot be mapped to this one.
absl::StatusOr<std::vector<ChildProcess>> ListChildren();

// A pipe or FIFO, by the identity of its inode.
using PipeId = std::pair<dev_t, ino_t>;

// The pipe (or FIFO) that `child`'s stdin reads: a `tee`, a `logger`, a
// `sed` reading someone's output. nullopt if its stdin is something else,
// or it is gone, or /proc does not let us see it (another user's).
std::optional<PipeId> StdinPipe(const ChildProcess& child);

// The pipes `child` holds a read end of, on any descriptor (its stdin or
// not yet: a shell's process substitution has the pipe on a high descriptor
// until it makes it the stdin of what it runs). Empty when it is gone or
// /proc does not let us see it.
std::vector<PipeId> PipeReadEnds(const ChildProcess& child);

// The pipe this process's own descriptor `fd` is, or nullopt.
std::optional<PipeId> PipeOfFd(int fd);

// Every descendant of `root` (children, grandchildren, ...; zombies
// included), parents before their children, `root` itself excluded. The MPI
// worker kills what its sshd's sessions left (orted, ranks) with it.
// FailedPrecondition when /proc is missing or belongs to another PID
// namespace than this process (numbers would not match).
absl::StatusOr<std::vector<pid_t>> ListDescendants(pid_t root);

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_CHILDREN_H_

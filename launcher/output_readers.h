// At exit: lets the processes that read this process's output finish.
//
// An entrypoint that does `exec > >(tee /logs/train.log)` and then `exec
// trainlet run ...` leaves `tee` a child of the agent, reading the agent's
// stdout. It ends when it reads EOF, that is when the last write end of its
// pipe closes: the agent's exit. When the agent is PID 1 of a PID namespace
// (a container), that exit also kills every other process in the namespace,
// at once: `tee` would die with the agent's last lines still in the pipe,
// unwritten. So, last thing before exiting, the agent closes its own write
// ends of such pipes and waits, bounded, for the children reading them to
// finish (docs/pid1.md, "Processes the agent was started with"). Children
// that read none of its pipes (a sidecar) are not waited for.
//
// Threading: call once, from the thread that exits, after every other
// thread has stopped writing to stdout/stderr; nothing may write to them
// afterwards (they are /dev/null then).
#ifndef TRAINLET_LAUNCHER_OUTPUT_READERS_H_
#define TRAINLET_LAUNCHER_OUTPUT_READERS_H_

#include "absl/time/time.h"

namespace trainlet {
namespace launcher {

// How long the agent waits at exit for the children reading its output.
inline constexpr absl::Duration kOutputReadersTimeout = absl::Seconds(2);

struct OutputReaders {
  int found = 0;          // children reading a pipe this process writes to
  int still_running = 0;  // of those, running when the timeout passed
};

// Finds this process's children whose stdin is a pipe this process holds a
// write end of (its stdout or stderr, or any other descriptor). If there is
// none, does nothing else. Otherwise flushes stdio, points every such write
// end at /dev/null (so that each reader sees EOF once the others are closed
// too), and reaps those children as they exit, for at most `timeout`.
OutputReaders FinishOutputReaders(absl::Duration timeout = kOutputReadersTimeout);

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_OUTPUT_READERS_H_

// The process's file-descriptor budget (RLIMIT_NOFILE): raised to the hard
// limit at start, checked up front against what the process needs (so that a
// too-low `ulimit -n` is a clear error, exit 71, instead of a hang, a crash
// inside gRPC or a misleading "port in use"), and the base from which a
// listener derives how many connections it may hold.
//
// What trainlet needs (see DescriptorsForCoordinator / DescriptorsForAgent):
//   kBaseDescriptors  stdio, gRPC's epoll and wake-up descriptors, the
//                     signalfd and eventfd, listening sockets and the
//                     listener's reserve descriptor, the agent's own channel
//                     to its coordinator, and slack;
//   + 1 per node      of a hosted coordinator (each agent holds a connection);
//   + 4 per worker    its output pipes (read ends held, write ends while it
//                     is spawned).
//
// Threading: RaiseDescriptorLimit runs once in main before any thread;
// everything else is thread-safe. RestoreDescriptorLimitInChild is
// async-signal-safe.
#ifndef TRAINLET_COMMON_DESCRIPTORS_H_
#define TRAINLET_COMMON_DESCRIPTORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainlet {

inline constexpr int kBaseDescriptors = 32;
inline constexpr int kDescriptorsPerWorker = 4;

// Raises the soft RLIMIT_NOFILE to the hard limit and remembers the original
// soft limit (for children). Returns the soft limit now in force. Idempotent.
int RaiseDescriptorLimit();
// The soft limit now in force.
int DescriptorLimit();
// The soft limit the process started with (before RaiseDescriptorLimit).
int OriginalDescriptorLimit();
// Between fork and exec: gives the child the soft limit the agent started
// with, so that workers see the limit their pod was configured with.
void RestoreDescriptorLimitInChild();
// Between fork and exec (or in a helper child that never execs): closes
// every descriptor from `first` up, so that none of the agent's (sockets,
// another child's exec-status pipe, workers' output pipes) stays open in
// the child. close_range(2); on a kernel without it, close(2) up to the
// soft limit (at most 65536). Async-signal-safe.
void CloseDescriptorsFrom(int first);

// `trainlet coordinator` for a job of up to `max_nodes` nodes.
int DescriptorsForCoordinator(int max_nodes);
// `trainlet run` with `local_workers` workers, hosting a coordinator for up
// to `hosted_nodes` nodes (0 when it hosts none).
int DescriptorsForAgent(int local_workers, int hosted_nodes);

// Raises the soft limit to the hard one, then returns ResourceExhausted when
// fewer than `needed` descriptors are allowed: the message names the limit,
// what is needed (and `breakdown`, e.g. "1 per node"), and how to raise it.
// Must run before any gRPC object exists.
absl::Status CheckDescriptorBudget(int needed, absl::string_view breakdown = "");

}  // namespace trainlet

#endif  // TRAINLET_COMMON_DESCRIPTORS_H_

// What the agent saves about a worker it declares hung (--hang-timeout,
// docs/progress.md) before stopping it: its last progress line, its last
// output lines, the state and wait channel of each thread of each process of
// its process group (from /proc), and, when the worker opted in, the Python
// stacks faulthandler wrote on SIGUSR1. Bounded in every dimension; the raw
// bytes are kept as read and escaped by ToText().
//
// Threading: plain data and functions; ReadProcessGroup reads /proc.
#ifndef TRAINLET_AGENT_HANG_EVIDENCE_H_
#define TRAINLET_AGENT_HANG_EVIDENCE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace trainlet::agent {

inline constexpr int kMaxEvidenceProcesses = 8;
inline constexpr int kMaxEvidenceThreads = 64;  // per process

struct ThreadEvidence {
  int tid = 0;
  std::string name;   // /proc/PID/task/TID/comm
  char state = '?';   // R, S, D (uninterruptible: often a driver), Z, T, ...
  std::string wchan;  // the kernel function it sleeps in; "0" or "" when running or hidden.
};

struct ProcessEvidence {
  pid_t pid = 0;
  std::string name;  // comm
  char state = '?';
  int threads_total = 0;                // all of them; `threads` holds the first ones.
  std::vector<ThreadEvidence> threads;  // at most kMaxEvidenceThreads.
};

struct HangEvidence {
  uint64_t round = 0;
  int local_rank = -1;
  int global_rank = -1;
  pid_t pid = -1;  // the worker's process (group leader).
  // When it was declared hung, on the agent's clock; the silence then, and
  // the timeout it exceeded.
  absl::Time declared_at = absl::InfinitePast();
  absl::Duration silence = absl::ZeroDuration();
  absl::Duration hang_timeout = absl::ZeroDuration();
  std::string last_progress;               // the last progress line (validated), or "".
  int processes_total = 0;                 // members of its process group found.
  std::vector<ProcessEvidence> processes;  // at most kMaxEvidenceProcesses.
  // Its last output lines (launcher::LineTail; with --prefix-output only).
  std::vector<std::string> output_tail;
  bool output_relayed = false;  // false: --prefix-output is off, no tail.
  // "sent SIGUSR1 to pid N", or why none was asked for.
  std::string traceback_note;
  std::string traceback;  // what the worker wrote to TRAINLET_TRACEBACK_FILE (raw).

  // A human-readable, multi-line report; every byte from outside escaped
  // (SafeForLog), at most ~32 KiB.
  std::string ToText() const;
};

// The members of process group `pgid` as /proc (`proc_root`) shows them, its
// leader first: at most kMaxEvidenceProcesses, each with at most
// kMaxEvidenceThreads threads; `*total` gets how many members there were.
std::vector<ProcessEvidence> ReadProcessGroup(pid_t pgid, int* total,
                                              const std::string& proc_root = "/proc");

// One process: its comm, state and threads; empty name and state '?' when it
// is gone.
ProcessEvidence ReadProcessEvidence(pid_t pid, const std::string& proc_root = "/proc");

// The process group of `pid` by /proc, or -1.
pid_t ProcessGroupOf(pid_t pid, const std::string& proc_root = "/proc");

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_HANG_EVIDENCE_H_

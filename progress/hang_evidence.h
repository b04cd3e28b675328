// What the agent saves about each local worker when one worker of the job
// is declared hung (--hang-timeout, docs/progress.md), before anything is
// stopped: its last progress line, its last output lines, the state and wait
// channel of each thread of each process of its process group (from /proc),
// and, when the worker opted in, the Python stacks faulthandler wrote on
// SIGUSR1. Bounded in every dimension; the raw bytes are kept as read and
// escaped by ToText(). ClassifyTraceback and Summarize make of it what the
// job-wide judgement needs (is its stack in a collective, where; its step and
// progress age: rendezvous/coordinator_hang.h).
//
// Threading: plain data and functions; ReadProcessGroup reads /proc.
#ifndef TRAINLET_PROGRESS_HANG_EVIDENCE_H_
#define TRAINLET_PROGRESS_HANG_EVIDENCE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainlet/v1/rendezvous.pb.h"

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

// Where a worker's Python stack is (ClassifyTraceback).
struct StackPlace {
  v1::WorkerEvidence::Stack stack = v1::WorkerEvidence::STACK_UNKNOWN;
  // "train.py:41 in main", or for a collective "all_reduce
  // (distributed_c10d.py:1541) from train.py:30 in step"; "" without a stack.
  std::string where;
};

struct HangEvidence {
  uint64_t round = 0;
  int local_rank = -1;
  int global_rank = -1;
  pid_t pid = -1;  // the worker's process (group leader).
  // This node declared this worker hung; otherwise its evidence was taken
  // because another worker was (`why` says which).
  bool declared = false;
  std::string why;
  bool exited = false;  // it had exited when the evidence was taken.
  // When the evidence was taken, on the agent's clock; the silence then
  // (InfiniteDuration: it never reported progress), and --hang-timeout.
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
  pid_t traceback_pid = 0;  // the process SIGUSR1 went to (its main thread's tid); 0: none.
  std::string traceback;    // what the worker wrote to TRAINLET_TRACEBACK_FILE (raw).
  StackPlace place;         // ClassifyTraceback(traceback), and the main thread's wait.

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

// Where the stack in `traceback` (Python faulthandler's dump: "Thread 0x...
// (most recent call first):" blocks of `  File "PATH", line N in FUNC`) is:
// in a collective when its main thread (the one that runs `<module>`; every
// thread when none does) has a frame of torch.distributed, DeepSpeed's or
// Horovod's communication, or a function named like a collective
// (all_reduce, barrier, broadcast, ...). The last dump in the text counts.
StackPlace ClassifyTraceback(absl::string_view traceback);
// ClassifyTraceback(e.traceback), its `where` followed by the state and wait
// channel of the main thread (the thread of e.traceback_pid) when /proc
// showed them: "train.py:41 in main; main thread S in hrtimer_nanosleep".
StackPlace PlaceOf(const HangEvidence& e);

// The worker's summary for the coordinator (v1::WorkerEvidence, bounded as
// rendezvous/coordinator_hang.h requires): the stack's place with its main
// thread's state and wait channel, its step (the progress line's `step=`),
// the age of its progress.
v1::WorkerEvidence Summarize(const HangEvidence& e);

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_HANG_EVIDENCE_H_

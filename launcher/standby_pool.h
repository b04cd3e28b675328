// StandbyPool: warm standby workers (docs/warm-workers.md), one per local
// rank, started while a round runs so that the next round's worker need not
// start cold. A standby is a child process in its own process group (as a
// worker, with PDEATHSIG), its stdout and stderr on /dev/null, and a Unix
// stream socket at fd 3 (kControlFd). The protocol on that socket, all of
// it bounded:
//
//   agent -> standby  `boot`: bytes written before the child exists (the
//                     program it runs; the agent's plan chooses them)
//   standby -> agent  "READY <what>\n"   prepared and waiting (blocked: no CPU)
//                     "UNFIT <why>\n"    cannot become this worker; exits
//   agent -> standby  the handover: "TLH1", u64 payload size, u32 count
//                     (little endian), stdout and stderr as SCM_RIGHTS, then
//                     the worker's environment, "K=V\0" each. The agent
//                     closes its end; closing it without a handover drops
//                     the standby (it exits).
//
// Each standby's life:
//
//   Start() -spawn-> kPreparing -"READY"-> kReady -Take()-> the round's worker
//                        |  "UNFIT", a bad or long line,     |  (no longer the
//                        |  EOF, its exit                    |  pool's)
//                        v                                   v exit, Drop()
//                      gone (SIGKILLed, reaped by the owner) <-
//
// The pool does not reap: its owner (the Supervisor, the only reaper) calls
// OnReaped() for every pid it reaps and asks Owns() before treating a child
// as an orphan. Lines are logged here (INFO), one per standby and state.
//
// Threading: thread-compatible; the Supervisor's owning thread, which must
// outlive the standbys (PDEATHSIG), calls everything.
#ifndef TRAINLET_LAUNCHER_STANDBY_POOL_H_
#define TRAINLET_LAUNCHER_STANDBY_POOL_H_

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/worker.h"
#include "launcher/worker_spawner.h"

namespace trainlet::launcher {

class StandbyPool {
 public:
  // Longest line a standby may send; longer is a broken standby.
  static constexpr size_t kMaxLineBytes = 4096;
  // How long a handover may wait for the standby to take its bytes.
  static constexpr absl::Duration kHandoverTimeout = absl::Seconds(1);

  StandbyPool() = default;
  ~StandbyPool();  // SIGKILLs what is left; the owner reaps.
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  // Starts a standby for spec.local_rank (replacing one there), `boot`
  // written to its socket first. Spawn errors as SpawnWorker's.
  absl::Status Start(const ProcessSpec& spec, const std::string& boot);

  // Hands the ready standby of `worker.local_rank` the worker's environment
  // and stdout/stderr: pipes when Relayed(worker.output) (their read ends
  // returned), else `stdout_fd`/`stderr_fd`. The process is then the
  // caller's worker. FailedPrecondition (message: why, for the log) when
  // there is no ready standby for that rank; Unavailable when the handover
  // failed (the standby is killed).
  absl::StatusOr<SpawnedWorker> Take(const ProcessSpec& worker, int stdout_fd, int stderr_fd);

  // Kills every standby (SIGKILL to its group); `why`, unless empty, is
  // logged once when there were any.
  void Drop(const std::string& why);

  // The control sockets to poll for reading, and what to do when one is
  // readable (or hung up).
  std::vector<int> PollFds() const;
  void OnReadable(int fd);

  // The owner reaped `pid`: true if it was a standby (then forgotten).
  bool OnReaped(pid_t pid, int wait_status);
  bool Owns(pid_t pid) const;
  // Standbys (killed ones not reaped yet excluded), and those ready.
  int size() const { return static_cast<int>(standbys_.size()); }
  int ready() const;
  // Pids of the standbys and of the killed ones not reaped yet.
  std::vector<pid_t> pids() const;
  // The standby's pid for `local_rank`, or -1.
  pid_t pid(int local_rank) const;

 private:
  enum class State { kPreparing, kReady };
  struct Standby {
    pid_t pid = -1;
    int control = -1;  // our end, O_NONBLOCK | O_CLOEXEC; -1 once closed
    State state = State::kPreparing;
    std::string line;  // what arrived of the current line
  };
  void Kill(Standby* standby);
  // Kills the standby at `it` (its exit is then no news) and forgets it.
  void Discard(std::map<int, Standby>::iterator it);
  void CloseControl(Standby* standby);

  std::map<int, Standby> standbys_;  // by local rank
  // Killed, not reaped yet.
  std::set<pid_t> killed_;
  int dev_null_ = -1;
};

}  // namespace trainlet::launcher

#endif  // TRAINLET_LAUNCHER_STANDBY_POOL_H_

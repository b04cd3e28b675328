// Supervisor: the tini-like core of the agent, and the real WorkerGroup
// (worker_group.h). It starts the round's workers, each in its own process
// group, and helpers (e.g. sshd) restarted by policy; it is the only reaper
// of the process (as PID 1 or child subreaper, of every orphaned descendant
// too); it reports exits shell-style, hands the agent its signals, relays
// signals to the workers' groups, relays prefixed output through
// OutputWriters that never block it, keeps each prefixed worker's last lines
// (LineTail), and polls one more fd for its caller (WatchFd). The
// entrypoint's own processes are never signalled. No gRPC. What it does and
// why, step by step: docs/pid1.md.
//
//   Start(workers) -> running -Wait()-> kWorkerExited (one per worker)
//        ^   SignalWorkers(TERM..KILL)        | leaders reaped; groups drain
//        |   (the caller's policy)            v (a `tee` gets 2 s)
//        +---- kWorkersGone <-- every group empty, the workers' orphans killed
//   StartHelper(h) -> running -exit-> kHelperExited{will_restart}: again
//        after 1 s, 2 s, 4 s ... 30 s (reset once it stayed up 60 s)
//
// Threading: one owning thread calls every method but Wake() (any thread:
// it interrupts Wait()). The thread that calls Start() must outlive the
// workers (PR_SET_PDEATHSIG fires when the forking thread exits); two owned
// threads write the output. PrepareProcessForSupervision() must have run in
// main() before any thread (signals arrive only through the signalfd;
// Create() checks). At most one Supervisor per process, and nothing else in
// it may start or wait for children (spawn helpers through it): Wait() reaps
// with waitpid(-1), and a child it did not start is an orphan to kill.
#ifndef TRAINLET_LAUNCHER_SUPERVISOR_H_
#define TRAINLET_LAUNCHER_SUPERVISOR_H_

#include <sys/types.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "launcher/children.h"
#include "launcher/line_tail.h"
#include "launcher/output_prefixer.h"
#include "launcher/output_writer.h"
#include "launcher/restart_backoff.h"
#include "launcher/standby_pool.h"
#include "launcher/worker.h"
#include "launcher/worker_group.h"

namespace trainlet {
namespace launcher {

class Supervisor : public WorkerGroup {
 public:
  using EventType = WorkerGroup::EventType;
  using Event = WorkerGroup::Event;

  static constexpr absl::Duration kDefaultGroupDrainTimeout = absl::Seconds(2);

  struct Options {
    // Where prefixed and unprefixed output goes. Not owned; must stay open
    // for the Supervisor's lifetime. Injectable for tests.
    int stdout_fd = STDOUT_FILENO;
    int stderr_fd = STDERR_FILENO;
    // Prefixed output queued per output fd before whole lines are dropped.
    size_t output_buffer_bytes = OutputWriter::kDefaultCapacity;
    // How long the destructor waits for queued output to be written.
    absl::Duration output_flush_timeout = OutputWriter::kDefaultCloseTimeout;
    // Bound on waiting for SIGKILLed processes to disappear (a process in
    // uninterruptible sleep, e.g. in a GPU driver, may take a while).
    absl::Duration kill_timeout = absl::Seconds(10);
    // How long the rest of a worker's process group is left alone after
    // its leader exited, to finish writing, when a member reads a pipe (a
    // `tee`, a logger): signals for the group meanwhile, SIGKILL included,
    // are held until then. Groups whose members read no pipe (DataLoader
    // workers) are signalled at once.
    absl::Duration group_drain_timeout = kDefaultGroupDrainTimeout;
    // Helper restarts.
    RestartBackoff::Options helper_backoff;
    // Called with each piece of a prefixed worker's output as read (stream 0
    // stdout, 1 stderr), after it was queued for writing, on the thread that
    // calls Wait() (--progress-from-output reads progress from it). Must not
    // block. True: Wait() returns kWakeup, so that the caller looks at once.
    std::function<bool(int local_rank, int stream, absl::string_view bytes)> on_worker_output;
  };

  // Creates the signalfd (SIGCHLD + ForwardedSignals()) and the eventfd for
  // Wake(), and takes the children this process has now as the
  // entrypoint's (see above). FailedPrecondition if those signals are not
  // blocked in the calling thread (PrepareProcessForSupervision() was not
  // called).
  static absl::StatusOr<std::unique_ptr<Supervisor>> Create(const Options& options);

  // Waits until the groups whose leader exited are empty or their drain
  // time is over, then SIGKILLs every worker process group (also groups
  // whose leader already exited) and helper, then every remaining child of
  // this process that is not the entrypoint's (adopted orphans, and in turn
  // their orphaned children) until none is left or kill_timeout passes
  // (logging what is stuck); reaps them; gives the terminal back; flushes
  // output (bounded) and closes the fds.
  ~Supervisor() override;

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // WorkerGroup. Start(): see worker_spawner.h for what each child gets;
  // call it from the thread that outlives the workers (see above). A
  // pending kWorkersGone of the previous Start() is dropped.
  absl::Status Start(const std::vector<ProcessSpec>& workers) override;
  // InvalidArgument unless spec.role is kHelper with a name no other helper
  // has; the spawn errors of Start() otherwise. A failed restart later is
  // reported as kHelperExited with pid -1 and ExitCodeForSpawnError's code.
  absl::Status StartHelper(const ProcessSpec& helper) override;
  // Events in the order worker_group.h gives. Queued output of a process
  // that exited is written (best effort, waiting at most 50 ms) before its
  // exit is returned.
  Event Wait(absl::Duration timeout) override;
  // Thread-safe and async-signal-safe.
  void Wake() override;
  // A group whose leader exited less than group_drain_timeout ago and that
  // had a member reading a pipe then gets `sig` only when that time is
  // over, if it still has members then.
  void SignalWorkers(int sig) override;
  int running_workers() const override;
  void WatchFd(int fd, int slot = 0) override;
  absl::Status StartStandby(const ProcessSpec& spec, const std::string& boot) override;
  void DropStandbys(const std::string& why) override;
  int ready_standbys() const override { return standbys_.ready(); }
  pid_t standby_pid(int local_rank) const override { return standbys_.pid(local_rank); }
  pid_t worker_pid(int local_rank) const override;
  // Workers whose output is relayed: the last LineTail::kMaxLines lines.
  std::vector<std::string> OutputTail(int local_rank) const override;

  // --- Queries for tests and diagnostics. ---

  // The pid of the helper named `name` while it runs, or -1.
  pid_t helper_pid(const std::string& name) const;
  // Adopted children `spare` accepts are not killed at round ends (only at
  // exit): the MPI launcher's ssh multiplexing masters, which its readiness
  // check leaves for COMMAND's sessions (mpi/ssh_master.h). Set before the
  // loop runs; called on the loop's thread.
  void SpareAdopted(std::function<bool(const ChildProcess&)> spare) {
    spare_adopted_ = std::move(spare);
  }
  // The entrypoint's children (see the top) that are not reaped yet.
  std::set<pid_t> inherited_children() const;

 private:
  struct Stream {
    int fd = -1;  // read end of the process's pipe; -1 when not prefixed or at EOF
    OutputWriter* writer = nullptr;  // where the prefixer's lines go
    size_t prefix_size = 0;
    std::unique_ptr<OutputPrefixer> prefixer;
    // Workers: their last lines (shared by stdout and stderr), and which
    // of the tail's streams this is.
    std::shared_ptr<LineTail> tail;
    int tail_stream = 0;
    int local_rank = -1;  // a worker's, for on_worker_output; -1 once retired
  };
  struct Process {
    ProcessSpec spec;
    pid_t pid = -1;
    bool reaped = false;        // the leader has been waited for
    bool group_gone = false;    // kill(-pid, 0) said ESRCH after the leader was reaped
    bool has_terminal = false;  // foreground_tty: it got the terminal
    bool warm = false;          // it was a warm standby (from_standby)
    absl::Time started;         // monotonic
    // Workers: until when the rest of the group may drain after the leader
    // was reaped (monotonic; InfinitePast when no member read a pipe), and
    // the signals SignalWorkers() held for it.
    absl::Time drain_until = absl::InfinitePast();
    uint64_t reaped_ticks = 0;   // BootTimeTicks() when the leader was reaped
    bool drain_decided = false;  // DecideDrains() looked at the group
    std::vector<int> held_signals;
    Stream out;
    Stream err;
  };
  struct Helper {
    explicit Helper(const RestartBackoff::Options& options) : backoff(options) {}
    Process process;  // pid -1 (or reaped) while waiting for a restart
    RestartBackoff backoff;
    absl::Time restart_at = absl::InfiniteFuture();  // monotonic
  };
  // Where kWorkersGone stands for the latest Start() (see the diagram).
  enum class GonePhase { kIdle, kWaitingForGroups, kKillingOrphans, kReady };

  Supervisor(const Options& options, int signal_fd, int wake_fd, std::shared_ptr<int> room_fd,
             std::map<pid_t, pid_t> inherited);

  // Spawns `spec` into `process` (pipes, prefixers, terminal), or fails.
  absl::Status Spawn(const ProcessSpec& spec, Process* process);
  void ReapChildren();
  void OnWorkerReaped(Process* worker, int status);
  void OnHelperReaped(Helper* helper, int status);
  void RestartDueHelpers();
  void AdvanceGonePhase();
  // One poll() over the signalfd, the eventfd and the output pipes.
  void PollOnce(absl::Duration timeout);
  // The longest PollOnce() may sleep before the state needs another look.
  absl::Duration PollSlice(absl::Duration remaining) const;
  void ReadSignals();
  // Reads what is available; once if !until_drained. Closes the stream on
  // EOF. Unless `force`, reads no more than ReadBudget() (its reader is
  // slow: the process waits instead of its lines being dropped).
  void ReadStream(Stream* stream, bool until_drained, bool force = false);
  // How many bytes of `stream` may be read now without its writer dropping
  // lines made of them; 0 to leave them in the pipe for now.
  size_t ReadBudget(Stream* stream);
  void CloseStream(Stream* stream);
  // Moves the process's open streams to retired_streams_, read on until EOF
  // (a process gone, or to be restarted, may have left lines in its pipes,
  // and its group members may still write).
  void RetireStreams(Process* process);
  bool AnyGroupAlive();
  // Whether the worker's process group may still have members (sets
  // group_gone once kill(-pgid, 0) says it is empty).
  bool GroupAlive(Process* worker);
  // kill(-pgid, sig) for every worker group that may have members; with
  // `hold`, groups still draining (drain_until) get it when that is over.
  void SignalGroups(int sig, bool hold);
  // Delivers the held signals whose group's drain time is over.
  void DeliverHeldSignals();
  // Polls (reading output, reaping) until every group whose leader exited
  // is empty or past its drain time.
  void AwaitDrainingGroups();
  // Orphans are killed at round ends only while no helper that may leave
  // some runs: a helper's orphans cannot be told from the workers'
  // (docs/pid1.md).
  bool KillsOrphansAtRoundEnd() const;
  // Children of this process that it did not start: SIGKILLs the live ones
  // and returns how many there are, zombies not yet reaped included. Logs
  // each the first time; `what` says whose they are.
  int KillAdoptedChildren(const char* what, bool at_exit = false);
  // SIGKILL every worker group (and, if `orphans`, adopted children) and
  // wait (bounded) until all are empty and reaped.
  void KillAllAndReap(bool orphans);
  // Drains and closes the workers' pipes, then forgets the workers.
  void ForgetWorkers();
  void ReturnTerminal(Process* process);
  void FlushOutputBriefly();
  OutputWriter* Writer(int which_fd);
  std::optional<Event> TakeQueuedEvent();
  Process* FindWorker(pid_t pid);
  Helper* FindHelper(pid_t pid);
  bool IsKnownChild(pid_t pid) const;
  // The entrypoint's, not the workers' (see the top): an inherited child,
  // an adopted process that started before the first worker or helper, or
  // one in this process's group, in a group outside our PID namespace, or
  // in the group of an inherited child (a sidecar's orphan). `child` is
  // our unreaped child.
  bool IsEntrypointProcess(const ChildProcess& child) const;
  // An inherited child in `group` was reaped: the processes of that group
  // it orphaned, now our children, are inherited in its place.
  void InheritOrphansOfGroup(pid_t group);
  // The rest of a worker's group gets its drain time only if it may be
  // writing out what the worker wrote; decided once, when first needed
  // (a signal for the group, or the end), for every group not decided yet.
  void DecideDrains();
  // Whether one of the members of `worker`'s group among `children` (the
  // leader's orphans, now ours) reads a pipe other than our own stdin (a
  // `tee`, a `logger`) or started less than 1 s before the leader was
  // reaped (it may not have pointed its stdin at the pipe yet), or none of
  // them is ours to see.
  bool MayHoldOutputHelper(const Process& worker, const std::vector<ChildProcess>& children) const;

  const Options options_;
  const int signal_fd_;
  const int wake_fd_;
  // eventfd the OutputWriters signal when they have room again; shared with
  // their threads, which may outlive this object.
  const std::shared_ptr<int> room_fd_;
  std::vector<Process> workers_;
  std::vector<Stream> retired_streams_;
  std::vector<std::unique_ptr<Helper>> helpers_;
  // Warm standbys of the next round's workers (standby_pool.h); Spawn()
  // takes one for a spec with from_standby.
  StandbyPool standbys_;
  std::deque<ProcessExit> pending_exits_;
  std::deque<ProcessExit> pending_helper_exits_;
  std::deque<int> pending_signals_;
  bool wake_pending_ = false;
  int watched_fd_[kWatchedFdSlots] = {-1, -1};  // WatchFd(); not owned.
  bool watched_fd_ready_[kWatchedFdSlots] = {false, false};
  GonePhase gone_phase_ = GonePhase::kIdle;
  absl::Time orphan_deadline_ = absl::InfiniteFuture();
  std::set<pid_t> orphans_seen_;  // logged already
  std::function<bool(const ChildProcess&)> spare_adopted_;
  // The entrypoint's children (at Create(), and the orphans they leave in
  // their groups), until reaped: pid -> its process group when recorded.
  std::map<pid_t, pid_t> inherited_;
  // When the first worker or helper was spawned (BootTimeTicks()); until
  // then no process can be theirs.
  static constexpr uint64_t kNoWorkerYet = UINT64_MAX;
  uint64_t workers_since_ticks_ = kNoWorkerYet;
  const pid_t own_group_;  // this process's process group
  // Our stdin when it is a pipe: the workers and their children inherit it.
  const std::optional<PipeId> own_stdin_pipe_;
  bool tearing_down_ = false;  // the destructor runs: helpers are not restarted.
  bool warned_no_proc_ = false;
  bool flush_before_exit_ = false;
  std::unique_ptr<OutputWriter> stdout_writer_;
  std::unique_ptr<OutputWriter> stderr_writer_;
  std::vector<char> read_buffer_;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_SUPERVISOR_H_

#include "launcher/supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "launcher/children.h"
#include "launcher/command_resolver.h"
#include "launcher/signals.h"
#include "launcher/worker_spawner.h"

namespace trainlet {
namespace launcher {
namespace {

// Poll slice while waiting for processes that are not our children (group
// members) or that we just SIGKILLed: nothing else tells us when they die.
constexpr absl::Duration kGroupPollInterval = absl::Milliseconds(20);
// At most this long, per Wait(), for queued output of an exited process to
// be written before its exit is returned (the log reads in order then).
constexpr absl::Duration kExitFlushWait = absl::Milliseconds(50);
// Poll slice while a stream is paused for a slow reader: its writer may
// declare the reader stalled (OutputWriter::Options::stall_timeout).
constexpr absl::Duration kPausedPollInterval = absl::Milliseconds(100);
// At exit, the writers get at least this long for what is queued.
constexpr absl::Duration kMinWriterCloseTime = absl::Milliseconds(100);
// Reads of one pipe (of up to kMaxLineBytes each) when draining it.
constexpr int kMaxDrainReads = 64;
// Processes named in one log line, at most.
constexpr size_t kMaxListedProcesses = 10;
// A process of a worker's group that started less than this before the
// leader exited may still be setting its stdin up (a `tee` of `exec >
// >(tee f)` that has not run yet): it may be an output helper.
constexpr absl::Duration kHelperSetupTime = absl::Seconds(1);

// Deadlines use the monotonic clock: a wall-clock step must not stretch or
// cut a grace period.
absl::Time MonotonicNow() { return Clock::Monotonic()->Now(); }

int PollMillis(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  int64_t micros = absl::ToInt64Microseconds(timeout);
  return static_cast<int>(std::min<int64_t>((micros + 999) / 1000, INT_MAX));
}

std::string DescribeExit(int status, int exit_code) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        "), exit code ", exit_code);
  }
  return absl::StrCat("exited with code ", exit_code);
}

bool ShouldRestart(RestartPolicy policy, int exit_code) {
  switch (policy) {
    case RestartPolicy::kNever:
      return false;
    case RestartPolicy::kOnFailure:
      return exit_code != 0;
    case RestartPolicy::kAlways:
      return true;
  }
  return false;
}

// Whether nothing is left to read in the pipe `fd` (an error counts as
// empty: the caller only decides whether to hand on a partial line).
bool PipeEmpty(int fd) {
  int available = 0;
  return ioctl(fd, FIONREAD, &available) != 0 || available <= 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Supervisor>> Supervisor::Create(const Options& options) {
  absl::StatusOr<int> opened = OpenSupervisedSignalFd();
  if (!opened.ok()) return opened.status();
  const int signal_fd = *opened;
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int room_fd = wake_fd < 0 ? -1 : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0 || room_fd < 0) {
    int error = errno;
    close(signal_fd);
    if (wake_fd >= 0) close(wake_fd);
    return absl::InternalError(absl::StrCat("trainlet: eventfd failed: ", strerror(error)));
  }
  auto shared_room_fd = std::shared_ptr<int>(new int(room_fd), [](int* fd) {
    close(*fd);
    delete fd;
  });
  // Whatever is our child before we start anything is the entrypoint's.
  // (Without /proc nothing is ever killed as an orphan either.)
  std::map<pid_t, pid_t> inherited;
  if (absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
      children.ok() && !children->empty()) {
    std::vector<std::string> names;
    for (const ChildProcess& child : *children) {
      inherited[child.pid] = getpgid(child.pid);
      if (names.size() < kMaxListedProcesses) {
        names.push_back(absl::StrCat(child.pid, " (", child.comm, ")"));
      }
    }
    TLOG(kInfo) << "started with " << children->size()
                << " child process(es) of the entrypoint, left running (never signalled, "
                   "reaped when they exit): "
                << absl::StrJoin(names, ", ") << (children->size() > names.size() ? ", ..." : "");
  }
  return std::unique_ptr<Supervisor>(
      new Supervisor(options, signal_fd, wake_fd, std::move(shared_room_fd), std::move(inherited)));
}

Supervisor::Supervisor(const Options& options, int signal_fd, int wake_fd,
                       std::shared_ptr<int> room_fd, std::map<pid_t, pid_t> inherited)
    : options_(options),
      signal_fd_(signal_fd),
      wake_fd_(wake_fd),
      room_fd_(std::move(room_fd)),
      inherited_(std::move(inherited)),
      own_group_(getpgrp()),
      own_stdin_pipe_(PipeOfFd(STDIN_FILENO)),
      read_buffer_(OutputPrefixer::kMaxLineBytes) {}

Supervisor::~Supervisor() {
  const absl::Time kill_deadline = MonotonicNow() + options_.kill_timeout;
  // The workers first (as before: their groups, and their orphans), then the
  // helpers, then whatever else is still our child.
  ForgetWorkers();
  standbys_.Drop("");
  tearing_down_ = true;  // helpers now end for good: no restart, no warning.
  for (auto& helper : helpers_) {
    Process& p = helper->process;
    if (p.pid > 0 && !p.reaped) kill(-p.pid, SIGKILL);
  }
  for (;;) {
    ReapChildren();
    int alive = KillAdoptedChildren("left behind at exit", /*at_exit=*/true);
    alive += static_cast<int>(standbys_.pids().size());  // killed, not reaped yet
    for (auto& helper : helpers_) {
      Process& p = helper->process;
      if (p.pid > 0 && !p.reaped) {
        kill(-p.pid, SIGKILL);
        ++alive;
      }
    }
    if (alive == 0) break;
    if (MonotonicNow() >= kill_deadline) {
      TLOG(kError) << alive << " child process(es) still alive "
                   << absl::FormatDuration(options_.kill_timeout)
                   << " after SIGKILL (uninterruptible sleep?); exiting without them";
      break;
    }
    PollOnce(kGroupPollInterval);
  }
  for (auto& helper : helpers_) {
    ReturnTerminal(&helper->process);
    RetireStreams(&helper->process);
  }
  // What is still in the pipes goes out, at the pace of the reader, within
  // the flush timeout; then whatever is left is dropped (and counted).
  const absl::Time flush_deadline = MonotonicNow() + options_.output_flush_timeout;
  while (!retired_streams_.empty() && MonotonicNow() < flush_deadline) {
    PollOnce(std::min(flush_deadline - MonotonicNow(), kPausedPollInterval));
  }
  for (Stream& stream : retired_streams_) {
    ReadStream(&stream, /*until_drained=*/true, /*force=*/true);
    CloseStream(&stream);
  }
  retired_streams_.clear();
  const absl::Duration writer_time = std::max(flush_deadline - MonotonicNow(), kMinWriterCloseTime);
  for (OutputWriter* writer : {stdout_writer_.get(), stderr_writer_.get()}) {
    if (writer != nullptr) writer->BeginClose(writer_time);
  }
  for (OutputWriter* writer : {stdout_writer_.get(), stderr_writer_.get()}) {
    if (writer != nullptr) writer->FinishClose();
  }
  close(signal_fd_);
  close(wake_fd_);
}

OutputWriter* Supervisor::Writer(int which_fd) {
  std::unique_ptr<OutputWriter>* writer =
      which_fd == STDOUT_FILENO ? &stdout_writer_ : &stderr_writer_;
  if (*writer == nullptr) {
    OutputWriter::Options options;
    options.capacity = options_.output_buffer_bytes;
    options.stream_name = which_fd == STDOUT_FILENO ? "stdout" : "stderr";
    options.on_room = [room_fd = room_fd_] {
      uint64_t one = 1;
      ssize_t ignored = write(*room_fd, &one, sizeof(one));
      (void)ignored;
    };
    *writer = std::make_unique<OutputWriter>(
        which_fd == STDOUT_FILENO ? options_.stdout_fd : options_.stderr_fd, options);
  }
  return writer->get();
}

absl::Status Supervisor::Spawn(const ProcessSpec& spec, Process* process) {
  // Whatever started before this is no descendant of a worker or helper.
  if (workers_since_ticks_ == kNoWorkerYet) workers_since_ticks_ = BootTimeTicks();
  absl::StatusOr<SpawnedWorker> spawned = absl::FailedPreconditionError("cold");
  if (spec.from_standby && spec.role == ProcessRole::kWorker) {
    spawned = standbys_.Take(spec, options_.stdout_fd, options_.stderr_fd);
    if (!spawned.ok()) {
      TLOG(kInfo) << "warm workers: local rank " << spec.local_rank
                  << " starts cold: " << spawned.status().message();
    }
  }
  const bool cold_fallback = !spawned.ok();
  if (cold_fallback) spawned = SpawnWorker(spec, options_.stdout_fd, options_.stderr_fd);
  if (!spawned.ok()) return spawned.status();
  process->spec = spec;
  process->pid = spawned->pid;
  process->reaped = false;
  process->group_gone = false;
  process->started = MonotonicNow();
  process->has_terminal = false;
  process->warm = spec.from_standby && spawned.ok() && !cold_fallback;
  if (Relayed(spec.output)) {
    // kRelay: no prefix, and the prefixer passes the bytes unchanged.
    const std::string prefix = spec.output != OutputMode::kPrefix ? std::string()
                               : spec.role == ProcessRole::kWorker
                                   ? absl::StrCat("[rank ", spec.global_rank, "] ")
                                   : absl::StrCat("[", spec.name, "] ");
    process->out.prefix_size = process->err.prefix_size = prefix.size();
    process->out.fd = spawned->stdout_pipe;
    process->out.writer = Writer(STDOUT_FILENO);
    process->out.prefixer = std::make_unique<OutputPrefixer>(prefix, process->out.writer);
    process->err.fd = spawned->stderr_pipe;
    process->err.writer = Writer(STDERR_FILENO);
    process->err.prefixer = std::make_unique<OutputPrefixer>(prefix, process->err.writer);
    if (spec.role == ProcessRole::kWorker) {
      process->out.tail = process->err.tail = std::make_shared<LineTail>();
      process->out.tail_stream = 0;
      process->err.tail_stream = 1;
      process->out.local_rank = process->err.local_rank = spec.local_rank;
    }
  }
  if (spec.foreground_tty) {
    process->has_terminal = tcgetpgrp(STDIN_FILENO) == spawned->pid;
    if (!process->has_terminal) {
      TLOG(kWarning) << "could not give the terminal on stdin to pid " << spawned->pid
                     << "; it cannot read from it";
    }
  }
  return absl::OkStatus();
}

absl::Status Supervisor::Start(const std::vector<ProcessSpec>& workers) {
  if (int running = running_workers(); running > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainlet: Start() while ", running, " workers are still running; stop them first"));
  }
  ForgetWorkers();
  gone_phase_ = GonePhase::kIdle;
  for (const ProcessSpec& spec : workers) {
    Process worker;
    absl::Status spawned = Spawn(spec, &worker);
    if (!spawned.ok()) {
      // Kill and reap the ones already started; their exits are not events.
      std::vector<pid_t> started;
      for (const Process& w : workers_) started.push_back(w.pid);
      ForgetWorkers();
      pending_exits_.erase(std::remove_if(pending_exits_.begin(), pending_exits_.end(),
                                          [&](const ProcessExit& e) {
                                            return std::find(started.begin(), started.end(),
                                                             e.pid) != started.end();
                                          }),
                           pending_exits_.end());
      TLOG(kError) << spawned.message() << " (local rank " << spec.local_rank << ")";
      if (!started.empty()) {
        TLOG(kError) << "killed the " << started.size() << " workers already started";
      }
      return spawned;
    }
    TLOG(kInfo) << "started worker local_rank=" << spec.local_rank
                << " global_rank=" << spec.global_rank << " pid=" << worker.pid << ": "
                << spec.argv[0] << (worker.warm ? " (warm: its standby)" : "");
    workers_.push_back(std::move(worker));
  }
  gone_phase_ = GonePhase::kWaitingForGroups;
  return absl::OkStatus();
}

absl::Status Supervisor::StartHelper(const ProcessSpec& spec) {
  if (spec.role != ProcessRole::kHelper || spec.name.empty()) {
    return absl::InvalidArgumentError(
        "trainlet: StartHelper() needs a spec with role kHelper and a name");
  }
  for (const auto& helper : helpers_) {
    if (helper->process.spec.name == spec.name) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainlet: a helper named '", spec.name, "' exists already"));
    }
  }
  auto helper = std::make_unique<Helper>(options_.helper_backoff);
  absl::Status spawned = Spawn(spec, &helper->process);
  if (!spawned.ok()) {
    TLOG(kError) << spawned.message() << " (helper " << spec.name << ")";
    return spawned;
  }
  TLOG(kInfo) << "started helper " << spec.name << " pid=" << helper->process.pid << ": "
              << spec.argv[0];
  helpers_.push_back(std::move(helper));
  return absl::OkStatus();
}

Supervisor::Event Supervisor::Wait(absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : MonotonicNow() + std::max(timeout, absl::ZeroDuration());
  bool polled = false;
  for (;;) {
    ReapChildren();
    RestartDueHelpers();
    DeliverHeldSignals();
    AdvanceGonePhase();
    if (std::optional<Event> event = TakeQueuedEvent()) return *event;
    absl::Duration remaining = deadline - MonotonicNow();
    if (polled && remaining <= absl::ZeroDuration()) return Event{};
    PollOnce(PollSlice(remaining));
    polled = true;
  }
}

absl::Duration Supervisor::PollSlice(absl::Duration remaining) const {
  absl::Duration slice = std::max(remaining, absl::ZeroDuration());
  if (gone_phase_ == GonePhase::kKillingOrphans ||
      (gone_phase_ == GonePhase::kWaitingForGroups && running_workers() == 0)) {
    slice = std::min(slice, kGroupPollInterval);
  }
  for (const auto& helper : helpers_) {
    if (helper->restart_at != absl::InfiniteFuture()) {
      slice = std::min(slice, std::max(helper->restart_at - MonotonicNow(), absl::ZeroDuration()));
    }
  }
  for (const Process& w : workers_) {
    if (!w.held_signals.empty()) {
      slice = std::min(slice, std::max(w.drain_until - MonotonicNow(), absl::ZeroDuration()));
    }
  }
  return slice;
}

void Supervisor::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));  // EAGAIN: a wakeup is already pending
  (void)ignored;
}

void Supervisor::SignalWorkers(int sig) { SignalGroups(sig, /*hold=*/true); }

void Supervisor::SignalGroups(int sig, bool hold) {
  if (hold) DecideDrains();
  const absl::Time now = MonotonicNow();
  for (Process& w : workers_) {
    if (w.group_gone) continue;
    if (hold && w.reaped && now < w.drain_until) {
      // The leader just exited; what is left of its group (a `tee`) may be
      // writing out what it wrote. Nothing to hold for an empty group.
      if (GroupAlive(&w) &&
          std::find(w.held_signals.begin(), w.held_signals.end(), sig) == w.held_signals.end()) {
        w.held_signals.push_back(sig);
      }
      continue;
    }
    // While the leader is unreaped its pid (= pgid) cannot be reused. After
    // that the group id stays reserved as long as the group has members;
    // ESRCH means it is empty and we stop using the number.
    if (kill(-w.pid, sig) != 0 && errno == ESRCH && w.reaped) w.group_gone = true;
  }
}

void Supervisor::DeliverHeldSignals() {
  const absl::Time now = MonotonicNow();
  for (Process& w : workers_) {
    if (w.held_signals.empty() || now < w.drain_until) continue;
    const std::vector<int> held = std::move(w.held_signals);
    w.held_signals.clear();
    if (!GroupAlive(&w)) continue;
    std::vector<std::string> names;
    for (int sig : held) names.push_back(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    TLOG(kInfo) << "worker local_rank=" << w.spec.local_rank
                << " global_rank=" << w.spec.global_rank << " exited "
                << absl::FormatDuration(options_.group_drain_timeout)
                << " ago and its process group " << w.pid << " still has processes: sending SIG"
                << absl::StrJoin(names, ", SIG");
    for (int sig : held) {
      if (kill(-w.pid, sig) != 0 && errno == ESRCH) w.group_gone = true;
    }
  }
}

void Supervisor::AwaitDrainingGroups() {
  DecideDrains();
  for (;;) {
    ReapChildren();
    const absl::Time now = MonotonicNow();
    absl::Time until = now;
    for (Process& w : workers_) {
      if (w.reaped && now < w.drain_until && GroupAlive(&w)) {
        until = std::max(until, w.drain_until);
      }
    }
    if (until <= now) return;
    PollOnce(std::min(until - now, kGroupPollInterval));
  }
}

int Supervisor::running_workers() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Process& w) { return !w.reaped; }));
}

pid_t Supervisor::worker_pid(int local_rank) const {
  for (const Process& w : workers_) {
    if (w.spec.local_rank == local_rank) return w.reaped ? -1 : w.pid;
  }
  return -1;
}

std::vector<std::string> Supervisor::OutputTail(int local_rank) const {
  for (const Process& w : workers_) {
    if (w.spec.local_rank == local_rank && w.out.tail != nullptr) return w.out.tail->Lines();
  }
  return {};
}

absl::Status Supervisor::StartStandby(const ProcessSpec& spec, const std::string& boot) {
  if (spec.role != ProcessRole::kWorker) {
    return absl::InvalidArgumentError("trainlet: a standby is a worker's");
  }
  if (workers_since_ticks_ == kNoWorkerYet) workers_since_ticks_ = BootTimeTicks();
  return standbys_.Start(spec, boot);
}

void Supervisor::DropStandbys(const std::string& why) { standbys_.Drop(why); }

void Supervisor::WatchFd(int fd, int slot) {
  if (slot < 0 || slot >= kWatchedFdSlots) return;
  watched_fd_[slot] = fd;
  watched_fd_ready_[slot] = false;
}

pid_t Supervisor::helper_pid(const std::string& name) const {
  for (const auto& helper : helpers_) {
    const Process& p = helper->process;
    if (p.spec.name == name) return p.pid > 0 && !p.reaped ? p.pid : -1;
  }
  return -1;
}

void Supervisor::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;  // 0: children left but none dead; ECHILD: none at all
    orphans_seen_.erase(pid);
    if (standbys_.OnReaped(pid, status)) continue;
    if (Process* w = FindWorker(pid)) {
      OnWorkerReaped(w, status);
    } else if (Helper* h = FindHelper(pid)) {
      OnHelperReaped(h, status);
    } else if (auto it = inherited_.find(pid); it != inherited_.end()) {
      // Its number may be reused from now on: no longer the entrypoint's.
      const pid_t group = it->second;
      inherited_.erase(it);
      TLOG(kDebug) << "reaped process " << pid << " of the entrypoint (status " << status << ")";
      InheritOrphansOfGroup(group);
    } else {
      TLOG(kDebug) << "reaped orphaned process " << pid << " (status " << status << ")";
    }
  }
}

void Supervisor::OnWorkerReaped(Process* w, int status) {
  w->reaped = true;
  // Whether the rest of the group gets it is decided when it is first
  // signalled (DecideDrains()).
  w->drain_until = MonotonicNow() + options_.group_drain_timeout;
  w->reaped_ticks = BootTimeTicks();
  w->drain_decided = false;
  ReturnTerminal(w);
  // Whatever it wrote before dying goes out before its exit is reported.
  ReadStream(&w->out, /*until_drained=*/true);
  ReadStream(&w->err, /*until_drained=*/true);
  if (Relayed(w->spec.output)) flush_before_exit_ = true;
  ProcessExit exit;
  exit.role = ProcessRole::kWorker;
  exit.name = w->spec.name;
  exit.local_rank = w->spec.local_rank;
  exit.global_rank = w->spec.global_rank;
  exit.pid = w->pid;
  exit.exit_code = ExitCodeFromWaitStatus(status);
  // The agent's round logs each worker's exit once, with what it means.
  TLOG(kDebug) << "worker local_rank=" << w->spec.local_rank
               << " global_rank=" << w->spec.global_rank << " pid=" << w->pid << " "
               << DescribeExit(status, exit.exit_code);
  pending_exits_.push_back(exit);
}

void Supervisor::OnHelperReaped(Helper* h, int status) {
  Process& p = h->process;
  p.reaped = true;
  ReturnTerminal(&p);
  ReadStream(&p.out, /*until_drained=*/true);
  ReadStream(&p.err, /*until_drained=*/true);
  if (Relayed(p.spec.output)) flush_before_exit_ = true;
  ProcessExit exit;
  exit.role = ProcessRole::kHelper;
  exit.name = p.spec.name;
  exit.pid = p.pid;
  exit.exit_code = ExitCodeFromWaitStatus(status);
  exit.will_restart = !tearing_down_ && ShouldRestart(p.spec.restart, exit.exit_code);
  if (tearing_down_) {
    TLOG(kDebug) << "helper " << p.spec.name << " pid=" << p.pid << " stopped";
    return;
  }
  std::string next = "; not restarting";
  if (exit.will_restart) {
    const absl::Duration delay = h->backoff.NextDelay(MonotonicNow() - p.started);
    h->restart_at = MonotonicNow() + delay;
    next = absl::StrCat("; restarting it in ", absl::FormatDuration(delay));
  }
  const std::string line = absl::StrCat("helper ", p.spec.name, " pid=", p.pid, " ",
                                        DescribeExit(status, exit.exit_code), next);
  if (exit.exit_code == 0) {
    TLOG(kInfo) << line;
  } else {
    TLOG(kWarning) << line;
  }
  pending_helper_exits_.push_back(exit);
}

void Supervisor::RestartDueHelpers() {
  const absl::Time now = MonotonicNow();
  for (auto& helper : helpers_) {
    if (helper->restart_at > now) continue;
    helper->restart_at = absl::InfiniteFuture();
    Process& p = helper->process;
    RetireStreams(&p);
    const ProcessSpec spec = p.spec;
    absl::Status spawned = Spawn(spec, &p);
    if (spawned.ok()) {
      TLOG(kInfo) << "restarted helper " << spec.name << " pid=" << p.pid;
      continue;
    }
    // Reported like an exit, and retried with the backoff.
    ProcessExit exit;
    exit.role = ProcessRole::kHelper;
    exit.name = spec.name;
    exit.pid = -1;
    exit.exit_code = ExitCodeForSpawnError(spawned);
    exit.will_restart = spec.restart != RestartPolicy::kNever;
    p.pid = -1;
    p.reaped = true;
    std::string next = "";
    if (exit.will_restart) {
      const absl::Duration delay = helper->backoff.NextDelay(absl::ZeroDuration());
      helper->restart_at = now + delay;
      next = absl::StrCat("; trying again in ", absl::FormatDuration(delay));
    }
    TLOG(kError) << "cannot restart helper " << spec.name << ": " << spawned.message() << next;
    pending_helper_exits_.push_back(exit);
  }
}

bool Supervisor::KillsOrphansAtRoundEnd() const {
  return std::none_of(helpers_.begin(), helpers_.end(), [](const std::unique_ptr<Helper>& h) {
    return h->process.spec.leaves_orphans;
  });
}

void Supervisor::AdvanceGonePhase() {
  if (gone_phase_ == GonePhase::kWaitingForGroups) {
    if (running_workers() > 0 || AnyGroupAlive()) return;
    if (!KillsOrphansAtRoundEnd()) {
      gone_phase_ = GonePhase::kReady;
      return;
    }
    gone_phase_ = GonePhase::kKillingOrphans;
    orphan_deadline_ = MonotonicNow() + options_.kill_timeout;
  }
  if (gone_phase_ == GonePhase::kKillingOrphans) {
    const int alive = KillAdoptedChildren("left behind by the workers");
    if (alive == 0) {
      gone_phase_ = GonePhase::kReady;
    } else if (MonotonicNow() >= orphan_deadline_) {
      TLOG(kError) << alive << " process(es) left behind by the workers still alive "
                   << absl::FormatDuration(options_.kill_timeout)
                   << " after SIGKILL (uninterruptible sleep?); going on without them";
      gone_phase_ = GonePhase::kReady;
    }
  }
}

void Supervisor::PollOnce(absl::Duration timeout) {
  std::vector<struct pollfd> fds;
  std::vector<Stream*> streams;
  fds.push_back({signal_fd_, POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  fds.push_back({*room_fd_, POLLIN, 0});
  // The watched fds: each polled only while its last readiness was collected.
  constexpr size_t kWatchedFrom = 3;
  for (int i = 0; i < kWatchedFdSlots; ++i) {
    fds.push_back({watched_fd_[i] >= 0 && !watched_fd_ready_[i] ? watched_fd_[i] : -1, POLLIN, 0});
  }
  constexpr size_t kStreamsFrom = kWatchedFrom + kWatchedFdSlots;
  bool paused = false;
  auto add_stream = [&](Stream* s) {
    if (s->fd < 0) return;
    if (ReadBudget(s) == 0) {
      paused = true;  // its reader is slow: leave the lines in the pipe
      return;
    }
    fds.push_back({s->fd, POLLIN, 0});
    streams.push_back(s);
  };
  auto add = [&](Process& p) {
    add_stream(&p.out);
    add_stream(&p.err);
  };
  for (Process& w : workers_) add(w);
  for (auto& helper : helpers_) add(helper->process);
  for (Stream& stream : retired_streams_) add_stream(&stream);
  const size_t standbys_from = fds.size();
  const std::vector<int> standby_fds = standbys_.PollFds();
  for (int fd : standby_fds) fds.push_back({fd, POLLIN, 0});
  if (paused) timeout = std::min(timeout, kPausedPollInterval);
  int ready = poll(fds.data(), fds.size(), PollMillis(timeout));
  if (ready <= 0) return;  // timeout, or EINTR (nothing is unblocked, but be safe)
  if (fds[0].revents != 0) ReadSignals();
  if (fds[1].revents != 0) {
    uint64_t count;
    if (read(wake_fd_, &count, sizeof(count)) == sizeof(count)) wake_pending_ = true;
  }
  if (fds[2].revents != 0) {
    uint64_t count;  // only wakes us up: the next PollOnce() reads again
    ssize_t ignored = read(*room_fd_, &count, sizeof(count));
    (void)ignored;
  }
  for (int i = 0; i < kWatchedFdSlots; ++i) {
    const pollfd& p = fds[kWatchedFrom + static_cast<size_t>(i)];
    if (p.fd >= 0 && p.revents != 0) watched_fd_ready_[i] = true;
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    if (fds[i + kStreamsFrom].revents != 0) ReadStream(streams[i], /*until_drained=*/false);
  }
  for (size_t i = 0; i < standby_fds.size(); ++i) {
    if (fds[standbys_from + i].revents != 0) standbys_.OnReadable(standby_fds[i]);
  }
  retired_streams_.erase(std::remove_if(retired_streams_.begin(), retired_streams_.end(),
                                        [](const Stream& s) { return s.fd < 0; }),
                         retired_streams_.end());
}

void Supervisor::ReadSignals() {
  struct signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // ReapChildren() runs on every Wait() iteration
    TLOG(kDebug) << "received signal " << sig << " (" << strsignal(sig) << ") from pid "
                 << info.ssi_pid;
    pending_signals_.push_back(sig);
  }
}

void Supervisor::ReadStream(Stream* stream, bool until_drained, bool force) {
  // Bounded even when draining: a grandchild holding the pipe could write
  // forever and must not starve signals and exits.
  for (int reads = 0; stream->fd >= 0 && reads < (until_drained ? kMaxDrainReads : 1);) {
    const size_t budget = force ? read_buffer_.size() : ReadBudget(stream);
    if (budget == 0) return;
    ssize_t n = read(stream->fd, read_buffer_.data(), budget);
    if (n > 0) {
      const absl::string_view bytes(read_buffer_.data(), static_cast<size_t>(n));
      stream->prefixer->Append(bytes);
      if (stream->tail != nullptr) stream->tail->Append(stream->tail_stream, bytes);
      // A copy, after the writer has the bytes: the output is not delayed.
      if (stream->local_rank >= 0 && options_.on_worker_output &&
          options_.on_worker_output(stream->local_rank, stream->tail_stream, bytes)) {
        Wake();
      }
      // The pipe is empty now: what the worker wrote so far goes out, its
      // partial line included (unchanged relay only: prefix_size 0).
      if (stream->prefix_size == 0 && (static_cast<size_t>(n) < budget || PipeEmpty(stream->fd))) {
        stream->prefixer->Flush();
      }
      ++reads;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CloseStream(stream);  // EOF (or a broken pipe): every writer is gone
  }
}

size_t Supervisor::ReadBudget(Stream* stream) {
  const size_t room = stream->writer->Room();
  if (room == OutputWriter::kUnlimited) return read_buffer_.size();
  // A held partial line may complete, and each byte read may become a line
  // of its own ("\n": prefix + 1 bytes).
  const size_t held = stream->prefixer->buffered_bytes() + stream->prefix_size + 1;
  if (room <= held) return 0;
  return std::min((room - held) / (stream->prefix_size + 1), read_buffer_.size());
}

void Supervisor::CloseStream(Stream* stream) {
  if (stream->fd < 0) return;
  close(stream->fd);
  stream->fd = -1;
  if (stream->prefixer) stream->prefixer->Finish();
}

void Supervisor::RetireStreams(Process* p) {
  for (Stream* s : {&p->out, &p->err}) {
    if (s->fd < 0) continue;
    s->local_rank = -1;  // what is left is no progress of the next round's worker
    retired_streams_.push_back(std::move(*s));
    s->fd = -1;
    s->prefixer.reset();
  }
}

bool Supervisor::AnyGroupAlive() {
  bool alive = false;
  for (Process& w : workers_) {
    if (GroupAlive(&w)) alive = true;
  }
  return alive;
}

bool Supervisor::GroupAlive(Process* w) {
  if (w->group_gone) return false;
  if (!w->reaped) return true;
  if (kill(-w->pid, 0) != 0 && errno == ESRCH) w->group_gone = true;
  return !w->group_gone;
}

bool Supervisor::IsKnownChild(pid_t pid) const {
  if (standbys_.Owns(pid)) return true;
  for (const Process& w : workers_) {
    if (w.pid == pid && !w.reaped) return true;
  }
  for (const auto& helper : helpers_) {
    if (helper->process.pid == pid && !helper->process.reaped) return true;
  }
  return false;
}

std::set<pid_t> Supervisor::inherited_children() const {
  std::set<pid_t> pids;
  for (const auto& [pid, group] : inherited_) pids.insert(pid);
  return pids;
}

bool Supervisor::IsEntrypointProcess(const ChildProcess& child) const {
  const pid_t pid = child.pid;
  if (inherited_.count(pid) > 0) return true;
  // Started before any worker (a daemon the entrypoint started, whose
  // parent exited only once we ran): no worker's descendant.
  if (child.start_ticks > 0 && child.start_ticks < workers_since_ticks_) return true;
  // A worker's descendants are in its group or in groups of their own
  // (setsid); joining ours or an inherited child's takes a deliberate
  // setpgid(). A group with a member we have not reaped cannot be replaced
  // by another of the same number.
  const pid_t group = getpgid(pid);
  if (group < 0) return false;
  // 0: the group's leader is outside our PID namespace, as our own group is
  // when `unshare --pid --fork` made us PID 1 without a new session. Every
  // worker's group, and any a descendant of it makes, is inside it.
  if (group == 0 || group == own_group_) return true;
  for (const auto& [inherited, unused] : inherited_) {
    if (getpgid(inherited) == group) return true;
  }
  return false;
}

void Supervisor::InheritOrphansOfGroup(pid_t group) {
  // Ours, and groups outside our namespace, are the entrypoint's anyway.
  if (group <= 0 || group == own_group_) return;
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  if (!children.ok()) return;
  for (const ChildProcess& child : *children) {
    if (IsKnownChild(child.pid) || inherited_.count(child.pid) > 0) continue;
    if (getpgid(child.pid) == group) inherited_[child.pid] = group;
  }
}

void Supervisor::DecideDrains() {
  const absl::Time now = MonotonicNow();
  std::vector<Process*> undecided;
  for (Process& w : workers_) {
    if (!w.reaped || w.drain_decided || now >= w.drain_until) continue;
    w.drain_decided = true;
    if (GroupAlive(&w)) {
      undecided.push_back(&w);
    } else {
      w.drain_until = absl::InfinitePast();
    }
  }
  if (undecided.empty()) return;
  // One look at /proc for every group (several workers fail at once). The
  // leader's children were reparented to us before it could be reaped.
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  if (!children.ok()) return;  // cannot tell: let them drain
  for (Process* w : undecided) {
    if (!MayHoldOutputHelper(*w, *children)) w->drain_until = absl::InfinitePast();
  }
}

bool Supervisor::MayHoldOutputHelper(const Process& w,
                                     const std::vector<ChildProcess>& children) const {
  const auto setup_ticks = static_cast<uint64_t>(absl::ToDoubleSeconds(kHelperSetupTime) *
                                                 static_cast<double>(sysconf(_SC_CLK_TCK)));
  bool seen = false;
  for (const ChildProcess& child : children) {
    if (IsKnownChild(child.pid) || getpgid(child.pid) != w.pid) continue;
    seen = true;
    if (child.state == 'Z' || child.state == 'X') continue;
    const std::optional<PipeId> pipe = StdinPipe(child);
    if (pipe && pipe != own_stdin_pipe_) return true;
    // A `tee` just forked may not have pointed its stdin at the pipe yet.
    if (child.start_ticks == 0 || w.reaped_ticks < child.start_ticks + setup_ticks) return true;
  }
  return !seen;  // its members are not our children: let them drain
}

int Supervisor::KillAdoptedChildren(const char* what, bool at_exit) {
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  if (!children.ok()) {
    if (!warned_no_proc_) {
      warned_no_proc_ = true;
      TLOG(kWarning) << children.status().message()
                     << "; orphaned descendants of the workers are not killed";
    }
    return 0;
  }
  int alive = 0;
  std::vector<std::string> fresh;
  for (const ChildProcess& child : *children) {
    if (IsKnownChild(child.pid) || IsEntrypointProcess(child)) continue;
    if (!at_exit && spare_adopted_ && spare_adopted_(child)) continue;
    // Not reaped yet: the pid of our child cannot be reused before that, so
    // killing by pid is safe. A zombie counts until the next ReapChildren().
    ++alive;
    if (child.state == 'Z' || child.state == 'X') continue;
    kill(child.pid, SIGKILL);
    if (orphans_seen_.insert(child.pid).second) {
      fresh.push_back(absl::StrCat(child.pid, " (", child.comm, ")"));
    }
  }
  if (!fresh.empty()) {
    const size_t count = fresh.size();
    if (count > kMaxListedProcesses) fresh.resize(kMaxListedProcesses);
    TLOG(kInfo) << "killing " << count << " adopted process(es) " << what << ": "
                << absl::StrJoin(fresh, ", ") << (count > fresh.size() ? ", ..." : "");
  }
  return alive;
}

void Supervisor::KillAllAndReap(bool orphans) {
  AwaitDrainingGroups();
  const absl::Time deadline = MonotonicNow() + options_.kill_timeout;
  for (;;) {
    // Again each round: catches anything forked meanwhile.
    SignalGroups(SIGKILL, /*hold=*/false);
    ReapChildren();
    bool alive = AnyGroupAlive();
    if (!alive && orphans) alive = KillAdoptedChildren("left behind by the workers") > 0;
    if (!alive) return;
    absl::Duration remaining = deadline - MonotonicNow();
    if (remaining <= absl::ZeroDuration()) break;
    PollOnce(std::min(remaining, kGroupPollInterval));
  }
  std::vector<pid_t> stuck;
  for (const Process& w : workers_) {
    if (!w.group_gone) stuck.push_back(w.pid);
  }
  TLOG(kError) << "worker processes still alive " << absl::FormatDuration(options_.kill_timeout)
               << " after SIGKILL (uninterruptible sleep?); process groups: "
               << absl::StrJoin(stuck, " ");
}

void Supervisor::ForgetWorkers() {
  if (workers_.empty()) return;
  KillAllAndReap(KillsOrphansAtRoundEnd());
  for (Process& w : workers_) {
    ReturnTerminal(&w);
    RetireStreams(&w);
  }
  workers_.clear();
}

void Supervisor::ReturnTerminal(Process* p) {
  if (!p->has_terminal) return;
  p->has_terminal = false;
  // Only if it still has it: someone else (a shell) may have taken it since.
  // SIGTTOU is ignored (PrepareProcessForSupervision), so asking from the
  // background is allowed.
  if (tcgetpgrp(STDIN_FILENO) == p->pid && tcsetpgrp(STDIN_FILENO, getpgrp()) != 0) {
    TLOG(kWarning) << "cannot take the terminal back from process group " << p->pid << ": "
                   << strerror(errno);
  }
}

void Supervisor::FlushOutputBriefly() {
  flush_before_exit_ = false;
  const absl::Time deadline = MonotonicNow() + kExitFlushWait;
  for (OutputWriter* writer : {stdout_writer_.get(), stderr_writer_.get()}) {
    if (writer != nullptr) writer->Flush(std::max(deadline - MonotonicNow(), absl::ZeroDuration()));
  }
}

std::optional<Supervisor::Event> Supervisor::TakeQueuedEvent() {
  Event event;
  if (flush_before_exit_ && (!pending_exits_.empty() || !pending_helper_exits_.empty())) {
    FlushOutputBriefly();
  }
  if (!pending_exits_.empty()) {
    event.type = EventType::kWorkerExited;
    event.exit = pending_exits_.front();
    pending_exits_.pop_front();
    return event;
  }
  if (!pending_helper_exits_.empty()) {
    event.type = EventType::kHelperExited;
    event.exit = pending_helper_exits_.front();
    pending_helper_exits_.pop_front();
    return event;
  }
  if (gone_phase_ == GonePhase::kReady) {
    gone_phase_ = GonePhase::kIdle;
    event.type = EventType::kWorkersGone;
    return event;
  }
  if (!pending_signals_.empty()) {
    event.type = EventType::kSignal;
    event.signal = pending_signals_.front();
    pending_signals_.pop_front();
    return event;
  }
  for (bool& ready : watched_fd_ready_) {
    if (ready) {
      ready = false;
      event.type = EventType::kFdReady;
      return event;
    }
  }
  if (wake_pending_) {
    wake_pending_ = false;
    event.type = EventType::kWakeup;
    return event;
  }
  return std::nullopt;
}

Supervisor::Process* Supervisor::FindWorker(pid_t pid) {
  for (Process& w : workers_) {
    if (w.pid == pid && !w.reaped) return &w;
  }
  return nullptr;
}

Supervisor::Helper* Supervisor::FindHelper(pid_t pid) {
  for (auto& helper : helpers_) {
    if (helper->process.pid == pid && !helper->process.reaped) return helper.get();
  }
  return nullptr;
}

}  // namespace launcher
}  // namespace trainlet

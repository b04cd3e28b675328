#include "launcher/supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "launcher/signals.h"
#include "launcher/worker_spawner.h"

namespace trainlet {
namespace launcher {
namespace {

// How long to wait for SIGKILLed groups to disappear before giving up (a
// process stuck in uninterruptible sleep, e.g. in a GPU driver, may take a
// while; the agent must not hang forever on it).
constexpr absl::Duration kKillReapTimeout = absl::Seconds(10);
// Poll slice while waiting for group members that are not our children (no
// SIGCHLD tells us when they die).
constexpr absl::Duration kGroupPollInterval = absl::Milliseconds(20);

// Reads of one pipe (of up to kMaxLineBytes each) when draining it.
constexpr int kMaxDrainReads = 64;

// Deadlines use the monotonic clock: a wall-clock step must not stretch or
// cut a grace period.
absl::Time MonotonicNow() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::TimeFromTimespec(ts);
}

int PollMillis(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  int64_t micros = absl::ToInt64Microseconds(timeout);
  return static_cast<int>(std::min<int64_t>((micros + 999) / 1000, INT_MAX));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Supervisor>> Supervisor::Create(const Options& options) {
  sigset_t wanted = SupervisedSignalSet();
  sigset_t blocked;
  pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&wanted, sig) == 1 && sigismember(&blocked, sig) != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("trainlet: signal ", sig, " (", strsignal(sig),
                       ") is not blocked; call PrepareProcessForSupervision() at the start of "
                       "main(), before any thread exists"));
    }
  }
  int signal_fd = signalfd(-1, &wanted, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    return absl::InternalError(absl::StrCat("trainlet: signalfd failed: ", strerror(errno)));
  }
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    int error = errno;
    close(signal_fd);
    return absl::InternalError(absl::StrCat("trainlet: eventfd failed: ", strerror(error)));
  }
  return std::unique_ptr<Supervisor>(new Supervisor(options, signal_fd, wake_fd));
}

Supervisor::Supervisor(const Options& options, int signal_fd, int wake_fd)
    : options_(options),
      signal_fd_(signal_fd),
      wake_fd_(wake_fd),
      read_buffer_(OutputPrefixer::kMaxLineBytes) {}

Supervisor::~Supervisor() {
  ForgetWorkers();
  close(signal_fd_);
  close(wake_fd_);
}

absl::Status Supervisor::Start(const std::vector<WorkerSpec>& workers) {
  if (int running = running_count(); running > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainlet: Start() while ", running, " workers are still running; StopAll() first"));
  }
  ForgetWorkers();
  for (const WorkerSpec& spec : workers) {
    absl::StatusOr<SpawnedWorker> spawned =
        SpawnWorker(spec, options_.stdout_fd, options_.stderr_fd);
    if (!spawned.ok()) {
      // Kill and reap the ones already started; their exits are not events.
      std::vector<pid_t> started;
      for (const Worker& w : workers_) started.push_back(w.pid);
      ForgetWorkers();
      pending_exits_.erase(std::remove_if(pending_exits_.begin(), pending_exits_.end(),
                                          [&](const WorkerExit& e) {
                                            return std::find(started.begin(), started.end(),
                                                             e.pid) != started.end();
                                          }),
                           pending_exits_.end());
      TLOG(kError) << spawned.status().message() << " (local rank " << spec.local_rank << ")";
      if (!started.empty()) {
        TLOG(kError) << "killed the " << started.size() << " workers already started";
      }
      return spawned.status();
    }
    Worker worker;
    worker.local_rank = spec.local_rank;
    worker.global_rank = spec.global_rank;
    worker.pid = spawned->pid;
    if (spec.prefix_output) {
      const std::string prefix = absl::StrCat("[rank ", spec.global_rank, "] ");
      worker.out.fd = spawned->stdout_pipe;
      worker.out.prefixer = std::make_unique<OutputPrefixer>(prefix, options_.stdout_fd);
      worker.err.fd = spawned->stderr_pipe;
      worker.err.prefixer = std::make_unique<OutputPrefixer>(prefix, options_.stderr_fd);
    }
    workers_.push_back(std::move(worker));
    TLOG(kInfo) << "started worker local_rank=" << spec.local_rank
                << " global_rank=" << spec.global_rank << " pid=" << spawned->pid << ": "
                << spec.argv[0];
  }
  return absl::OkStatus();
}

Supervisor::Event Supervisor::Wait(absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : MonotonicNow() + std::max(timeout, absl::ZeroDuration());
  bool polled = false;
  for (;;) {
    ReapChildren();
    if (std::optional<Event> event = TakeQueuedEvent()) return *event;
    absl::Duration remaining = deadline - MonotonicNow();
    if (polled && remaining <= absl::ZeroDuration()) return Event{};
    PollOnce(remaining);
    polled = true;
  }
}

void Supervisor::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));  // EAGAIN: a wakeup is already pending
  (void)ignored;
}

void Supervisor::SignalAll(int sig) {
  for (Worker& w : workers_) {
    if (w.group_gone) continue;
    // While the leader is unreaped its pid (= pgid) cannot be reused. After
    // that the group id stays reserved as long as the group has members;
    // ESRCH means it is empty and we stop using the number.
    if (kill(-w.pid, sig) != 0 && errno == ESRCH && w.reaped) w.group_gone = true;
  }
}

std::vector<WorkerExit> Supervisor::StopAll(absl::Duration grace) {
  if (!workers_.empty()) {
    TLOG(kInfo) << "stopping workers: SIGTERM, grace period " << absl::FormatDuration(grace);
    SignalAll(SIGTERM);
    const absl::Time deadline = MonotonicNow() + grace;
    for (;;) {
      ReapChildren();
      if (!AnyGroupAlive()) break;
      absl::Duration remaining = deadline - MonotonicNow();
      if (remaining <= absl::ZeroDuration()) {
        TLOG(kWarning) << "grace period " << absl::FormatDuration(grace)
                       << " expired; sending SIGKILL to the worker process groups ("
                       << running_count() << " workers still running)";
        break;
      }
      PollOnce(std::min(remaining, kGroupPollInterval));
    }
    KillAllAndReap();
  }
  std::vector<WorkerExit> exits(pending_exits_.begin(), pending_exits_.end());
  pending_exits_.clear();
  return exits;
}

int Supervisor::running_count() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.reaped; }));
}

pid_t Supervisor::worker_pid(int local_rank) const {
  for (const Worker& w : workers_) {
    if (w.local_rank == local_rank) return w.pid;
  }
  return -1;
}

void Supervisor::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;  // 0: children left but none dead; ECHILD: none at all
    Worker* w = FindWorker(pid);
    if (w == nullptr || w->reaped) {
      TLOG(kDebug) << "reaped orphaned process " << pid << " (status " << status << ")";
      continue;
    }
    w->reaped = true;
    // Whatever it wrote before dying goes out before its exit is reported.
    ReadStream(&w->out, /*until_drained=*/true);
    ReadStream(&w->err, /*until_drained=*/true);
    WorkerExit exit;
    exit.local_rank = w->local_rank;
    exit.global_rank = w->global_rank;
    exit.pid = pid;
    exit.exit_code = ExitCodeFromWaitStatus(status);
    if (WIFSIGNALED(status)) {
      TLOG(kInfo) << "worker local_rank=" << w->local_rank << " global_rank=" << w->global_rank
                  << " pid=" << pid << " killed by signal " << WTERMSIG(status) << " ("
                  << strsignal(WTERMSIG(status)) << "), exit code " << exit.exit_code;
    } else {
      TLOG(kInfo) << "worker local_rank=" << w->local_rank << " global_rank=" << w->global_rank
                  << " pid=" << pid << " exited with code " << exit.exit_code;
    }
    pending_exits_.push_back(exit);
  }
}

void Supervisor::PollOnce(absl::Duration timeout) {
  std::vector<struct pollfd> fds;
  std::vector<Stream*> streams;
  fds.push_back({signal_fd_, POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  for (Worker& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      if (s->fd < 0) continue;
      fds.push_back({s->fd, POLLIN, 0});
      streams.push_back(s);
    }
  }
  int ready = poll(fds.data(), fds.size(), PollMillis(timeout));
  if (ready <= 0) return;  // timeout, or EINTR (nothing is unblocked, but be safe)
  if (fds[0].revents != 0) ReadSignals();
  if (fds[1].revents != 0) {
    uint64_t count;
    if (read(wake_fd_, &count, sizeof(count)) == sizeof(count)) wake_pending_ = true;
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    if (fds[i + 2].revents != 0) ReadStream(streams[i], /*until_drained=*/false);
  }
}

void Supervisor::ReadSignals() {
  struct signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // ReapChildren() runs on every Wait() iteration
    TLOG(kInfo) << "received signal " << sig << " (" << strsignal(sig) << ") from pid "
                << info.ssi_pid;
    pending_signals_.push_back(sig);
  }
}

void Supervisor::ReadStream(Stream* stream, bool until_drained) {
  // Bounded even when draining: a grandchild holding the pipe could write
  // forever and must not starve signals and exits.
  for (int reads = 0; stream->fd >= 0 && reads < (until_drained ? kMaxDrainReads : 1);) {
    ssize_t n = read(stream->fd, read_buffer_.data(), read_buffer_.size());
    if (n > 0) {
      stream->prefixer->Append(absl::string_view(read_buffer_.data(), static_cast<size_t>(n)));
      ++reads;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CloseStream(stream);  // EOF (or a broken pipe): every writer is gone
  }
}

void Supervisor::CloseStream(Stream* stream) {
  if (stream->fd < 0) return;
  close(stream->fd);
  stream->fd = -1;
  if (stream->prefixer) stream->prefixer->Finish();
}

bool Supervisor::AnyGroupAlive() {
  bool alive = false;
  for (Worker& w : workers_) {
    if (w.group_gone) continue;
    if (!w.reaped) {
      alive = true;
      continue;
    }
    if (kill(-w.pid, 0) != 0 && errno == ESRCH) {
      w.group_gone = true;
    } else {
      alive = true;
    }
  }
  return alive;
}

void Supervisor::KillAllAndReap() {
  const absl::Time deadline = MonotonicNow() + kKillReapTimeout;
  for (;;) {
    SignalAll(SIGKILL);  // again each round: catches anything forked meanwhile
    ReapChildren();
    if (!AnyGroupAlive()) return;
    absl::Duration remaining = deadline - MonotonicNow();
    if (remaining <= absl::ZeroDuration()) break;
    PollOnce(std::min(remaining, kGroupPollInterval));
  }
  std::vector<pid_t> stuck;
  for (const Worker& w : workers_) {
    if (!w.group_gone) stuck.push_back(w.pid);
  }
  TLOG(kError) << "worker process groups still alive " << absl::FormatDuration(kKillReapTimeout)
               << " after SIGKILL (uninterruptible sleep?): " << absl::StrJoin(stuck, " ");
}

void Supervisor::ForgetWorkers() {
  if (workers_.empty()) return;
  KillAllAndReap();
  for (Worker& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      ReadStream(s, /*until_drained=*/true);
      CloseStream(s);
    }
  }
  workers_.clear();
}

std::optional<Supervisor::Event> Supervisor::TakeQueuedEvent() {
  Event event;
  if (!pending_exits_.empty()) {
    event.type = EventType::kWorkerExited;
    event.exit = pending_exits_.front();
    pending_exits_.pop_front();
    return event;
  }
  if (!pending_signals_.empty()) {
    event.type = EventType::kSignal;
    event.signal = pending_signals_.front();
    pending_signals_.pop_front();
    return event;
  }
  if (wake_pending_) {
    wake_pending_ = false;
    event.type = EventType::kWakeup;
    return event;
  }
  return std::nullopt;
}

Supervisor::Worker* Supervisor::FindWorker(pid_t pid) {
  for (Worker& w : workers_) {
    if (w.pid == pid) return &w;
  }
  return nullptr;
}

}  // namespace launcher
}  // namespace trainlet

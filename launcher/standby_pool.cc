#include "launcher/standby_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "common/logging.h"

namespace trainlet::launcher {
namespace {

absl::Time MonotonicNow() { return Clock::Monotonic()->Now(); }

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Writes all of `data` to the non-blocking `fd` by `deadline` (monotonic);
// with `fds` (two) attached to the first byte.
absl::Status SendAll(int fd, const std::string& data, const int* fds, absl::Time deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n;
    if (sent == 0 && fds != nullptr) {
      struct iovec iov = {const_cast<char*>(data.data()), data.size()};
      alignas(struct cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
      memset(control, 0, sizeof(control));
      struct msghdr msg;
      memset(&msg, 0, sizeof(msg));
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(2 * sizeof(int));
      memcpy(CMSG_DATA(cmsg), fds, 2 * sizeof(int));
      n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } else {
      n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    }
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
    }
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError("it did not take its handover within 1 s");
    }
    struct pollfd p = {fd, POLLOUT, 0};
    poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
  }
  return absl::OkStatus();
}

void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

StandbyPool::~StandbyPool() {
  for (auto& [rank, standby] : standbys_) Kill(&standby);
  CloseFd(&dev_null_);
}

absl::Status StandbyPool::Start(const ProcessSpec& spec, const std::string& boot) {
  auto old = standbys_.find(spec.local_rank);
  if (old != standbys_.end()) Discard(old);
  if (dev_null_ < 0) {
    dev_null_ = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (dev_null_ < 0)
      return absl::InternalError(absl::StrCat("open /dev/null: ", strerror(errno)));
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  // The boot program goes in before the child exists: it is read at once,
  // whole (a socket buffer holds it; the plan keeps it small).
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  absl::Status wrote = SendAll(sv[0], boot, nullptr, MonotonicNow() + absl::Milliseconds(100));
  if (!wrote.ok()) {
    close(sv[0]);
    close(sv[1]);
    return absl::InternalError(absl::StrCat("the standby's program: ", wrote.message()));
  }
  ProcessSpec quiet = spec;
  quiet.output = OutputMode::kDirect;
  quiet.foreground_tty = false;
  absl::StatusOr<SpawnedWorker> spawned = SpawnWorker(quiet, dev_null_, dev_null_, sv[1]);
  close(sv[1]);
  if (!spawned.ok()) {
    close(sv[0]);
    return spawned.status();
  }
  Standby& standby = standbys_[spec.local_rank];
  standby.pid = spawned->pid;
  standby.control = sv[0];
  TLOG(kDebug) << "warm workers: standby for local rank " << spec.local_rank << " started, pid "
               << standby.pid;
  return absl::OkStatus();
}

absl::StatusOr<SpawnedWorker> StandbyPool::Take(const ProcessSpec& worker, int stdout_fd,
                                                int stderr_fd) {
  auto it = standbys_.find(worker.local_rank);
  if (it == standbys_.end()) {
    return absl::FailedPreconditionError("no standby (it exited, or none was started)");
  }
  Standby& standby = it->second;
  if (standby.control < 0) {
    Discard(it);
    return absl::FailedPreconditionError("its standby closed its socket");
  }
  if (standby.state != State::kReady) {
    // Its preload runs at nice 19 and cannot be sped up now: the worker
    // would wait on it. A cold start is faster.
    Discard(it);
    return absl::FailedPreconditionError("its standby was still preparing");
  }
  OutputPipes pipes;
  if (Relayed(worker.output)) {
    if (absl::Status made = pipes.Make("a worker from its standby"); !made.ok()) return made;
    stdout_fd = pipes.stdout_write();
    stderr_fd = pipes.stderr_write();
  }
  const std::vector<std::string>& env =
      worker.standby_env.empty() ? worker.env : worker.standby_env;
  std::string payload;
  for (const std::string& var : env) {
    payload.append(var);
    payload.push_back('\0');
  }
  std::string head = "TLH1";
  AppendLittleEndian(&head, payload.size(), 8);
  AppendLittleEndian(&head, env.size(), 4);
  const int fds[2] = {stdout_fd, stderr_fd};
  const absl::Time deadline = MonotonicNow() + kHandoverTimeout;
  absl::Status sent = SendAll(standby.control, head, fds, deadline);
  if (sent.ok()) sent = SendAll(standby.control, payload, nullptr, deadline);
  pipes.CloseWriteEnds();
  const pid_t pid = standby.pid;
  if (!sent.ok()) {
    Discard(it);
    return absl::UnavailableError(absl::StrCat("its standby (pid ", pid, "): ", sent.message()));
  }
  CloseControl(&standby);
  standbys_.erase(it);
  if (Relayed(worker.output)) return pipes.Release(pid);
  SpawnedWorker spawned;
  spawned.pid = pid;
  return spawned;
}

void StandbyPool::Drop(const std::string& why) {
  if (standbys_.empty()) return;
  if (!why.empty()) {
    TLOG(kInfo) << "warm workers: dropped " << standbys_.size() << " standby worker"
                << (standbys_.size() == 1 ? "" : "s") << ": " << why;
  }
  for (auto& [rank, standby] : standbys_) Kill(&standby);
  standbys_.clear();
}

std::vector<int> StandbyPool::PollFds() const {
  std::vector<int> fds;
  for (const auto& [rank, standby] : standbys_) {
    if (standby.control >= 0) fds.push_back(standby.control);
  }
  return fds;
}

void StandbyPool::OnReadable(int fd) {
  for (auto it = standbys_.begin(); it != standbys_.end(); ++it) {
    Standby& standby = it->second;
    if (standby.control != fd) continue;
    const int rank = it->first;
    char buffer[512];
    std::string broken;
    for (;;) {
      ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        // Exiting, most likely: its exit (OnReaped) says how. A standby
        // that lives on without its socket is no standby (Take()).
        CloseControl(&standby);
        return;
      }
      standby.line.append(buffer, static_cast<size_t>(n));
      size_t newline;
      while ((newline = standby.line.find('\n')) != std::string::npos) {
        std::string line = standby.line.substr(0, newline);
        standby.line.erase(0, newline + 1);
        if (standby.state == State::kPreparing && absl::StartsWith(line, "READY")) {
          standby.state = State::kReady;
          TLOG(kInfo) << "warm workers: standby for local rank " << rank << " (pid " << standby.pid
                      << ") ready: " << absl::StripPrefix(line, "READY ");
        } else if (absl::StartsWith(line, "UNFIT")) {
          TLOG(kInfo) << "warm workers: the standby for local rank " << rank
                      << " cannot become the worker: " << absl::StripPrefix(line, "UNFIT ")
                      << "; that worker starts cold";
          broken = "unfit";
        } else {
          broken = "it sent an unexpected line";
        }
      }
      if (standby.line.size() > kMaxLineBytes) broken = "it sent a line too long";
      if (!broken.empty()) break;
    }
    if (!broken.empty()) {
      if (broken != "unfit") {
        TLOG(kInfo) << "warm workers: dropped the standby for local rank " << rank << ": " << broken
                    << "; that worker starts cold";
      }
      Discard(it);
    }
    return;
  }
}

bool StandbyPool::OnReaped(pid_t pid, int wait_status) {
  if (auto killed = killed_.find(pid); killed != killed_.end()) {
    killed_.erase(killed);
    return true;
  }
  for (auto it = standbys_.begin(); it != standbys_.end(); ++it) {
    if (it->second.pid != pid) continue;
    TLOG(kInfo) << "warm workers: the standby for local rank " << it->first << " (pid " << pid
                << ") exited with " << ExitCodeFromWaitStatus(wait_status)
                << "; that worker starts cold";
    CloseControl(&it->second);
    standbys_.erase(it);
    return true;
  }
  return false;
}

bool StandbyPool::Owns(pid_t pid) const {
  if (killed_.count(pid) > 0) return true;
  for (const auto& [rank, standby] : standbys_) {
    if (standby.pid == pid) return true;
  }
  return false;
}

int StandbyPool::ready() const {
  int n = 0;
  for (const auto& [rank, standby] : standbys_) {
    n += standby.state == State::kReady && standby.control >= 0 ? 1 : 0;
  }
  return n;
}

std::vector<pid_t> StandbyPool::pids() const {
  std::vector<pid_t> pids;
  for (const auto& [rank, standby] : standbys_) pids.push_back(standby.pid);
  pids.insert(pids.end(), killed_.begin(), killed_.end());
  return pids;
}

pid_t StandbyPool::pid(int local_rank) const {
  auto it = standbys_.find(local_rank);
  return it == standbys_.end() ? -1 : it->second.pid;
}

void StandbyPool::Kill(Standby* standby) {
  CloseControl(standby);
  if (standby->pid > 0) {
    // Its group: whatever its preload started goes with it. Not reaped
    // yet, so the pid is still ours.
    kill(-standby->pid, SIGKILL);
    kill(standby->pid, SIGKILL);
    killed_.insert(standby->pid);
    standby->pid = -1;
  }
}

void StandbyPool::Discard(std::map<int, Standby>::iterator it) {
  Kill(&it->second);
  standbys_.erase(it);
}

void StandbyPool::CloseControl(Standby* standby) { CloseFd(&standby->control); }

}  // namespace trainlet::launcher

#include "launcher/signal_wait.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "common/clock.h"
#include "common/logging.h"
#include "launcher/signals.h"

namespace trainlet::launcher {
namespace {

// Every child that has exited; a SIGCHLD stands for any number of them.
void ReapExitedChildren() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    TLOG(kDebug) << "reaped process " << pid << " (status " << status << ")";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SignalWait>> SignalWait::Create() {
  absl::StatusOr<int> fd = OpenSupervisedSignalFd();
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<SignalWait>(new SignalWait(*fd));
}

SignalWait::~SignalWait() { close(fd_); }

int SignalWait::AwaitTerminatingSignal(absl::Duration timeout) {
  Clock* const clock = Clock::Monotonic();
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : clock->Now() + timeout;
  while (true) {
    signalfd_siginfo info;
    while (read(fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        ReapExitedChildren();
      } else if (IsTerminatingSignal(sig)) {
        return sig;
      } else {
        TLOG(kDebug) << "signal " << sig << " (" << strsignal(sig)
                     << ") ignored: no workers to forward it to";
      }
    }
    int wait_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - clock->Now();
      if (left <= absl::ZeroDuration()) return 0;
      // Rounded up: a wait of 0 ms would spin until the deadline.
      wait_ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), INT32_MAX));
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) < 0 && errno != EINTR) {
      TLOG(kError) << "poll on the signalfd failed: " << strerror(errno);
      return 0;
    }
  }
}

}  // namespace trainlet::launcher

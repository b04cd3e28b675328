#include "launcher/signals.h"

#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace trainlet {
namespace launcher {
namespace {

absl::Status SyscallError(const char* what, int err) {
  return absl::InternalError(absl::StrCat("trainlet: ", what, " failed: ", strerror(err)));
}

}  // namespace

const std::vector<int>& ForwardedSignals() {
  static const std::vector<int>* const kSignals =
      new std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  return *kSignals;
}

bool IsTerminatingSignal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

sigset_t SupervisedSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : ForwardedSignals()) sigaddset(&set, sig);
  return set;
}

absl::StatusOr<int> OpenSupervisedSignalFd() {
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
  const int fd = signalfd(-1, &wanted, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return SyscallError("signalfd", errno);
  return fd;
}

bool StdinIsForegroundTerminal() {
  if (isatty(STDIN_FILENO) != 1) return false;
  pid_t foreground = tcgetpgrp(STDIN_FILENO);
  return foreground > 0 && foreground == getpgrp();
}

absl::Status PrepareProcessForSupervision() {
  sigset_t set = SupervisedSignalSet();
  int err = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (err != 0) return SyscallError("pthread_sigmask(SIG_BLOCK)", err);

  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGPIPE, SIGTTOU, SIGTTIN}) {
    if (sigaction(sig, &ignore, nullptr) != 0) {
      return SyscallError(absl::StrCat("sigaction(", sigabbrev_np(sig), ", SIG_IGN)").c_str(),
                          errno);
    }
  }

  // As PID 1 we already inherit every orphan of the PID namespace.
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return SyscallError("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  }
  return absl::OkStatus();
}

}  // namespace launcher
}  // namespace trainlet

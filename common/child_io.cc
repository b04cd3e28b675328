#include "common/child_io.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace trainlet {

void OwnedFd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

size_t ReadSomeInto(OwnedFd* fd, std::string* into, size_t keep_tail) {
  char buf[64 << 10];
  const ssize_t got = read(fd->get(), buf, sizeof(buf));
  if (got <= 0) {
    if (got == 0 || errno != EINTR) fd->Reset();
    return 0;
  }
  into->append(buf, static_cast<size_t>(got));
  if (keep_tail > 0 && into->size() > keep_tail) into->erase(0, into->size() - keep_tail);
  return static_cast<size_t>(got);
}

bool TryReapChild(pid_t pid, ChildEnd* end) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) {
    end->reaped = true;
    end->status_known = true;
    end->status = status;
  } else if (r < 0 && errno == ECHILD) {
    end->reaped = true;
  }
  return end->reaped;
}

ChildOutput ReadChildOutput(OwnedFd exec_report, OwnedFd out, OwnedFd tail,
                            std::chrono::steady_clock::time_point deadline, size_t max_out,
                            size_t tail_bytes) {
  ChildOutput o;
  while (exec_report.get() >= 0 || out.get() >= 0 || tail.get() >= 0) {
    const int ms = MillisecondsUntil(deadline);
    if (ms == 0) {
      o.timed_out = true;
      break;
    }
    struct pollfd fds[3] = {
        {exec_report.get(), POLLIN, 0}, {out.get(), POLLIN, 0}, {tail.get(), POLLIN, 0}};
    const int n = poll(fds, 3, ms);
    if (n < 0 && errno != EINTR) {
      o.timed_out = true;  // cannot wait: treat as not answering
      break;
    }
    if (n <= 0) continue;
    if (fds[0].revents != 0) ReadSomeInto(&exec_report, &o.exec_report);
    if (fds[1].revents != 0) {
      ReadSomeInto(&out, &o.out);
      if (o.out.size() > max_out) {
        o.oversize = true;
        break;
      }
    }
    if (fds[2].revents != 0) ReadSomeInto(&tail, &o.tail, tail_bytes);
  }
  return o;
}

int MillisecondsUntil(std::chrono::steady_clock::time_point until) {
  const auto left = until - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

bool ReapChildBy(pid_t pid, int pidfd, std::chrono::steady_clock::time_point until, ChildEnd* end) {
  while (!TryReapChild(pid, end)) {
    const int ms = MillisecondsUntil(until);
    if (ms == 0) return false;
    if (pidfd >= 0) {
      struct pollfd exited = {pidfd, POLLIN, 0};
      poll(&exited, 1, ms);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return true;
}

void ReapChildLater(pid_t pid) {
  std::thread([pid] {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }).detach();
}

}  // namespace trainlet

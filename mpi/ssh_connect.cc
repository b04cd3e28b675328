#include "mpi/ssh_connect.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "mpi/ssh_probe.h"

namespace trainlet::mpi {

absl::Status SshConnect(const std::string& host, int port, absl::Duration timeout, int pass_fd) {
  int fd = -1;
  ProbeResult r = ConnectTcp(host, port, absl::Now() + timeout, &fd);
  if (r.stage != ProbeStage::kOk) return absl::UnavailableError(r.detail);
  // Blocking again, as ssh expects a socket it did not open itself to be.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  // Best effort: a socket without it still works, only slower to log in.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(pass_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  const int error = errno;
  close(fd);
  if (n != 1) {
    return absl::InternalError(absl::StrCat(
        "cannot pass the connection to ssh on descriptor ", pass_fd, ": ", strerror(error),
        " (ssh-connect is ssh's ProxyCommand with ProxyUseFdpass yes; run by hand it has "
        "nowhere to pass it)"));
  }
  return absl::OkStatus();
}

}  // namespace trainlet::mpi

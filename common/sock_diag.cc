#include "common/sock_diag.h"

#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace trainlet {
namespace {

absl::Status NetlinkError(const char* what, int error) {
  return absl::UnavailableError(
      absl::StrCat("sock_diag over netlink: ", what, ": ", std::strerror(error)));
}

}  // namespace

absl::Status DumpTcpSockets(uint32_t states, uint8_t extensions, TcpSocketVisitor each) {
  // A netlink socket to the kernel, not a network one.
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return NetlinkError("socket", errno);
  absl::Cleanup close_fd = [fd] { close(fd); };
  timeval timeout{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  // Not zeroed: only the pages a message fills are touched.
  constexpr size_t kBufferSize = 64 * 1024;
  std::unique_ptr<char[]> buffer(new char[kBufferSize]);
  for (const int family : {AF_INET, AF_INET6}) {
    struct {
      nlmsghdr header;
      inet_diag_req_v2 request;
    } message{};
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    message.header.nlmsg_seq = static_cast<uint32_t>(family);
    message.request.sdiag_family = static_cast<uint8_t>(family);
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = states;
    message.request.idiag_ext = extensions;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
      return NetlinkError("send", errno);
    }
    bool done = false;
    while (!done) {
      iovec io{buffer.get(), kBufferSize};
      msghdr received{};
      received.msg_iov = &io;
      received.msg_iovlen = 1;
      const ssize_t n = recvmsg(fd, &received, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return NetlinkError("receive", errno);
      if (n == 0) return NetlinkError("receive", EPIPE);
      if ((received.msg_flags & MSG_TRUNC) != 0) return NetlinkError("receive", EMSGSIZE);
      int left = static_cast<int>(n);
      for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer.get()); NLMSG_OK(h, left);
           h = NLMSG_NEXT(h, left)) {
        if (h->nlmsg_type == NLMSG_DONE) {
          done = true;
          break;
        }
        if (h->nlmsg_type == NLMSG_ERROR) {
          const int error = h->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr))
                                ? -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error
                                : EPROTO;
          // A kernel without IPv6 has no handler for it, and no IPv6 socket.
          if (family == AF_INET6 && error == ENOENT) {
            done = true;
            break;
          }
          return NetlinkError("dump", error);
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
            h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
          continue;
        }
        const auto* socket_info = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        const size_t header = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(inet_diag_msg)));
        const size_t length = h->nlmsg_len > header ? h->nlmsg_len - header : 0;
        const char* attributes =
            reinterpret_cast<const char*>(socket_info) + NLMSG_ALIGN(sizeof(inet_diag_msg));
        // (The socket closes with the rest of the dump unread.)
        if (!each(*socket_info, attributes, length)) return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace trainlet

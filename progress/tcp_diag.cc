#include "progress/tcp_diag.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainlet::agent {
namespace {

// TCP states whose sockets carry a tcp_info worth reading: not listeners,
// not TIME_WAIT or SYN_RECV minisocks (no inode, no counters).
constexpr uint32_t kConnectedStates = (1u << 1) /*ESTABLISHED*/ | (1u << 2) /*SYN_SENT*/ |
                                      (1u << 4) /*FIN_WAIT1*/ | (1u << 5) /*FIN_WAIT2*/ |
                                      (1u << 8) /*CLOSE_WAIT*/ | (1u << 9) /*LAST_ACK*/ |
                                      (1u << 11) /*CLOSING*/;

absl::Status NetlinkError(const char* what, int error) {
  return absl::UnavailableError(
      absl::StrCat("sock_diag over netlink: ", what, ": ", std::strerror(error)));
}

// A field of struct tcp_info, if the kernel's copy is long enough to hold it.
template <typename Field>
int64_t FieldAt(const void* data, size_t length, size_t offset) {
  if (length < offset + sizeof(Field)) return -1;
  Field v;
  std::memcpy(&v, static_cast<const char*>(data) + offset, sizeof(v));
  // A u64 beyond int64 is no real count: unknown.
  if (static_cast<uint64_t>(v) > static_cast<uint64_t>(INT64_MAX)) return -1;
  return static_cast<int64_t>(v);
}

class SockDiagSource : public TcpInfoSource {
 public:
  absl::StatusOr<std::vector<TcpSocketInfo>> Dump(const absl::flat_hash_set<uint64_t>& inodes,
                                                  size_t max_sockets) override;

 private:
  // Not zeroed: only the pages a message fills are touched. Kept between
  // dumps (the agent samples every few seconds).
  static constexpr size_t kBufferSize = 64 * 1024;
  std::unique_ptr<char[]> buffer_{new char[kBufferSize]};
};

absl::StatusOr<std::vector<TcpSocketInfo>> SockDiagSource::Dump(
    const absl::flat_hash_set<uint64_t>& inodes, size_t max_sockets) {
  std::vector<TcpSocketInfo> out;
  if (inodes.empty() || max_sockets == 0) return out;
  // A netlink socket to the kernel, not a network one.
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return NetlinkError("socket", errno);
  absl::Cleanup close_fd = [fd] { close(fd); };
  // The kernel answers at once; a bound anyway, so that the loop never hangs.
  timeval timeout{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  size_t messages = 0, bytes = 0;
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
    message.request.idiag_states = kConnectedStates;
    message.request.idiag_ext = 1u << (INET_DIAG_INFO - 1);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
      return NetlinkError("send", errno);
    }
    bool done = false;
    while (!done) {
      if (messages >= kMaxDumpMessages || bytes >= kMaxDumpBytes || out.size() >= max_sockets) {
        return out;  // bounded: what was read so far (the socket is closed with the rest).
      }
      iovec io{buffer_.get(), kBufferSize};
      msghdr received{};
      received.msg_iov = &io;
      received.msg_iovlen = 1;
      const ssize_t n = recvmsg(fd, &received, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return NetlinkError("receive", errno);
      if (n == 0) return NetlinkError("receive", EPIPE);
      if ((received.msg_flags & MSG_TRUNC) != 0) return NetlinkError("receive", EMSGSIZE);
      bytes += static_cast<size_t>(n);
      int left = static_cast<int>(n);
      for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer_.get()); NLMSG_OK(h, left);
           h = NLMSG_NEXT(h, left)) {
        ++messages;
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
        const auto* info = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        if (!inodes.contains(info->idiag_inode) || out.size() >= max_sockets) continue;
        // The attributes after the message: INET_DIAG_INFO is the tcp_info.
        int attributes_left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*info)));
        for (const rtattr* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(info) +
                                                               NLMSG_ALIGN(sizeof(*info)));
             RTA_OK(a, attributes_left); a = RTA_NEXT(a, attributes_left)) {
          if (a->rta_type != INET_DIAG_INFO) continue;
          out.push_back(ParseTcpInfo(info->idiag_inode, RTA_DATA(a), RTA_PAYLOAD(a)));
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace

TcpSocketInfo ParseTcpInfo(uint64_t inode, const void* data, size_t length) {
  TcpSocketInfo s;
  s.inode = inode;
  s.rtt_us = FieldAt<uint32_t>(data, length, offsetof(tcp_info, tcpi_rtt));
  s.total_retrans = FieldAt<uint32_t>(data, length, offsetof(tcp_info, tcpi_total_retrans));
  s.bytes_acked = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_bytes_acked));
  s.delivery_rate = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_delivery_rate));
  return s;
}

std::unique_ptr<TcpInfoSource> NewSockDiagSource() { return std::make_unique<SockDiagSource>(); }

}  // namespace trainlet::agent

#include "progress/tcp_diag.h"

#include <linux/inet_diag.h>
#include <linux/rtnetlink.h>
#include <linux/tcp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/sock_diag.h"

namespace trainlet::agent {
namespace {

// TCP states whose sockets carry a tcp_info worth reading: not listeners,
// not TIME_WAIT or SYN_RECV minisocks (no inode, no counters).
constexpr uint32_t kConnectedStates = (1u << 1) /*ESTABLISHED*/ | (1u << 2) /*SYN_SENT*/ |
                                      (1u << 4) /*FIN_WAIT1*/ | (1u << 5) /*FIN_WAIT2*/ |
                                      (1u << 8) /*CLOSE_WAIT*/ | (1u << 9) /*LAST_ACK*/ |
                                      (1u << 11) /*CLOSING*/;

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
                                                  size_t max_sockets) override {
    std::vector<TcpSocketInfo> out;
    if (inodes.empty() || max_sockets == 0) return out;
    size_t messages = 0;
    absl::Status dumped = DumpTcpSockets(
        kConnectedStates, 1u << (INET_DIAG_INFO - 1),
        [&](const inet_diag_msg& socket, const void* attributes, size_t length) {
          if (inodes.contains(socket.idiag_inode)) {
            // The attributes after the message: INET_DIAG_INFO is the tcp_info.
            int left = static_cast<int>(length);
            for (const rtattr* a = static_cast<const rtattr*>(attributes); RTA_OK(a, left);
                 a = RTA_NEXT(a, left)) {
              if (a->rta_type != INET_DIAG_INFO) continue;
              out.push_back(ParseTcpInfo(socket.idiag_inode, RTA_DATA(a), RTA_PAYLOAD(a)));
              break;
            }
          }
          // Bounded: what was read so far.
          return ++messages < kMaxDumpMessages && out.size() < max_sockets &&
                 out.size() < inodes.size();
        });
    if (!dumped.ok()) return dumped;
    return out;
  }
};

}  // namespace

TcpSocketInfo ParseTcpInfo(uint64_t inode, const void* data, size_t length) {
  TcpSocketInfo s;
  s.inode = inode;
  s.rtt_us = FieldAt<uint32_t>(data, length, offsetof(tcp_info, tcpi_rtt));
  s.total_retrans = FieldAt<uint32_t>(data, length, offsetof(tcp_info, tcpi_total_retrans));
  s.bytes_acked = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_bytes_acked));
  s.delivery_rate = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_delivery_rate));
  s.busy_us = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_busy_time));
  s.rwnd_limited_us = FieldAt<uint64_t>(data, length, offsetof(tcp_info, tcpi_rwnd_limited));
  return s;
}

std::unique_ptr<TcpInfoSource> NewSockDiagSource() { return std::make_unique<SockDiagSource>(); }

}  // namespace trainlet::agent

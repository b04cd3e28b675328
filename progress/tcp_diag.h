// The kernel's view of TCP connections (struct tcp_info), for the slow-node
// signals (slow_signals.h, docs/slow-nodes.md): smoothed RTT, segments
// retransmitted, bytes acknowledged and the delivery rate of each
// connection, by socket inode, read through sock_diag (NETLINK_SOCK_DIAG,
// inet_diag_req_v2 with INET_DIAG_INFO) for IPv4 and IPv6.
//
// A dump lists every connected TCP socket of the agent's network namespace
// (the pod's, common/sock_diag.h); the caller picks its workers' by inode
// (/proc/PID/fd's "socket:[N]"). What is read is bounded: at most
// `max_sockets` sockets kept and kMaxDumpMessages sockets walked per dump, a
// 1 s receive timeout; a dump cut short by a bound is returned as far as it
// went.
//
// TcpInfoSource is the seam (tests use a fake); NewSockDiagSource is the
// kernel's. Thread-compatible.
#ifndef TRAINLET_PROGRESS_TCP_DIAG_H_
#define TRAINLET_PROGRESS_TCP_DIAG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace trainlet::agent {

inline constexpr size_t kMaxDumpMessages = 65536;

// One connection's counters (tcp_info). A field the kernel's tcp_info is
// too short to hold (an old kernel) is -1.
struct TcpSocketInfo {
  uint64_t inode = 0;
  int64_t rtt_us = -1;           // tcpi_rtt: smoothed RTT, microseconds
  int64_t total_retrans = -1;    // tcpi_total_retrans: segments, since the start
  int64_t bytes_acked = -1;      // tcpi_bytes_acked (Linux 4.1+), since the start
  int64_t delivery_rate = -1;    // tcpi_delivery_rate (Linux 4.9+), bytes/s
  int64_t busy_us = -1;          // tcpi_busy_time (Linux 4.10+): sending, since the start
  int64_t rwnd_limited_us = -1;  // tcpi_rwnd_limited (4.10+): of it, held by the receiver
};

// The counters of an INET_DIAG_INFO attribute's payload (a struct tcp_info
// of the kernel's length, which may be shorter or longer than this
// program's).
TcpSocketInfo ParseTcpInfo(uint64_t inode, const void* data, size_t length);

class TcpInfoSource {
 public:
  virtual ~TcpInfoSource() = default;
  // The connections among `inodes` (at most `max_sockets` of them). An
  // error: no dump at all (no sock_diag in a sandbox, no permission).
  virtual absl::StatusOr<std::vector<TcpSocketInfo>> Dump(
      const absl::flat_hash_set<uint64_t>& inodes, size_t max_sockets) = 0;
};

// sock_diag over a netlink socket of the calling process's namespace; the
// socket is opened per dump (an idle agent holds none).
std::unique_ptr<TcpInfoSource> NewSockDiagSource();

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_TCP_DIAG_H_

// One dump of this network namespace's TCP sockets, IPv4 then IPv6, through
// the kernel's sock_diag (NETLINK_SOCK_DIAG, inet_diag_req_v2) over a
// netlink socket opened for the call: the sockets in `states` (a mask of
// 1 << TCP_* states), each message with the INET_DIAG_* attributes
// `extensions` asks for (a mask of 1 << (INET_DIAG_x - 1)). Used to find
// the ports in use (agent/master_port.h) and the workers' connections'
// tcp_info (progress/tcp_diag.h).
//
// The caller bounds the walk: `each` returns false to stop it. Each receive
// waits at most 1 s (the kernel answers at once); a kernel without IPv6
// (no handler: ENOENT) has no IPv6 socket and is not an error.
//
// Thread-safe (no shared state).
#ifndef TRAINLET_COMMON_SOCK_DIAG_H_
#define TRAINLET_COMMON_SOCK_DIAG_H_

#include <linux/inet_diag.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace trainlet {

// `attributes`: the message's rtattr list, `length` bytes.
using TcpSocketVisitor =
    absl::FunctionRef<bool(const inet_diag_msg& socket, const void* attributes, size_t length)>;

// UNAVAILABLE ("sock_diag over netlink: ...") when the dump cannot be made or
// read (no netlink in a sandbox, a receive timeout).
absl::Status DumpTcpSockets(uint32_t states, uint8_t extensions, TcpSocketVisitor each);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_SOCK_DIAG_H_

// MASTER_PORT for a single-node run, picked without an IP socket (such a run
// opens none): a random port that no listening TCP socket of this network
// namespace holds, from a range where connect(2) never binds its local port.
//
// Why that range: rank 0's store binds the port a moment later, and the
// sockets that can make that bind fail are listeners on the port, and (the
// store sets SO_REUSEADDR) connections that bound it without that option:
// in practice outgoing connections, whose local ports the kernel draws from
// net.ipv4.ip_local_port_range. Above that range (61000-65535 by default),
// else just below it, only listeners can hold a port, and the kernel lists
// those cheaply (sock_diag over netlink walks its listening hash only).
// Listing every socket instead (/proc/net/tcp) walks the whole established
// hash table, whose size grows with the machine's memory, not with this
// pod's sockets: ~2 ms here, more on a large node. Ports the administrator
// reserved (net.ipv4.ip_local_reserved_ports) are never picked. When the
// ephemeral range leaves no room outside it, the port is drawn from inside it
// and checked against every TCP socket, as before.
//
// Pure functions plus reads of /proc/sys and netlink; thread-safe.
#ifndef TRAINLET_AGENT_MASTER_PORT_H_
#define TRAINLET_AGENT_MASTER_PORT_H_

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::agent {

struct PortRange {
  int low = 0;
  int high = 0;  // inclusive
  int size() const { return high - low + 1; }
  bool operator==(const PortRange& o) const { return low == o.low && high == o.high; }
};

// The range to draw MASTER_PORT from, given the kernel's ephemeral range:
// above it when at least 1024 ports are there, else the (up to) 16384 ports
// below it when at least 1024 are there; nullopt when neither (draw inside
// the ephemeral range, checking every socket).
std::optional<PortRange> RangeOutsideEphemeral(PortRange ephemeral);

// "32768\t60999\n" (/proc/sys/net/ipv4/ip_local_port_range); nullopt when
// malformed.
std::optional<PortRange> ParsePortRange(absl::string_view text);

// "8080,9000-9100\n" (/proc/sys/net/ipv4/ip_local_reserved_ports) into
// `ports`; false (with `ports` unchanged) when malformed.
bool ParseReservedPorts(absl::string_view text, std::set<int>* ports);

// The local ports of /proc/net/tcp or /proc/net/tcp6 text (header line
// first) into `ports`.
void AddLocalPortsFromProcNetTcp(absl::string_view text, std::set<int>* ports);

// Local ports of this network namespace's TCP sockets, IPv4 and IPv6, from
// the kernel's sock_diag over a netlink socket: the listening ones only, or
// every one (which walks the kernel's whole established hash table).
absl::StatusOr<std::set<int>> TcpLocalPortsFromKernel(bool listening_only);

// Where PickMasterPort() reads the machine; tests replace each piece.
struct PortPickSeams {
  // The contents of a /proc file; nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> read_file;
  std::function<absl::StatusOr<std::set<int>>(bool listening_only)> tcp_ports =
      TcpLocalPortsFromKernel;
  // A uniform random integer in [low, high].
  std::function<int(int low, int high)> random;
};
PortPickSeams RealPortPickSeams();

// A port for MASTER_PORT (see the file comment). NotFound when /proc and
// netlink cannot tell which ports are in use, or no free port turned up in
// 64 draws: the caller then falls back to a port the kernel picks.
absl::StatusOr<int> PickMasterPort(const PortPickSeams& seams);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_MASTER_PORT_H_

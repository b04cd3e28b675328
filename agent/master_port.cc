#include "agent/master_port.h"

#include <fcntl.h>
#include <linux/inet_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sock_diag.h"

namespace trainlet::agent {
namespace {

constexpr int kMinPorts = 1024;            // a range smaller than this is not worth drawing from.
constexpr int kBelowPorts = 16384;         // how far below the ephemeral range to go.
constexpr int kDraws = 64;                 // random draws before giving up.
constexpr size_t kMaxProcFile = 32 << 20;  // /proc/net/tcp of ~200,000 sockets.

bool ParsePort(absl::string_view text, int* port) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), port) && *port > 0 && *port <= 65535;
}

// One file of /proc, read with large reads: each read(2) of /proc/net/tcp
// walks the kernel's TCP hash table again, and stdio reads /proc 1 KiB at a
// time.
std::optional<std::string> ReadProcFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  absl::Cleanup close_fd = [fd] { close(fd); };
  // Not zeroed: only the pages a read fills are touched.
  constexpr size_t kChunk = 64 * 1024;
  std::unique_ptr<char[]> chunk(new char[kChunk]);
  std::string text;
  while (text.size() < kMaxProcFile) {
    const ssize_t n = read(fd, chunk.get(), kChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    text.append(chunk.get(), static_cast<size_t>(n));
  }
  return text;
}

int RandomInRange(int low, int high) {
  uint32_t value = 0;
  if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
    // No getrandom (a seccomp filter): the process id and the stack's
    // address (randomised) still spread concurrent runs apart.
    value = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&value)) ^
            static_cast<uint32_t>(getpid()) * 2654435761u;
  }
  return low + static_cast<int>(value % static_cast<uint32_t>(high - low + 1));
}

}  // namespace

std::optional<PortRange> RangeOutsideEphemeral(PortRange ephemeral) {
  if (65535 - ephemeral.high >= kMinPorts) return PortRange{ephemeral.high + 1, 65535};
  const int below_low = std::max(1024, ephemeral.low - kBelowPorts);
  if (ephemeral.low - below_low >= kMinPorts) return PortRange{below_low, ephemeral.low - 1};
  return std::nullopt;
}

std::optional<PortRange> ParsePortRange(absl::string_view text) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text), absl::ByAnyChar(" \t"), absl::SkipEmpty());
  PortRange r;
  if (fields.size() != 2 || !ParsePort(fields[0], &r.low) || !ParsePort(fields[1], &r.high) ||
      r.high < r.low) {
    return std::nullopt;
  }
  return r;
}

bool ParseReservedPorts(absl::string_view text, std::set<int>* ports) {
  std::set<int> parsed;
  for (absl::string_view item :
       absl::StrSplit(absl::StripAsciiWhitespace(text), ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> bounds = absl::StrSplit(item, '-');
    int low = 0, high = 0;
    if (!ParsePort(bounds.first, &low)) return false;
    if (bounds.second.empty()) {
      high = low;
    } else if (!ParsePort(bounds.second, &high) || high < low) {
      return false;
    }
    for (int p = low; p <= high; ++p) parsed.insert(p);
  }
  ports->insert(parsed.begin(), parsed.end());
  return true;
}

void AddLocalPortsFromProcNetTcp(absl::string_view text, std::set<int>* ports) {
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (header) {
      header = false;
      continue;
    }
    // "  0: 0100007F:A2F1 00000000:0000 0A ...": the local port in hex.
    const size_t first = line.find(':');
    if (first == absl::string_view::npos) continue;
    const size_t second = line.find(':', first + 1);
    if (second == absl::string_view::npos) continue;
    absl::string_view hex = line.substr(second + 1, 4);
    int port = 0;
    if (absl::SimpleHexAtoi(hex, &port)) ports->insert(port);
  }
}

absl::StatusOr<std::set<int>> TcpLocalPortsFromKernel(bool listening_only) {
  std::set<int> ports;
  absl::Status dumped = DumpTcpSockets(listening_only ? (1u << TCP_LISTEN) : ~0u, 0,
                                       [&](const inet_diag_msg& socket, const void*, size_t) {
                                         ports.insert(ntohs(socket.id.idiag_sport));
                                         return true;
                                       });
  if (!dumped.ok()) return dumped;
  return ports;
}

PortPickSeams RealPortPickSeams() {
  PortPickSeams seams;
  seams.read_file = ReadProcFile;
  seams.tcp_ports = TcpLocalPortsFromKernel;
  seams.random = RandomInRange;
  return seams;
}

absl::StatusOr<int> PickMasterPort(const PortPickSeams& seams) {
  PortRange ephemeral{32768, 60999};  // the kernel's default
  if (std::optional<std::string> text = seams.read_file("/proc/sys/net/ipv4/ip_local_port_range")) {
    if (std::optional<PortRange> range = ParsePortRange(*text)) ephemeral = *range;
  }
  std::set<int> taken;
  if (std::optional<std::string> text =
          seams.read_file("/proc/sys/net/ipv4/ip_local_reserved_ports")) {
    ParseReservedPorts(*text, &taken);
  }
  const std::optional<PortRange> outside = RangeOutsideEphemeral(ephemeral);
  const PortRange range = outside.value_or(ephemeral);

  absl::StatusOr<std::set<int>> in_use = seams.tcp_ports(/*listening_only=*/outside.has_value());
  if (!in_use.ok()) {
    // No sock_diag (a sandbox without it): /proc lists every socket.
    std::optional<std::string> v4 = seams.read_file("/proc/net/tcp");
    if (!v4.has_value()) {
      return absl::NotFoundError(absl::StrCat("cannot tell which ports are in use (",
                                              in_use.status().message(),
                                              "; /proc/net/tcp unreadable)"));
    }
    in_use = std::set<int>();
    AddLocalPortsFromProcNetTcp(*v4, &*in_use);
    // No tcp6 table: a kernel without IPv6 (ipv6.disable=1) holds no IPv6 socket.
    if (std::optional<std::string> v6 = seams.read_file("/proc/net/tcp6")) {
      AddLocalPortsFromProcNetTcp(*v6, &*in_use);
    }
  }
  taken.insert(in_use->begin(), in_use->end());
  for (int draw = 0; draw < kDraws; ++draw) {
    const int port = seams.random(range.low, range.high);
    if (port >= range.low && port <= range.high && taken.count(port) == 0) return port;
  }
  return absl::NotFoundError(absl::StrCat("no free port in ", range.low, "-", range.high, " after ",
                                          kDraws, " random draws"));
}

}  // namespace trainlet::agent

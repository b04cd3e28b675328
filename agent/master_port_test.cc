#include "agent/master_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::Not;

TEST(ParsePortRange, KernelFormatAndMalformed) {
  EXPECT_EQ(ParsePortRange("32768\t60999\n"), (PortRange{32768, 60999}));
  EXPECT_EQ(ParsePortRange(" 1024 65535 "), (PortRange{1024, 65535}));
  EXPECT_EQ(ParsePortRange("60999 32768"), std::nullopt);
  EXPECT_EQ(ParsePortRange("32768"), std::nullopt);
  EXPECT_EQ(ParsePortRange("0 100"), std::nullopt);
  EXPECT_EQ(ParsePortRange("1 70000"), std::nullopt);
  EXPECT_EQ(ParsePortRange("a b"), std::nullopt);
}

TEST(RangeOutsideEphemeral, AboveWhenRoomElseBelowElseNone) {
  // The kernel's default leaves 61000-65535 above it.
  EXPECT_EQ(RangeOutsideEphemeral({32768, 60999}), (PortRange{61000, 65535}));
  // IANA's dynamic range (49152-65535) leaves nothing above: 16384 ports below.
  EXPECT_EQ(RangeOutsideEphemeral({49152, 65535}), (PortRange{32768, 49151}));
  // Never below 1024, never fewer than 1024 ports.
  EXPECT_EQ(RangeOutsideEphemeral({4096, 65000}), (PortRange{1024, 4095}));
  EXPECT_EQ(RangeOutsideEphemeral({2000, 65000}), std::nullopt);
  EXPECT_EQ(RangeOutsideEphemeral({1024, 65535}), std::nullopt);
}

TEST(ParseReservedPorts, ListsAndRanges) {
  std::set<int> ports;
  EXPECT_TRUE(ParseReservedPorts("\n", &ports));
  EXPECT_TRUE(ports.empty());
  EXPECT_TRUE(ParseReservedPorts("8080,61000-61002\n", &ports));
  EXPECT_EQ(ports, (std::set<int>{8080, 61000, 61001, 61002}));
  EXPECT_FALSE(ParseReservedPorts("9000-8000", &ports));
  EXPECT_FALSE(ParseReservedPorts("x", &ports));
  EXPECT_EQ(ports.size(), 4u);
}

TEST(AddLocalPortsFromProcNetTcp, ReadsLocalPortsOfV4AndV6Lines) {
  std::set<int> ports;
  AddLocalPortsFromProcNetTcp(
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
      "   0: 0100007F:A2F1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
      "   1: 0100007F:1F90 0100007F:EE4A 01 00000000:00000000 00:00000000 00000000     0\n",
      &ports);
  AddLocalPortsFromProcNetTcp(
      "  sl  local_address                         remote_address                        st\n"
      "   0: 0000000000000000FFFF00000100007F:8006 0000000000000000FFFF00000100007F:95CB 01\n",
      &ports);
  EXPECT_EQ(ports, (std::set<int>{0xA2F1, 0x1F90, 0x8006}));
}

// A listening socket on a port the kernel picks, IPv4 or IPv6.
struct Listener {
  explicit Listener(int family) {
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_storage addr{};
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    addr.ss_family = static_cast<sa_family_t>(family);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port = family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                             : ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  ~Listener() {
    if (fd >= 0) close(fd);
  }
  int fd = -1;
  int port = 0;
};

TEST(TcpLocalPortsFromKernel, ListsThisProcesssListeners) {
  Listener v4(AF_INET);
  ASSERT_GT(v4.port, 0);
  Listener v6(AF_INET6);
  absl::StatusOr<std::set<int>> listening = TcpLocalPortsFromKernel(/*listening_only=*/true);
  ASSERT_TRUE(listening.ok()) << listening.status();
  EXPECT_THAT(*listening, Contains(v4.port));
  if (v6.port > 0) {
    EXPECT_THAT(*listening, Contains(v6.port));
  }
  absl::StatusOr<std::set<int>> every = TcpLocalPortsFromKernel(/*listening_only=*/false);
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_THAT(*every, Contains(v4.port));
}

TEST(TcpLocalPortsFromKernel, ListeningOnlyLeavesOutConnections) {
  Listener server(AF_INET);
  ASSERT_GT(server.port, 0);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(server.port));
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  ASSERT_EQ(getsockname(client, reinterpret_cast<sockaddr*>(&local), &len), 0);
  const int client_port = ntohs(local.sin_port);

  absl::StatusOr<std::set<int>> listening = TcpLocalPortsFromKernel(/*listening_only=*/true);
  absl::StatusOr<std::set<int>> every = TcpLocalPortsFromKernel(/*listening_only=*/false);
  close(client);
  ASSERT_TRUE(listening.ok()) << listening.status();
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_THAT(*listening, Not(Contains(client_port)));
  EXPECT_THAT(*every, Contains(client_port));
}

// A machine made of maps: files, the kernel's answer, and the draws.
struct FakeMachine {
  std::map<std::string, std::string> files;
  absl::StatusOr<std::set<int>> listening = std::set<int>();
  absl::StatusOr<std::set<int>> every = std::set<int>();
  std::vector<bool> asked_listening_only;
  std::vector<int> draws;  // returned in turn, then the last one again
  std::vector<std::pair<int, int>> ranges;
  size_t next_draw = 0;

  PortPickSeams Seams() {
    PortPickSeams s;
    s.read_file = [this](const std::string& path) -> std::optional<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return std::nullopt;
      return it->second;
    };
    s.tcp_ports = [this](bool listening_only) {
      asked_listening_only.push_back(listening_only);
      return listening_only ? listening : every;
    };
    s.random = [this](int low, int high) {
      ranges.emplace_back(low, high);
      const int d = draws[std::min(next_draw, draws.size() - 1)];
      ++next_draw;
      return d;
    };
    return s;
  }
};

TEST(PickMasterPort, DrawsAboveTheEphemeralRangeAndSkipsListenersAndReservedPorts) {
  FakeMachine m;
  m.files["/proc/sys/net/ipv4/ip_local_port_range"] = "32768\t60999\n";
  m.files["/proc/sys/net/ipv4/ip_local_reserved_ports"] = "61001\n";
  m.listening = std::set<int>{61000};
  m.draws = {61000, 61001, 61002};
  absl::StatusOr<int> port = PickMasterPort(m.Seams());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 61002);
  EXPECT_EQ(m.asked_listening_only, std::vector<bool>{true});
  EXPECT_EQ(m.ranges.front(), std::make_pair(61000, 65535));
}

TEST(PickMasterPort, NoRoomOutsideTheRangeChecksEverySocketInsideIt) {
  FakeMachine m;
  m.files["/proc/sys/net/ipv4/ip_local_port_range"] = "1024 65535\n";
  m.every = std::set<int>{40000};
  m.draws = {40000, 40001};
  absl::StatusOr<int> port = PickMasterPort(m.Seams());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 40001);
  EXPECT_EQ(m.asked_listening_only, std::vector<bool>{false});
  EXPECT_EQ(m.ranges.front(), std::make_pair(1024, 65535));
}

TEST(PickMasterPort, WithoutNetlinkReadsProcNetTcp) {
  FakeMachine m;  // no ip_local_port_range: the kernel's default
  m.listening = absl::UnavailableError("no sock_diag");
  m.files["/proc/net/tcp"] =
      "header\n   0: 0100007F:EE48 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n";
  m.draws = {0xEE48, 0xEE49};
  absl::StatusOr<int> port = PickMasterPort(m.Seams());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 0xEE49);  // no tcp6 file: no IPv6 socket
}

TEST(PickMasterPort, NothingToTellOrNothingFreeIsNotFound) {
  FakeMachine blind;
  blind.listening = absl::UnavailableError("no sock_diag");
  blind.draws = {61000};
  EXPECT_EQ(PickMasterPort(blind.Seams()).status().code(), absl::StatusCode::kNotFound);

  FakeMachine full;
  full.listening = std::set<int>{61000};
  full.draws = {61000};
  absl::StatusOr<int> port = PickMasterPort(full.Seams());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(port.status().message()), ::testing::HasSubstr("61000-65535"));
}

TEST(PickMasterPort, RealMachineGivesAPortNothingListensOn) {
  Listener v4(AF_INET);
  absl::StatusOr<int> port = PickMasterPort(RealPortPickSeams());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_NE(*port, v4.port);
  absl::StatusOr<std::set<int>> listening = TcpLocalPortsFromKernel(true);
  ASSERT_TRUE(listening.ok());
  EXPECT_THAT(*listening, Not(Contains(*port)));
  // And it binds.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << *port;
  close(fd);
}

}  // namespace
}  // namespace trainlet::agent

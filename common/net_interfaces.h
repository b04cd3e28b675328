// This host's interface addresses (getifaddrs(3)), numeric and without zone,
// for the places that ask "which interface carries this address" (the agent's
// own-address checks, the node probe's NICs, NCCL_SOCKET_IFNAME advice), and
// the port a bound socket got.
//
// Reads the live kernel; no state; safe from any thread.
#ifndef TRAINLET_COMMON_NET_INTERFACES_H_
#define TRAINLET_COMMON_NET_INTERFACES_H_

#include <string>
#include <vector>

namespace trainlet {

struct InterfaceAddress {
  std::string interface;  // "eth0"
  std::string addr;       // "10.1.2.3", "fd00::2"
};

// Every IPv4 and IPv6 address of every interface, loopback included, in
// getifaddrs order; empty when getifaddrs fails.
std::vector<InterfaceAddress> ListInterfaceAddresses();

// The local port a bound socket (TCP or UDP, IPv4 or IPv6) got; 0 on error.
int BoundPort(int fd);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_NET_INTERFACES_H_

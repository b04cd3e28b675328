#include "common/net_interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace trainlet {

std::vector<InterfaceAddress> ListInterfaceAddresses() {
  std::vector<InterfaceAddress> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_name == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = nullptr;
    const int family = ifa->ifa_addr->sa_family;
    if (family == AF_INET) {
      addr = &reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr;
    } else if (family == AF_INET6) {
      addr = &reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr;
    } else {
      continue;
    }
    if (inet_ntop(family, addr, text, sizeof(text)) == nullptr) continue;
    out.push_back({ifa->ifa_name, text});
  }
  freeifaddrs(list);
  return out;
}

int BoundPort(int fd) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

}  // namespace trainlet

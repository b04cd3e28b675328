#include "rendezvous/liveness_sender.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::rendezvous {

std::string HostOfTarget(absl::string_view target) {
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    if (close != absl::string_view::npos) return std::string(target.substr(1, close - 1));
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || target.find(':') != colon) return std::string(target);
  return std::string(target.substr(0, colon));
}

absl::StatusOr<std::unique_ptr<LivenessSender>> LivenessSender::Connect(absl::string_view target,
                                                                        int udp_port) {
  const std::string host = HostOfTarget(target);
  const std::string where = absl::StrCat(SafeForLog(host, 256), " UDP port ", udp_port);
  if (udp_port <= 0 || udp_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("liveness: bad UDP port ", udp_port));
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string port = absl::StrCat(udp_port);
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("liveness: cannot resolve ", where, " (", gai_strerror(rc), ")"));
  }
  std::string error = "no IPv4 or IPv6 address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      error = strerror(errno);
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      error = strerror(errno);
      close(fd);
      continue;
    }
    freeaddrinfo(res);
    return std::unique_ptr<LivenessSender>(new LivenessSender(fd, udp_port));
  }
  freeaddrinfo(res);
  return absl::UnavailableError(absl::StrCat("liveness: cannot reach ", where, ": ", error));
}

LivenessSender::~LivenessSender() { close(fd_); }

bool LivenessSender::Send(const LivenessBytes& datagram) {
  const ssize_t n = send(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(datagram.size())) return false;
  sent_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void LivenessSender::Receive(std::vector<LivenessBytes>* out, int max,
                             std::vector<std::string>* directives) {
  for (int i = 0; i < max; ++i) {
    // One byte more, so that a longer datagram shows as such and is dropped.
    uint8_t buf[kMaxDirectiveDatagramBytes + 1];
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) return;  // EAGAIN: nothing more; ECONNREFUSED (ICMP): nothing to read either.
    if (n == static_cast<ssize_t>(kLivenessDatagramBytes)) {
      LivenessBytes b;
      std::memcpy(b.data(), buf, b.size());
      out->push_back(b);
    } else if (directives != nullptr && n > static_cast<ssize_t>(kLivenessDatagramBytes) &&
               n <= static_cast<ssize_t>(kMaxDirectiveDatagramBytes)) {
      directives->emplace_back(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
    }
  }
}

}  // namespace trainlet::rendezvous

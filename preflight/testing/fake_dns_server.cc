#include "preflight/testing/fake_dns_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainlet::preflight::testing {

std::unique_ptr<FakeDnsServer> FakeDnsServer::Start() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return nullptr;
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    return nullptr;
  }
  std::unique_ptr<FakeDnsServer> s(new FakeDnsServer(fd, wake, ntohs(addr.sin_port)));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

FakeDnsServer::FakeDnsServer(int fd, int wake_fd, int port)
    : fd_(fd), wake_fd_(wake_fd), port_(port) {}

FakeDnsServer::~FakeDnsServer() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(fd_);
  close(wake_fd_);
}

void FakeDnsServer::AddA(const std::string& name, const std::string& ipv4) {
  absl::MutexLock lock(&mu_);
  a_[absl::AsciiStrToLower(name)] = ipv4;
}

void FakeDnsServer::Ignore(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ignore_.insert(absl::AsciiStrToLower(name));
}

std::string FakeDnsServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

int FakeDnsServer::queries() const {
  absl::MutexLock lock(&mu_);
  return queries_;
}

void FakeDnsServer::Loop() {
  char buf[1500];
  while (true) {
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[0].revents != 0) return;
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    const ssize_t n = recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    const std::string reply = Answer(std::string(buf, static_cast<size_t>(n)));
    if (reply.empty()) continue;
    sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

std::string FakeDnsServer::Answer(const std::string& q) {
  if (q.size() < 12) return "";
  // The question: labels, then type and class.
  size_t at = 12;
  std::string name;
  while (at < q.size() && q[at] != 0) {
    const size_t label = static_cast<unsigned char>(q[at]);
    if (label > 63 || at + 1 + label > q.size()) return "";
    if (!name.empty()) name.push_back('.');
    name.append(q, at + 1, label);
    at += 1 + label;
  }
  if (at + 5 > q.size()) return "";
  const size_t question_end = at + 5;
  const int qtype =
      (static_cast<unsigned char>(q[at + 1]) << 8) | static_cast<unsigned char>(q[at + 2]);
  name = absl::AsciiStrToLower(name);
  std::string ipv4;
  bool known = false;
  {
    absl::MutexLock lock(&mu_);
    ++queries_;
    if (ignore_.count(name) > 0) return "";
    auto it = a_.find(name);
    if (it != a_.end()) {
      known = true;
      ipv4 = it->second;
    }
  }
  const bool answer = known && qtype == 1;              // A; AAAA of a known name: no data.
  std::string r = q.substr(0, 2);                       // the id.
  r.push_back(static_cast<char>(0x81));                 // QR, RD.
  r.push_back(static_cast<char>(known ? 0x80 : 0x83));  // RA; NOERROR or NXDOMAIN.
  r.append({0, 1, 0, static_cast<char>(answer ? 1 : 0), 0, 0, 0, 0});
  r.append(q, 12, question_end - 12);
  if (answer) {
    in_addr a{};
    if (inet_pton(AF_INET, ipv4.c_str(), &a) != 1) return "";
    r.append({static_cast<char>(0xc0), 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4});
    r.append(reinterpret_cast<const char*>(&a), 4);
  }
  return r;
}

}  // namespace trainlet::preflight::testing

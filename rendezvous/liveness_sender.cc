#include "rendezvous/liveness_sender.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
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
    std::unique_ptr<LivenessSender> sender(new LivenessSender(fd, udp_port));
    sender->ready_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sender->ready_fd_ < 0 || pipe2(sender->stop_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("liveness: no descriptor for the answering thread: ", strerror(errno)));
    }
    sender->thread_ = std::thread([p = sender.get()] { p->Loop(); });
    return sender;
  }
  freeaddrinfo(res);
  return absl::UnavailableError(absl::StrCat("liveness: cannot reach ", where, ": ", error));
}

LivenessSender::~LivenessSender() {
  if (thread_.joinable()) {
    const ssize_t n = write(stop_[1], "x", 1);
    (void)n;
    thread_.join();
  }
  for (int fd : {fd_, ready_fd_, stop_[0], stop_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void LivenessSender::SetIdentity(uint32_t slot, uint64_t incarnation, const LivenessKey& key) {
  absl::MutexLock lock(&mu_);
  identity_ = Identity{slot, incarnation, key};
}

void LivenessSender::Answer(const uint8_t* data, size_t size) {
  std::optional<LivenessDatagram> probe = ParseProbe(data, size);
  if (!probe.has_value()) return;
  std::optional<Identity> me;
  {
    absl::MutexLock lock(&mu_);
    me = identity_;
  }
  // Only the coordinator's own probe, for this incarnation, under its key:
  // nothing else makes this agent send anything.
  if (!me.has_value() || !IsOwnProbe(*probe, me->slot, me->incarnation, me->key)) return;
  // Counted first: whoever reads the answer may look at the count next.
  probes_answered_.fetch_add(1);
  if (!Send(EncodeProbeAnswer(*probe, me->key))) probes_answered_.fetch_sub(1);
}

void LivenessSender::Loop() {
  pollfd polls[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
  // One byte more, so that a longer datagram shows as such and is dropped.
  uint8_t buf[kMaxDirectiveDatagramBytes + 1];
  while (true) {
    polls[0].revents = polls[1].revents = 0;
    if (poll(polls, 2, -1) < 0 && errno != EINTR) {
      TLOG(kError) << "liveness: poll: " << strerror(errno) << "; probes go unanswered";
      return;
    }
    if (polls[1].revents != 0) return;
    bool queued = false;
    // Bounded per wake-up, so that a flood cannot keep the thread from the
    // stop pipe.
    for (int i = 0, errors = 0; i < 64; ++i) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0) {
        // EAGAIN: nothing more. ECONNREFUSED (an ICMP error for an earlier
        // send: the coordinator's port is closed) is returned once: read on.
        if (errno == EAGAIN || errno == EWOULDBLOCK || ++errors > 1) break;
        continue;
      }
      const size_t size = static_cast<size_t>(n);
      if (size == kLivenessDatagramBytes && buf[5] == static_cast<uint8_t>(LivenessKind::kProbe)) {
        Answer(buf, size);
        continue;
      }
      if (size < kLivenessDatagramBytes || size > kMaxDirectiveDatagramBytes) continue;
      absl::MutexLock lock(&mu_);
      if (queue_.size() >= kMaxQueuedLivenessDatagrams) continue;  // the caller is far behind
      queue_.emplace_back(reinterpret_cast<const char*>(buf), size);
      queued = true;
    }
    if (queued) {
      const uint64_t one = 1;
      const ssize_t n = write(ready_fd_, &one, sizeof(one));
      (void)n;  // (a counter at its maximum is readable anyway)
    }
  }
}

bool LivenessSender::Send(const LivenessBytes& datagram) {
  const ssize_t n = send(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(datagram.size())) return false;
  sent_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void LivenessSender::Receive(std::vector<LivenessBytes>* out, int max,
                             std::vector<std::string>* directives) {
  // Cleared first: what the thread queues after this wakes the caller again.
  uint64_t count = 0;
  const ssize_t r = read(ready_fd_, &count, sizeof(count));
  (void)r;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < max && !queue_.empty(); ++i) {
    std::string& d = queue_.front();
    if (d.size() == kLivenessDatagramBytes) {
      LivenessBytes b;
      std::memcpy(b.data(), d.data(), b.size());
      out->push_back(b);
    } else if (directives != nullptr) {
      directives->push_back(std::move(d));
    }
    queue_.pop_front();
  }
  if (!queue_.empty()) {
    // More than `max`: readable again for the caller's next turn.
    const uint64_t one = 1;
    const ssize_t n = write(ready_fd_, &one, sizeof(one));
    (void)n;
  }
}

}  // namespace trainlet::rendezvous

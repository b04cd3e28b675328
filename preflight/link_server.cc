#include "preflight/link_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "preflight/link_wire.h"

namespace trainlet::preflight {

namespace {

constexpr size_t kScratchBytes = 256 * 1024;
constexpr int kMaxAcceptsPerWake = 16;
// After EMFILE and the like the listening socket stays readable; it is left
// alone this long instead of spinning on it.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

absl::Status Errno(absl::string_view what, int err) {
  return absl::UnavailableError(absl::StrCat("link measurer: ", what, ": ", std::strerror(err)));
}

absl::StatusOr<int> Listen(const LinkServerOptions& o) {
  int fd = o.listen_fd;
  if (fd < 0) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
    if (o.port < 0 || o.port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("link measurer: port ", o.port, " outside 0-65535"));
    }
    if (inet_pton(AF_INET, o.host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(o.port));
      len = sizeof(*v4);
    } else if (inet_pton(AF_INET6, o.host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(o.port));
      len = sizeof(*v6);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("link measurer: listen address \"",
                                                     SafeForLog(o.host, 64),
                                                     "\" is not a numeric IPv4 or IPv6 address"));
    }
    fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket", errno);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      const int err = errno;
      close(fd);
      return Errno(absl::StrCat("bind ", SafeForLog(o.host, 64), ":", o.port), err);
    }
  }
  if (listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    return Errno("listen", err);
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    const int err = errno;
    close(fd);
    return Errno("fcntl O_NONBLOCK", err);
  }
  return fd;
}

LogLimiter& RefusalLog() {
  static LogLimiter* limiter = new LogLimiter(5, absl::Seconds(60));
  return *limiter;
}

}  // namespace

struct LinkServer::Connection {
  enum class State { kHello, kFrames, kBulk, kClosing };
  int fd = -1;
  State state = State::kHello;
  absl::Time hello_deadline;
  absl::Time deadline;
  std::string peer;  // "10.1.2.3:41234", for the log.
  std::string in;    // a hello or frame being assembled.
  size_t need = kHelloFixedBytes;
  std::string out;  // what is left to write.
  uint64_t bulk_left = 0;
  int pings = 0;
};

absl::StatusOr<std::unique_ptr<LinkServer>> LinkServer::Start(LinkServerOptions options) {
  if (options.job_id.empty() || options.node_id.empty()) {
    return absl::InvalidArgumentError("link measurer: job id and node id must not be empty");
  }
  if (options.max_connections < 1 || options.max_pings < 0 || options.max_bulk_bytes == 0) {
    return absl::InvalidArgumentError(
        "link measurer: max_connections >= 1, max_pings >= 0, max_bulk_bytes >= 1");
  }
  absl::StatusOr<int> fd = Listen(options);
  if (!fd.ok()) return fd.status();
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  int port = 0;
  if (getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int err = errno;
    close(*fd);
    return Errno("eventfd", err);
  }
  std::unique_ptr<LinkServer> server(new LinkServer(std::move(options), *fd, wake, port));
  try {
    server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("link measurer: no thread: ", e.what()));
  }
  return server;
}

LinkServer::LinkServer(LinkServerOptions options, int listen_fd, int wake_fd, int port)
    : options_(std::move(options)), listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port) {}

LinkServer::~LinkServer() {
  stop_.store(true);
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // The counter is far from full; nothing else can fail here.
  }
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
  close(listen_fd_);
}

void LinkServer::SetRound(uint64_t round, uint64_t nonce) {
  absl::MutexLock lock(&mu_);
  round_ = round;
  nonce_ = nonce;
}

LinkServer::Stats LinkServer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void LinkServer::Loop() {
  Clock* clock = Clock::Monotonic();
  std::vector<std::unique_ptr<Connection>> conns;
  std::string scratch(kScratchBytes, '\0');
  absl::Time accept_paused_until = absl::InfinitePast();
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    absl::Time now = clock->Now();
    const bool accepting = now >= accept_paused_until;
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    absl::Time wake_at = accepting ? absl::InfiniteFuture() : accept_paused_until;
    for (const auto& c : conns) {
      fds.push_back({c->fd, static_cast<short>(c->out.empty() ? POLLIN : POLLOUT), 0});
      wake_at = std::min(wake_at, c->state == Connection::State::kHello
                                      ? std::min(c->hello_deadline, c->deadline)
                                      : c->deadline);
    }
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(wake_at - now + absl::Microseconds(999)), 0, 60000));
    }
    const int rc = poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      TLOG(kError) << "link measurer: poll: " << std::strerror(errno);
      break;
    }
    if (stop_.load()) break;
    now = clock->Now();
    const size_t polled = conns.size();
    if (rc > 0 && (fds[1].revents & POLLIN) != 0) {
      for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
        sockaddr_storage peer{};
        socklen_t len = sizeof(peer);
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = now + kAcceptPause;
          }
          if (errno == EINTR || errno == ECONNABORTED) continue;
          break;
        }
        {
          absl::MutexLock lock(&mu_);
          ++stats_.accepted;
        }
        if (static_cast<int>(conns.size()) >= options_.max_connections) {
          Reply busy;
          busy.status = ReplyStatus::kBusy;
          const std::string bytes = EncodeReply(busy);
          (void)!send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
          close(fd);
          absl::MutexLock lock(&mu_);
          ++stats_.refused;
          continue;
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->hello_deadline = now + options_.hello_timeout;
        c->deadline = now + options_.connection_timeout;
        char text[INET6_ADDRSTRLEN] = {};
        const void* a =
            peer.ss_family == AF_INET6
                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr)
                : &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr;
        if (inet_ntop(peer.ss_family, a, text, sizeof(text)) != nullptr) c->peer = text;
        conns.push_back(std::move(c));
      }
    }
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = *conns[i];
      bool keep = true;
      if (i < polled && fds[i + 2].revents != 0) keep = Serve(c, fds[i + 2].revents, scratch);
      if (keep && (now >= c.deadline ||
                   (c.state == Connection::State::kHello && now >= c.hello_deadline))) {
        keep = false;
        absl::MutexLock lock(&mu_);
        ++stats_.closed_early;
      }
      if (!keep) {
        close(c.fd);
        c.fd = -1;
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const auto& c) { return c->fd < 0; }),
                conns.end());
  }
  for (const auto& c : conns) close(c->fd);
}

bool LinkServer::Serve(Connection& c, short revents, std::string& scratch) {
  if (!c.out.empty()) {
    if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0 && (revents & POLLOUT) == 0) return false;
    const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.out.erase(0, static_cast<size_t>(n));
    // A refusal or the DONE frame ends the connection once written.
    return !(c.out.empty() && c.state == Connection::State::kClosing);
  }
  if ((revents & (POLLIN | POLLERR | POLLHUP)) == 0) return true;
  if (c.state == Connection::State::kBulk) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch.size(), c.bulk_left));
    const ssize_t n = recv(c.fd, scratch.data(), want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (n <= 0) {
      // The client stops at its time limit by resetting the connection:
      // what arrived until then is its measurement, not an error here.
      absl::MutexLock lock(&mu_);
      ++stats_.closed_early;
      return false;
    }
    c.bulk_left -= static_cast<uint64_t>(n);
    absl::MutexLock lock(&mu_);
    stats_.bytes_received += static_cast<uint64_t>(n);
    if (c.bulk_left == 0) {
      ++stats_.completed;
      c.out = EncodeFrame({FrameType::kDone, 0});
      c.state = Connection::State::kClosing;
    }
    return true;
  }
  if (c.state == Connection::State::kClosing) return true;  // only writing is left.
  // A hello or frame: read no further than it reaches, so that what
  // follows stays in the kernel until its turn.
  const size_t want = c.need - c.in.size();
  const size_t had = c.in.size();
  c.in.resize(c.need);
  const ssize_t n = recv(c.fd, c.in.data() + had, want, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    c.in.resize(had);
    return true;
  }
  if (n <= 0) {
    // A client that only timed the round trip hangs up between frames.
    if (c.state != Connection::State::kFrames || had != 0) {
      absl::MutexLock lock(&mu_);
      ++stats_.closed_early;
    }
    return false;
  }
  c.in.resize(had + static_cast<size_t>(n));
  return c.state == Connection::State::kHello ? OnHello(c) : OnFrame(c);
}

bool LinkServer::OnHello(Connection& c) {
  Hello hello;
  std::string error;
  Reply reply;
  reply.max_bulk_bytes = options_.max_bulk_bytes;
  const Parsed parsed = ParseHello(c.in, &hello, &c.need, &error);
  if (parsed == Parsed::kNeedMore) return true;
  {
    absl::MutexLock lock(&mu_);
    reply.round = round_;
    if (parsed == Parsed::kBad) {
      reply.status = ReplyStatus::kBadRequest;
    } else if (hello.job_id != options_.job_id) {
      reply.status = ReplyStatus::kWrongJob;
    } else if (hello.to_node != options_.node_id) {
      reply.status = ReplyStatus::kWrongNode;
    } else if (round_ == 0 || (hello.nonce != nonce_ && hello.round > round_)) {
      // Not told this round's nonce yet: the peer may try again.
      reply.status = ReplyStatus::kWrongRound;
    } else if (hello.nonce != nonce_) {
      reply.status = ReplyStatus::kWrongNonce;
    } else if (hello.round < round_) {
      reply.status = ReplyStatus::kWrongRound;  // a stale plan.
    }
    if (reply.status != ReplyStatus::kOk) ++stats_.refused;
  }
  if (reply.status != ReplyStatus::kOk) {
    reply.max_bulk_bytes = 0;
    int64_t suppressed = 0;
    if (TLOG_ENABLED(kDebug) && RefusalLog().Allow(&suppressed)) {
      TLOG(kDebug) << "link measurer: refused " << SafeForLog(c.peer, 64) << ": "
                   << ReplyStatusText(reply.status)
                   << (parsed == Parsed::kBad ? absl::StrCat(" (", error, ")") : "")
                   << SuppressedNote(suppressed);
    }
    c.state = Connection::State::kClosing;
  } else {
    c.state = Connection::State::kFrames;
    c.need = kFrameBytes;
  }
  c.in.clear();
  c.out = EncodeReply(reply);
  return true;
}

bool LinkServer::OnFrame(Connection& c) {
  if (c.in.size() < kFrameBytes) return true;
  Frame frame;
  std::string error;
  const Parsed parsed = ParseFrame(c.in, &frame, &error);
  c.in.clear();
  bool ok = parsed == Parsed::kOk;
  if (ok && frame.type == FrameType::kPing) {
    ok = ++c.pings <= options_.max_pings;
    if (ok) c.out = EncodeFrame(frame);
  } else if (ok && frame.type == FrameType::kBulk) {
    ok = frame.value > 0 && frame.value <= options_.max_bulk_bytes;
    c.state = Connection::State::kBulk;
    c.bulk_left = frame.value;
  } else {
    ok = false;  // DONE is the server's to send.
  }
  if (!ok) {
    absl::MutexLock lock(&mu_);
    ++stats_.closed_early;
  }
  return ok;
}

}  // namespace trainlet::preflight

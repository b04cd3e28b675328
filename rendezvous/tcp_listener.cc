#include "rendezvous/tcp_listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/descriptors.h"
#include "common/net_interfaces.h"

namespace trainlet::rendezvous {
namespace {

constexpr int kBacklog = 4096;
constexpr char kBindErrorPayload[] = "type.trainlet.dev/trainlet.BindError";
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(10);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(500);
constexpr absl::Duration kFullRecheck = absl::Milliseconds(100);
constexpr absl::Duration kPurgeEvery = absl::Milliseconds(50);
// At most this many connections accepted (or refused) per wake-up of one
// socket, so that one busy socket cannot starve the others or Stop().
constexpr int kAcceptBatch = 256;

absl::Status BindError(int err, const std::string& where) {
  std::string what;
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  bool in_use = false;
  switch (err) {
    case EADDRINUSE:
      what =
          "the port is in use (another process listens there); pick another port or stop the "
          "process holding it";
      in_use = true;
      break;
    case EADDRNOTAVAIL:
      code = absl::StatusCode::kInvalidArgument;
      what =
          "that is not an address of this machine; bind to one of its addresses, or to 0.0.0.0 "
          "for every address";
      break;
    case EAFNOSUPPORT:
      code = absl::StatusCode::kInvalidArgument;
      what = "this machine does not support that address family (IPv6 disabled?)";
      break;
    case EMFILE:
    case ENFILE:
      code = absl::StatusCode::kResourceExhausted;
      what = absl::StrCat("out of file descriptors (the open-file limit is ", DescriptorLimit(),
                          "); raise ulimit -n");
      break;
    case EACCES:
    case EPERM:
      code = absl::StatusCode::kPermissionDenied;
      what = "permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE";
      break;
    default:
      what = strerror(err);
  }
  absl::Status s(code, absl::StrCat("cannot listen on ", where, ": ", what));
  if (in_use) s.SetPayload(kBindErrorPayload, absl::Cord("EADDRINUSE"));
  return s;
}

// One socket of BindSocket: bound, not yet listening or read.
int BindOne(const BindAddress& a, int socktype, bool dual_stack,
            const std::function<void(int fd)>& configure) {
  int fd = socket(a.family(), socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  configure(fd);
  if (a.family() == AF_INET6) {
    const int v6only = dual_stack ? 0 : 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) != 0) {
    const int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

void BindAddress::SetPort(int port) {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

BindAddress WildcardAddress(int family) {
  BindAddress a;
  if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_any;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&a.addr);
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

int BindSocket(BindAddress a, int port, int socktype, bool wildcard,
               const std::function<void(int fd)>& configure) {
  a.SetPort(port);
  int fd = BindOne(a, socktype, /*dual_stack=*/wildcard, configure);
  if (fd == -EAFNOSUPPORT && wildcard) {
    BindAddress v4 = WildcardAddress(AF_INET);
    v4.SetPort(port);
    fd = BindOne(v4, socktype, /*dual_stack=*/false, configure);
  }
  return fd;
}

absl::StatusOr<std::vector<BindAddress>> ResolveBindAddresses(const std::string& host, int socktype,
                                                              absl::string_view action) {
  std::vector<BindAddress> out;
  if (IsWildcardHost(host)) {
    out.push_back(WildcardAddress(AF_INET6));  // dual stack; IPv4 if IPv6 is missing.
    return out;
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(action, ": ", SafeForLog(host), " does not resolve (", gai_strerror(rc), ")"));
  }
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    BindAddress a;
    memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    bool dup = false;
    for (const BindAddress& b : out)
      dup = dup || (b.len == a.len && memcmp(&b.addr, &a.addr, a.len) == 0);
    if (!dup) out.push_back(a);
  }
  freeaddrinfo(res);
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(action, ": no IPv4 or IPv6 address for it"));
  }
  return out;
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ":")) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

bool IsAddressInUse(const absl::Status& status) {
  return status.GetPayload(kBindErrorPayload).has_value();
}

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Bind(
    const std::vector<ListenAddress>& addresses) {
  std::unique_ptr<TcpListener> l(new TcpListener());
  for (const ListenAddress& la : addresses) {
    const std::string where = FormatHostPort(SafeForLog(la.host, 64), la.port);
    if (la.port < 0 || la.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", where, ": bad port"));
    }
    absl::StatusOr<std::vector<BindAddress>> resolved =
        ResolveBindAddresses(la.host, SOCK_STREAM, absl::StrCat("cannot listen on ", where));
    if (!resolved.ok()) return resolved.status();
    int port = la.port;
    absl::Status first_error;
    bool bound_any = false;
    const bool wildcard = IsWildcardHost(la.host);
    for (const BindAddress& a : *resolved) {
      int fd = BindSocket(a, port, SOCK_STREAM, wildcard, [](int fd) {
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      });
      if (fd >= 0 && listen(fd, kBacklog) != 0) {
        const int err = errno;
        close(fd);
        fd = -err;
      }
      if (fd < 0) {
        // A name may resolve to an address this host cannot use (::1 with
        // IPv6 off): one usable address is enough. Anything else (a taken
        // port above all) fails the whole listener.
        if (-fd != EADDRNOTAVAIL && -fd != EAFNOSUPPORT) return BindError(-fd, where);
        if (first_error.ok()) first_error = BindError(-fd, where);
        continue;
      }
      if (port == 0) port = BoundPort(fd);
      l->sockets_.push_back({fd, FormatHostPort(SafeForLog(la.host, 64), port)});
      bound_any = true;
    }
    if (!bound_any) return first_error.ok() ? BindError(EADDRNOTAVAIL, where) : first_error;
    l->ports_.push_back(port);
  }
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return BindError(errno, "an eventfd");
  return l;
}

TcpListener::~TcpListener() { Stop(); }

void TcpListener::Start(Options options) {
  options_ = std::move(options);
  descriptor_limit_ = DescriptorLimit();
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void TcpListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (started_) {
    stop_.store(true);
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) {
      // The eventfd cannot overflow here; the loop also rechecks stop_.
    }
    thread_.join();
  }
  for (Socket& s : sockets_) close(s.fd);
  sockets_.clear();
  if (reserve_fd_ >= 0) close(reserve_fd_);
  reserve_fd_ = -1;
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

TcpListener::Stats TcpListener::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

void TcpListener::Loop() {
  std::vector<pollfd> pfds(sockets_.size() + 1);
  while (!stop_.load()) {
    int timeout_ms = -1;
    if (state_ == State::kExhausted) {
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(backoff_));
    } else if (state_ == State::kFull) {
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(kFullRecheck));
    }
    pfds[0] = {wake_fd_, POLLIN, 0};
    for (size_t i = 0; i < sockets_.size(); ++i) {
      // While backing off, leave waiting connections in the backlog.
      pfds[i + 1] = {sockets_[i].fd, static_cast<short>(state_ == State::kExhausted ? 0 : POLLIN),
                     0};
    }
    if (poll(pfds.data(), pfds.size(), timeout_ms) < 0 && errno != EINTR) {
      TLOG(kError) << options_.name << ": poll failed: " << strerror(errno);
      return;
    }
    if (stop_.load()) break;
    if (state_ == State::kExhausted) {
      if (!DescriptorFree()) {
        backoff_ = std::min(2 * backoff_, kMaxBackoff);
        continue;
      }
      SetState(State::kAccepting, "");
    }
    if (state_ == State::kFull) {
      Purge(/*force=*/true);
      if (static_cast<int>(live_.size()) < options_.max_connections) {
        SetState(State::kAccepting, "");
      }
    }
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if ((pfds[i + 1].revents & POLLIN) == 0) continue;
      if (!AcceptAll(sockets_[i])) break;
    }
  }
}

bool TcpListener::AcceptAll(const Socket& s) {
  for (int i = 0; i < kAcceptBatch; ++i) {
    const int fd = accept4(s.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      switch (err) {
        case EAGAIN:
#if EAGAIN != EWOULDBLOCK
        case EWOULDBLOCK:
#endif
          return true;
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
        case EPERM:  // a firewall rule refused it.
        case ENETDOWN:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
          continue;  // that connection's problem, not the listener's.
        case EMFILE:
        case ENFILE:
          // The state first: whoever sees a refusal counted also sees that
          // the listener cannot accept.
          SetState(State::kExhausted, absl::StrCat("out of file descriptors (", strerror(err),
                                                   "; the limit is ", descriptor_limit_, ")"));
          RefuseWaiting(s);
          return false;
        default:  // ENOBUFS, ENOMEM, ...: back off and try again.
          SetState(State::kExhausted, strerror(err));
          return false;
      }
    }
    if (fd >= descriptor_limit_ - kDescriptorHeadroom) {
      // State, count, then close (as below).
      SetState(State::kExhausted,
               absl::StrCat("the process is within ", kDescriptorHeadroom,
                            " descriptors of its limit (", descriptor_limit_, ")"));
      {
        absl::MutexLock lock(&stats_mu_);
        ++stats_.refused_exhausted;
      }
      close(fd);
      return false;
    }
    if (static_cast<int>(live_.size()) >= options_.max_connections) Purge(/*force=*/false);
    if (static_cast<int>(live_.size()) >= options_.max_connections) {
      // State, count, then close: whoever sees the connection closed also
      // sees it counted and the listener not accepting.
      SetState(State::kFull,
               absl::StrCat(options_.max_connections, " connections are open, the most allowed"));
      {
        absl::MutexLock lock(&stats_mu_);
        ++stats_.refused_full;
      }
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct stat st;
    if (fstat(fd, &st) == 0) live_[fd] = {st.st_dev, st.st_ino};
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.accepted;
      stats_.live = static_cast<int>(live_.size());
    }
    options_.on_connection(fd, s.fd);
  }
  return true;
}

void TcpListener::RefuseWaiting(const Socket& s) {
  if (reserve_fd_ >= 0) close(reserve_fd_);
  reserve_fd_ = -1;
  for (int i = 0; i < kAcceptBatch; ++i) {
    const int fd = accept4(s.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) break;
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.refused_exhausted;
    }
    close(fd);
  }
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

bool TcpListener::DescriptorFree() {
  if (reserve_fd_ < 0) reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (reserve_fd_ < 0) return false;
  const int probe = fcntl(reserve_fd_, F_DUPFD_CLOEXEC, 0);
  if (probe < 0) return false;
  close(probe);
  // Descriptors are handed out lowest first: when the lowest free one is
  // this high, at most the headroom is left.
  return probe < descriptor_limit_ - kDescriptorHeadroom;
}

void TcpListener::Purge(bool force) {
  const absl::Time now = Clock::Monotonic()->Now();
  if (!force && now - last_purge_ < kPurgeEvery) return;
  last_purge_ = now;
  for (auto it = live_.begin(); it != live_.end();) {
    struct stat st;
    const bool open = fstat(it->first, &st) == 0 && st.st_dev == it->second.first &&
                      st.st_ino == it->second.second;
    it = open ? std::next(it) : live_.erase(it);
  }
  absl::MutexLock lock(&stats_mu_);
  stats_.live = static_cast<int>(live_.size());
}

void TcpListener::SetState(State state, absl::string_view why) {
  if (state == State::kExhausted && state_ != State::kExhausted) backoff_ = kFirstBackoff;
  if (state == State::kAccepting) backoff_ = absl::ZeroDuration();
  state_ = state;
  const bool accepting = state == State::kAccepting;
  if (accepting_.exchange(accepting) == accepting) return;
  int64_t suppressed = 0;
  if (log_limiter_.Allow(&suppressed)) {
    const std::string where = sockets_.empty() ? std::string() : sockets_[0].address;
    if (accepting) {
      Stats st = stats();
      TLOG(kInfo) << options_.name << ": accepting connections on " << where << " again ("
                  << st.refused_full + st.refused_exhausted << " refused so far)"
                  << SuppressedNote(suppressed);
    } else {
      TLOG(kWarning) << options_.name << ": cannot accept connections on " << where << ": " << why
                     << "; refusing new connections until it can" << SuppressedNote(suppressed);
    }
  }
  if (options_.on_accepting_change) options_.on_accepting_change(accepting);
}

}  // namespace trainlet::rendezvous

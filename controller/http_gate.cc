#include "controller/http_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/logging.h"

namespace trainlet::controller {
namespace {

absl::Time Now() { return Clock::Monotonic()->Now(); }

// OpenSSL's first queued error as text; the queue is left empty (it is per
// thread and shared with gRPC).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

void AddressOf(const sockaddr_storage& ss, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    *port = ntohs(a->sin6_port);
  } else {
    *port = 0;
  }
  *ip = text;
}

// Milliseconds to wait for `wait`, never past `deadline`; 0 when it passed.
int PollMillis(absl::Duration wait, absl::Time deadline) {
  const absl::Duration left = std::min(wait, deadline - Now());
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 60'000));
}

// Where the request head ends (after its blank line), or npos.
size_t HeadEnd(absl::string_view buf) {
  const size_t crlf = buf.find("\r\n\r\n");
  const size_t lf = buf.find("\n\n");
  if (crlf == absl::string_view::npos && lf == absl::string_view::npos) return crlf;
  return crlf < lf ? crlf + 4 : lf + 2;
}

}  // namespace

// ---- TLS.

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(const rendezvous::TlsConfig& tls,
                                                               bool require_client_certificate) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("controller: TLS for --http: ", OpenSslError()));
  }
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  auto fail = [](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("controller: TLS for the views (--http-tls): ", what, ": ", OpenSslError()));
  };
  {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size())), &BIO_free);
    X509* leaf = bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr;
    if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
      X509_free(leaf);
      return fail("the certificate (--tls-cert)");
    }
    X509_free(leaf);
    // The rest of the chain, sent to clients after the leaf.
    while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
        X509_free(extra);
        return fail("the certificate chain (--tls-cert)");
      }
    }
    ERR_clear_error();  // the end of the input reads as an error.
  }
  {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(tls.key_pem.data(), static_cast<int>(tls.key_pem.size())), &BIO_free);
    EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr;
    const bool ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
                    SSL_CTX_check_private_key(ctx) == 1;
    EVP_PKEY_free(key);
    if (!ok) return fail("the private key (--tls-key)");
  }
  if (require_client_certificate) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(tls.ca_pem.data(), static_cast<int>(tls.ca_pem.size())), &BIO_free);
    int added = 0;
    while (X509* ca = bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr) {
      if (X509_STORE_add_cert(store, ca) == 1) ++added;
      X509_free(ca);
    }
    ERR_clear_error();
    if (added == 0) return fail("no CA certificate (--tls-ca)");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    SSL_CTX_set_verify_depth(ctx, 5);
  }
  ERR_clear_error();
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

// ---- A request handed to a worker.

GateConnection::GateConnection(int fd, SSL* ssl, std::string buffered)
    : fd_(fd), ssl_(ssl), buffered_(std::move(buffered)) {}

GateConnection::~GateConnection() {
  if (ssl_ != nullptr) {
    SSL_shutdown(ssl_);  // non-blocking: one try at close_notify.
    SSL_free(ssl_);
    ERR_clear_error();
  }
  close(fd_);
}

bool GateConnection::Wait(short events, absl::Duration wait) const {
  pollfd p{fd_, events, 0};
  for (;;) {
    const int r = poll(&p, 1, PollMillis(wait, deadline_));
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

bool GateConnection::WaitReadable(absl::Duration) const {
  // Never waits: a read past the request returns 0 at once.
  return true;
}

bool GateConnection::WaitWritable(absl::Duration wait) const { return Wait(POLLOUT, wait); }

ssize_t GateConnection::Read(char* data, size_t size) {
  // Only the bytes the gate read: it handed the request on as whole, so a
  // parser that wants more (httplib reading a length the gate read apart,
  // such as the first of two Content-Length headers) sees the end of the
  // input and answers 400, instead of holding a worker on the socket.
  const size_t n = std::min(size, buffered_.size() - consumed_);
  std::memcpy(data, buffered_.data() + consumed_, n);
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t GateConnection::Write(const char* data, size_t size) {
  if (size == 0) return 0;
  const absl::Duration forever = absl::InfiniteDuration();
  for (;;) {
    if (ssl_ != nullptr) {
      const int n = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 30)));
      if (n > 0) return n;
      const int e = SSL_get_error(ssl_, n);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_WRITE && Wait(POLLOUT, forever)) continue;
      if (e == SSL_ERROR_WANT_READ && Wait(POLLIN, forever)) continue;
      return -1;
    }
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if ((errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLOUT, forever)) continue;
    return -1;
  }
}

void GateConnection::Abort() { shutdown(fd_, SHUT_RDWR); }

void GateConnection::PeerAddress(std::string* ip, int* port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) ss.ss_family = AF_UNSPEC;
  AddressOf(ss, ip, port);
}

void GateConnection::LocalAddress(std::string* ip, int* port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) ss.ss_family = AF_UNSPEC;
  AddressOf(ss, ip, port);
}

// ---- The gate.

struct HttpGate::Pending {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaking = false;
  std::string peer;
  std::string buf;
  size_t want = 0;  // bytes the request needs, once its head is known; 0 before.
  uint32_t events = 0;
  absl::Time deadline;
};

HttpGate::HttpGate(Options options, OnRequest on_request)
    : options_(options), on_request_(std::move(on_request)) {}

absl::StatusOr<std::unique_ptr<HttpGate>> HttpGate::Start(Options options, OnRequest on_request) {
  std::unique_ptr<HttpGate> gate(new HttpGate(options, std::move(on_request)));
  gate->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  gate->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (gate->epoll_fd_ < 0 || gate->wake_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("controller http: cannot create its epoll set: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up descriptor.
  epoll_ctl(gate->epoll_fd_, EPOLL_CTL_ADD, gate->wake_fd_, &ev);
  gate->thread_ = std::thread([g = gate.get()] { g->Loop(); });
  return gate;
}

HttpGate::~HttpGate() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpGate::Add(int fd) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      incoming_.push_back(fd);
      fd = -1;
    }
  }
  if (fd >= 0) {
    close(fd);
    return;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void HttpGate::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

HttpGate::Stats HttpGate::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void HttpGate::Loop() {
  std::vector<epoll_event> events(64);
  for (;;) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& p : pending_) next = std::min(next, p->deadline);
    const int timeout = next == absl::InfiniteFuture() ? 1000 : PollMillis(absl::Seconds(1), next);
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
    std::vector<int> fresh;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      fresh.swap(incoming_);
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t drained;
        (void)!read(wake_fd_, &drained, sizeof(drained));
        continue;
      }
      Pending* p = static_cast<Pending*>(events[i].data.ptr);
      // Closed earlier in this batch? (Its entry is gone; skip stale events.)
      if (std::none_of(pending_.begin(), pending_.end(),
                       [p](const auto& q) { return q.get() == p; })) {
        continue;
      }
      Advance(p);
    }
    for (int fd : fresh) Register(fd);
    const absl::Time now = Now();
    for (size_t i = 0; i < pending_.size();) {
      Pending* p = pending_[i].get();
      if (p->deadline <= now) {
        {
          absl::MutexLock lock(&mu_);
          ++stats_.timed_out;
        }
        Answer(p, p->handshaking ? "" : "408 Request Timeout", nullptr);
        continue;  // pending_[i] is now another connection.
      }
      ++i;
    }
    absl::MutexLock lock(&mu_);
    stats_.pending = static_cast<int>(pending_.size());
  }
  while (!pending_.empty()) Close(pending_.back().get());
  absl::MutexLock lock(&mu_);
  for (int fd : incoming_) close(fd);
  incoming_.clear();
  stats_.pending = 0;
}

void HttpGate::Register(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  std::string ip;
  int port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) AddressOf(ss, &ip, &port);
  auto peer = std::find_if(per_peer_.begin(), per_peer_.end(),
                           [&](const auto& e) { return e.first == ip; });
  const int from_peer = peer == per_peer_.end() ? 0 : peer->second;
  if (static_cast<int>(pending_.size()) >= options_.max_pending ||
      from_peer >= options_.max_pending_per_peer) {
    {
      // Counted before the peer can see its connection end.
      absl::MutexLock lock(&mu_);
      ++stats_.refused;
    }
    close(fd);
    return;
  }
  auto p = std::make_unique<Pending>();
  p->fd = fd;
  p->peer = ip;
  p->deadline = Now() + options_.head_timeout;
  if (options_.tls != nullptr) {
    p->ssl = SSL_new(options_.tls);
    if (p->ssl == nullptr || SSL_set_fd(p->ssl, fd) != 1) {
      ERR_clear_error();
      if (p->ssl != nullptr) SSL_free(p->ssl);
      {
        absl::MutexLock lock(&mu_);
        ++stats_.bad;
      }
      close(fd);
      return;
    }
    SSL_set_accept_state(p->ssl);
    p->handshaking = true;
  }
  if (peer == per_peer_.end()) {
    per_peer_.emplace_back(ip, 1);
  } else {
    ++peer->second;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = p.get();
  p->events = ev.events;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    pending_.push_back(std::move(p));
    Close(pending_.back().get());
    return;
  }
  pending_.push_back(std::move(p));
}

void HttpGate::Want(Pending* p, uint32_t events) {
  events |= EPOLLRDHUP;
  if (p->events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = p;
  p->events = events;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, p->fd, &ev);
}

void HttpGate::Advance(Pending* p) {
  if (p->handshaking) {
    const int r = SSL_accept(p->ssl);
    if (r != 1) {
      const int e = SSL_get_error(p->ssl, r);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_READ) return Want(p, EPOLLIN);
      if (e == SSL_ERROR_WANT_WRITE) return Want(p, EPOLLOUT);
      // Anyone can fail a handshake: debug level only.
      TLOG(kDebug) << "controller http: TLS handshake with " << p->peer << " failed";
      {
        absl::MutexLock lock(&mu_);
        ++stats_.bad;
      }
      return Close(p);
    }
    p->handshaking = false;
  }
  Want(p, EPOLLIN);
  const size_t cap = options_.max_head_bytes + options_.max_body_bytes;
  char chunk[4096];
  for (;;) {
    const size_t room = cap - std::min(cap, p->buf.size());
    if (room == 0) break;
    const size_t ask = std::min(room, sizeof(chunk));
    ssize_t n;
    if (p->ssl != nullptr) {
      n = SSL_read(p->ssl, chunk, static_cast<int>(ask));
      if (n <= 0) {
        const int e = SSL_get_error(p->ssl, static_cast<int>(n));
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_WANT_WRITE) {
          Want(p, EPOLLOUT);
          break;
        }
        return Close(p);  // closed or broken before a whole request.
      }
    } else {
      n = recv(p->fd, chunk, ask, 0);
      if (n == 0) return Close(p);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return Close(p);
      }
    }
    p->buf.append(chunk, static_cast<size_t>(n));
  }

  if (p->want == 0) {
    const size_t end = HeadEnd(p->buf);
    if (end == std::string::npos) {
      if (p->buf.size() >= options_.max_head_bytes) {
        return Answer(p, "431 Request Header Fields Too Large", &Stats::bad);
      }
      return;  // more to come.
    }
    if (end > options_.max_head_bytes) {
      return Answer(p, "431 Request Header Fields Too Large", &Stats::bad);
    }
    // What follows the head: its Content-Length (the views read no body, but
    // httplib reads one before answering 405 or 413).
    uint64_t body = 0;
    for (absl::string_view line : absl::StrSplit(absl::string_view(p->buf).substr(0, end), '\n')) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
        return Answer(p, "411 Length Required", &Stats::bad);
      }
      if (absl::EqualsIgnoreCase(name, "content-length")) {
        if (!absl::SimpleAtoi(value, &body)) return Answer(p, "400 Bad Request", &Stats::bad);
        if (body > options_.max_body_bytes) {
          return Answer(p, "413 Payload Too Large", &Stats::bad);
        }
      }
    }
    p->want = end + body;
  }
  if (p->buf.size() < p->want) return;  // the body is on its way.

  // Whole: hand it on, out of the gate's set.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p->fd, nullptr);
  auto conn = std::make_unique<GateConnection>(p->fd, p->ssl, std::move(p->buf));
  p->fd = -1;
  p->ssl = nullptr;
  Close(p);
  std::unique_ptr<GateConnection> back = on_request_(std::move(conn));
  absl::MutexLock lock(&mu_);
  if (back == nullptr) {
    ++stats_.handed;
    return;
  }
  ++stats_.busy;
  static constexpr char kBusy[] =
      "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
      "Content-Length: 0\r\n\r\n";
  back->set_deadline(Now());  // one try, no wait.
  back->Write(kBusy, sizeof(kBusy) - 1);
}

void HttpGate::Answer(Pending* p, absl::string_view status_line, int64_t Stats::*counter) {
  if (counter != nullptr) {
    absl::MutexLock lock(&mu_);
    ++(stats_.*counter);
  }
  if (!status_line.empty() && !p->handshaking) {
    const std::string answer = absl::StrCat("HTTP/1.1 ", status_line,
                                            "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    // One non-blocking try: a client that does not read it loses it.
    if (p->ssl != nullptr) {
      SSL_write(p->ssl, answer.data(), static_cast<int>(answer.size()));
      ERR_clear_error();
    } else {
      (void)!send(p->fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  Close(p);
}

void HttpGate::Close(Pending* p) {
  if (p->fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p->fd, nullptr);
  if (p->ssl != nullptr) {
    SSL_free(p->ssl);
    ERR_clear_error();
  }
  if (p->fd >= 0) close(p->fd);
  auto peer = std::find_if(per_peer_.begin(), per_peer_.end(),
                           [&](const auto& e) { return e.first == p->peer; });
  if (peer != per_peer_.end() && --peer->second <= 0) per_peer_.erase(peer);
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [p](const auto& q) { return q.get() == p; });
  if (it != pending_.end()) {
    std::swap(*it, pending_.back());
    pending_.pop_back();
  }
}

}  // namespace trainlet::controller

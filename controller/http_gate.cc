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
#include <utility>

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

GateConnection::GateConnection(int fd, SSL* ssl, std::string request)
    : fd_(fd), ssl_(ssl), request_(std::move(request)) {}

GateConnection::~GateConnection() {
  if (ssl_ != nullptr) {
    SSL_free(ssl_);
    ERR_clear_error();
  }
  if (fd_ >= 0) close(fd_);
}

ssize_t GateConnection::Read(char* data, size_t size) {
  // Only the bytes the gate read: it handed the request on as whole, so a
  // parser that wants more (httplib reading a length the gate read apart,
  // such as the first of two Content-Length headers) sees the end of the
  // input and answers 400, instead of holding a worker on the socket.
  const size_t n = std::min(size, request_.size() - consumed_);
  std::memcpy(data, request_.data() + consumed_, n);
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

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

struct HttpGate::Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaking = false;
  bool sending = false;  // READING, or SENDING `buf` from `sent` on.
  std::string peer;
  std::string buf;
  size_t want = 0;  // READING: bytes the request needs, once its head is known; 0 before.
  size_t sent = 0;  // SENDING: bytes of buf written.
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

void HttpGate::Send(std::unique_ptr<GateConnection> conn) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // closed here, unanswered.
    answers_.push_back(std::move(conn));
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
    for (const auto& c : conns_) next = std::min(next, c->deadline);
    const int timeout = next == absl::InfiniteFuture() ? 1000 : PollMillis(absl::Seconds(1), next);
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
    std::vector<int> fresh;
    std::vector<std::unique_ptr<GateConnection>> answers;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      fresh.swap(incoming_);
      answers.swap(answers_);
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t drained;
        (void)!read(wake_fd_, &drained, sizeof(drained));
        continue;
      }
      Conn* c = static_cast<Conn*>(events[i].data.ptr);
      // Closed earlier in this batch? (Its entry is gone; skip stale events.)
      if (std::none_of(conns_.begin(), conns_.end(), [c](const auto& q) { return q.get() == c; })) {
        continue;
      }
      if (c->sending) {
        Flush(c);
      } else {
        Advance(c);
      }
    }
    for (auto& answer : answers) StartSending(std::move(answer));
    for (int fd : fresh) Register(fd);
    const absl::Time now = Now();
    for (size_t i = 0; i < conns_.size();) {
      Conn* c = conns_[i].get();
      if (c->deadline > now) {
        ++i;
        continue;
      }
      if (c->sending) {
        // The client did not read its answer in time: cut.
        Close(c, &Stats::dropped);
      } else {
        {
          absl::MutexLock lock(&mu_);
          ++stats_.timed_out;
        }
        Answer(c, c->handshaking ? "" : "408 Request Timeout", nullptr);
      }
      // conns_[i] is now another connection.
    }
    absl::MutexLock lock(&mu_);
    stats_.pending = reading_;
    stats_.sending = sending_;
  }
  while (!conns_.empty()) Close(conns_.back().get());
  absl::MutexLock lock(&mu_);
  for (int fd : incoming_) close(fd);
  incoming_.clear();
  answers_.clear();  // each closes its connection.
  stats_.pending = 0;
  stats_.sending = 0;
}

HttpGate::Conn* HttpGate::Oldest(bool sending) const {
  Conn* oldest = nullptr;
  for (const auto& c : conns_) {
    if (c->sending == sending && (oldest == nullptr || c->deadline < oldest->deadline)) {
      oldest = c.get();
    }
  }
  return oldest;
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
  if (from_peer >= options_.max_pending_per_peer) {
    {
      // Counted before the peer can see its connection end.
      absl::MutexLock lock(&mu_);
      ++stats_.refused;
    }
    close(fd);
    return;
  }
  // Full: the one that has been sending its request longest makes room.
  // Refusing the new one instead let 9 addresses of 32 slow clients each
  // shut everyone else out; now a slow client must be younger than every
  // other to stay, and a request sent at once is read in milliseconds.
  while (reading_ >= options_.max_pending) {
    Conn* oldest = Oldest(/*sending=*/false);
    if (oldest == nullptr) break;
    Close(oldest, &Stats::evicted);
    // Close may have erased `peer`'s entry: look it up again below.
  }
  peer = std::find_if(per_peer_.begin(), per_peer_.end(),
                      [&](const auto& e) { return e.first == ip; });
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->peer = ip;
  c->deadline = Now() + options_.head_timeout;
  if (options_.tls != nullptr) {
    c->ssl = SSL_new(options_.tls);
    if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
      ERR_clear_error();
      if (c->ssl != nullptr) SSL_free(c->ssl);
      {
        absl::MutexLock lock(&mu_);
        ++stats_.bad;
      }
      close(fd);
      return;
    }
    SSL_set_accept_state(c->ssl);
    c->handshaking = true;
  }
  if (peer == per_peer_.end()) {
    per_peer_.emplace_back(ip, 1);
  } else {
    ++peer->second;
  }
  ++reading_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = c.get();
  c->events = ev.events;
  conns_.push_back(std::move(c));
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) Close(conns_.back().get());
}

void HttpGate::Want(Conn* c, uint32_t events) {
  if (c->events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  c->events = events;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
}

void HttpGate::Advance(Conn* c) {
  if (c->handshaking) {
    const int r = SSL_accept(c->ssl);
    if (r != 1) {
      const int e = SSL_get_error(c->ssl, r);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_READ) return Want(c, EPOLLIN | EPOLLRDHUP);
      if (e == SSL_ERROR_WANT_WRITE) return Want(c, EPOLLOUT | EPOLLRDHUP);
      // Anyone can fail a handshake: debug level only.
      TLOG(kDebug) << "controller http: TLS handshake with " << c->peer << " failed";
      return Close(c, &Stats::bad);
    }
    c->handshaking = false;
  }
  Want(c, EPOLLIN | EPOLLRDHUP);
  const size_t cap = options_.max_head_bytes + options_.max_body_bytes;
  char chunk[4096];
  for (;;) {
    const size_t room = cap - std::min(cap, c->buf.size());
    if (room == 0) break;
    const size_t ask = std::min(room, sizeof(chunk));
    ssize_t n;
    if (c->ssl != nullptr) {
      n = SSL_read(c->ssl, chunk, static_cast<int>(ask));
      if (n <= 0) {
        const int e = SSL_get_error(c->ssl, static_cast<int>(n));
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_WANT_WRITE) {
          Want(c, EPOLLOUT | EPOLLRDHUP);
          break;
        }
        return Close(c);  // closed or broken before a whole request.
      }
    } else {
      n = recv(c->fd, chunk, ask, 0);
      if (n == 0) return Close(c);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return Close(c);
      }
    }
    c->buf.append(chunk, static_cast<size_t>(n));
  }

  if (c->want == 0) {
    const size_t end = HeadEnd(c->buf);
    if (end == std::string::npos) {
      if (c->buf.size() >= options_.max_head_bytes) {
        return Answer(c, "431 Request Header Fields Too Large", &Stats::bad);
      }
      return;  // more to come.
    }
    if (end > options_.max_head_bytes) {
      return Answer(c, "431 Request Header Fields Too Large", &Stats::bad);
    }
    // What follows the head: its Content-Length (the views read no body, but
    // httplib reads one before answering 405 or 413).
    uint64_t body = 0;
    for (absl::string_view line : absl::StrSplit(absl::string_view(c->buf).substr(0, end), '\n')) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
        return Answer(c, "411 Length Required", &Stats::bad);
      }
      if (absl::EqualsIgnoreCase(name, "content-length")) {
        if (!absl::SimpleAtoi(value, &body)) return Answer(c, "400 Bad Request", &Stats::bad);
        if (body > options_.max_body_bytes) {
          return Answer(c, "413 Payload Too Large", &Stats::bad);
        }
      }
    }
    c->want = end + body;
  }
  if (c->buf.size() < c->want) return;  // the body is on its way.

  // Whole: hand it on, out of the gate's set.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  auto conn = std::make_unique<GateConnection>(c->fd, c->ssl, std::move(c->buf));
  c->fd = -1;
  c->ssl = nullptr;
  Close(c);
  std::unique_ptr<GateConnection> back = on_request_(std::move(conn));
  if (back == nullptr) {
    absl::MutexLock lock(&mu_);
    ++stats_.handed;
    return;
  }
  // No room: one try at a 503 (a client that does not read it loses it).
  static constexpr char kBusy[] =
      "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
      "Content-Length: 0\r\n\r\n";
  if (back->ssl_ != nullptr) {
    SSL_write(back->ssl_, kBusy, sizeof(kBusy) - 1);
    ERR_clear_error();
  } else {
    (void)!send(back->fd_, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.busy;
}

void HttpGate::StartSending(std::unique_ptr<GateConnection> conn) {
  auto c = std::make_unique<Conn>();
  c->fd = std::exchange(conn->fd_, -1);
  c->ssl = std::exchange(conn->ssl_, nullptr);
  c->buf = std::move(conn->answer_);
  c->sending = true;
  c->deadline = Now() + options_.answer_timeout;
  conn.reset();
  ++sending_;
  sending_bytes_ += c->buf.size();
  Conn* mine = c.get();
  conns_.push_back(std::move(c));
  // Most answers fit in the socket's buffer: written and closed here.
  Flush(mine);
  if (std::none_of(conns_.begin(), conns_.end(),
                   [mine](const auto& q) { return q.get() == mine; })) {
    return;
  }
  // What is left waits for the client; over a cap, the oldest answers
  // waiting are cut first (a client that reads is done in well under the
  // answer timeout, so the oldest are the ones that do not read).
  while (sending_ > options_.max_sending || sending_bytes_ > options_.max_sending_bytes) {
    Conn* oldest = Oldest(/*sending=*/true);
    if (oldest == nullptr || oldest == mine) break;
    Close(oldest, &Stats::dropped);
  }
  epoll_event ev{};
  ev.events = mine->events;
  ev.data.ptr = mine;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, mine->fd, &ev) != 0) Close(mine, &Stats::dropped);
}

void HttpGate::Flush(Conn* c) {
  while (c->sent < c->buf.size()) {
    const size_t left = c->buf.size() - c->sent;
    const char* data = c->buf.data() + c->sent;
    ssize_t n;
    if (c->ssl != nullptr) {
      n = SSL_write(c->ssl, data, static_cast<int>(std::min<size_t>(left, 1 << 30)));
      if (n <= 0) {
        const int e = SSL_get_error(c->ssl, static_cast<int>(n));
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_WRITE) return Want(c, EPOLLOUT);
        if (e == SSL_ERROR_WANT_READ) return Want(c, EPOLLIN);
        return Close(c, &Stats::dropped);
      }
    } else {
      n = send(c->fd, data, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Want(c, EPOLLOUT);
        return Close(c, &Stats::dropped);
      }
    }
    c->sent += static_cast<size_t>(n);
    sending_bytes_ -= static_cast<size_t>(n);
  }
  if (c->ssl != nullptr) {
    SSL_shutdown(c->ssl);  // one try at close_notify.
    ERR_clear_error();
  }
  Close(c, &Stats::sent);
}

void HttpGate::Answer(Conn* c, absl::string_view status_line, int64_t Stats::*counter) {
  if (!status_line.empty() && !c->handshaking) {
    const std::string answer = absl::StrCat("HTTP/1.1 ", status_line,
                                            "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    // One non-blocking try: a client that does not read it loses it.
    if (c->ssl != nullptr) {
      SSL_write(c->ssl, answer.data(), static_cast<int>(answer.size()));
      ERR_clear_error();
    } else {
      (void)!send(c->fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  Close(c, counter);
}

void HttpGate::Close(Conn* c, int64_t Stats::*counter) {
  if (counter != nullptr) {
    absl::MutexLock lock(&mu_);
    ++(stats_.*counter);
  }
  if (c->fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  if (c->ssl != nullptr) {
    SSL_free(c->ssl);
    ERR_clear_error();
  }
  if (c->fd >= 0) close(c->fd);
  if (c->sending) {
    --sending_;
    sending_bytes_ -= c->buf.size() - c->sent;
  } else {
    --reading_;
    auto peer = std::find_if(per_peer_.begin(), per_peer_.end(),
                             [&](const auto& e) { return e.first == c->peer; });
    if (peer != per_peer_.end() && --peer->second <= 0) per_peer_.erase(peer);
  }
  auto it = std::find_if(conns_.begin(), conns_.end(), [c](const auto& q) { return q.get() == c; });
  if (it != conns_.end()) {
    std::swap(*it, conns_.back());
    conns_.pop_back();
  }
}

}  // namespace trainlet::controller

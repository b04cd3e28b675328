#include "kubeflow/https_post.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/logging.h"

namespace trainlet::kubeflow {
namespace {

// Closes a descriptor on every path.
struct OwnedFd {
  int fd = -1;
  ~OwnedFd() {
    if (fd >= 0) close(fd);
  }
};

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string out;
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (out.size() < 512) absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

// Waits until `fd` has `events`, the deadline passes or the cancel fd is
// readable.
absl::Status Await(int fd, short events, int cancel_fd, absl::Time deadline, absl::string_view what,
                   absl::Duration timeout) {
  while (true) {
    const absl::Duration left = deadline - Clock::Monotonic()->Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ", what, " within ", absl::FormatDuration(timeout)));
    }
    struct pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int ms = static_cast<int>(std::ceil(absl::ToDoubleMilliseconds(left)));
    const int n = poll(p, 2, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (p[1].revents != 0) return absl::CancelledError("cancelled: the agent is exiting");
    if (p[0].revents != 0) return absl::OkStatus();
  }
}

// A non-blocking TCP connection to `addr`:port, or why not.
absl::StatusOr<int> Connect(const std::string& addr, int port, int cancel_fd, absl::Time deadline,
                            absl::Duration timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not an IP address: ", SafeForLog(addr)));
  }
  OwnedFd s{socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  if (connect(s.fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("connect: ", strerror(errno)));
    }
    if (absl::Status w = Await(s.fd, POLLOUT, cancel_fd, deadline, "connection", timeout);
        !w.ok()) {
      return w;
    }
    int err = 0;
    socklen_t err_len = sizeof(err);
    if (getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) err = errno;
    if (err != 0) return absl::UnavailableError(absl::StrCat("connect: ", strerror(err)));
  }
  const int fd = s.fd;
  s.fd = -1;
  return fd;
}

bool IsIpAddress(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// One SSL_* call retried through WANT_READ/WANT_WRITE until it returns > 0
// (its result), 0 for a clean end of stream, or an error.
template <typename Op>
absl::StatusOr<int> SslRetry(SSL* ssl, int fd, int cancel_fd, absl::Time deadline,
                             absl::string_view what, absl::Duration timeout, Op op) {
  while (true) {
    ERR_clear_error();
    const int r = op();
    if (r > 0) return r;
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (absl::Status w = Await(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, cancel_fd,
                                 deadline, what, timeout);
          !w.ok()) {
        return w;
      }
      continue;
    }
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      if (r == 0) return 0;  // the peer closed without close_notify.
      return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", OpenSslErrors()));
  }
}

// Where the headers end in `raw` (the body's offset), or npos.
size_t BodyOffset(absl::string_view raw) {
  const size_t end = raw.find("\r\n\r\n");
  return end == absl::string_view::npos ? end : end + 4;
}

// The Content-Length header's value, or -1.
int64_t ContentLength(absl::string_view head) {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    absl::string_view value = line;
    const size_t colon = value.find(':');
    if (colon == absl::string_view::npos) continue;
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(value.substr(0, colon)),
                                "content-length")) {
      continue;
    }
    int64_t n = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(value.substr(colon + 1)), &n) && n >= 0) {
      return n;
    }
  }
  return -1;
}

// Trusts the certificates of the PEM file `path` in `ctx`, read through
// ReadMountedFile (OpenSSL's own loader would open a FIFO and wait).
absl::Status LoadCaFile(SSL_CTX* ctx, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadMountedFile(path, kMaxCaFileBytes);
  if (!pem.ok()) return pem.status();
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  if (bio == nullptr) return absl::InternalError(OpenSslErrors());
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio.get(), nullptr, nullptr, nullptr);
  if (infos == nullptr) return absl::InvalidArgumentError(OpenSslErrors());
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  for (int i = 0; i < sk_X509_INFO_num(infos); ++i) {
    X509_INFO* info = sk_X509_INFO_value(infos, i);
    if (info->x509 != nullptr && X509_STORE_add_cert(store, info->x509) == 1) ++added;
  }
  sk_X509_INFO_pop_free(infos, X509_INFO_free);
  ERR_clear_error();  // a certificate already in the store.
  if (added == 0) return absl::InvalidArgumentError("no PEM certificate in it");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadMountedFile(const std::string& path, size_t max_bytes) {
  OwnedFd f{open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) return absl::NotFoundError(absl::StrCat("cannot be opened: ", strerror(errno)));
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError("not a regular file");
  }
  if (st.st_size > static_cast<off_t>(max_bytes)) {
    return absl::OutOfRangeError(absl::StrCat("over ", max_bytes, " bytes"));
  }
  std::string text;
  char buffer[16384];
  while (true) {
    const ssize_t n = read(f.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat("cannot be read: ", strerror(errno)));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      return absl::OutOfRangeError(absl::StrCat("over ", max_bytes, " bytes"));
    }
  }
  return text;
}

absl::StatusOr<HttpAnswer> ParseHttpAnswer(absl::string_view raw) {
  const size_t eol = raw.find("\r\n");
  absl::string_view status_line = raw.substr(0, eol);
  absl::string_view rest = status_line;
  int code = 0;
  if (!absl::ConsumePrefix(&rest, "HTTP/1.") || rest.size() < 5 || rest[1] != ' ' ||
      !absl::SimpleAtoi(rest.substr(2, 3), &code) || code < 100 || code > 599) {
    return absl::UnavailableError(
        absl::StrCat("not an HTTP answer: \"", SafeForLog(status_line, 80), "\""));
  }
  HttpAnswer a;
  a.status = code;
  const size_t body = BodyOffset(raw);
  if (body != absl::string_view::npos) a.body = std::string(raw.substr(body));
  return a;
}

// One name resolution, shared by Post and the thread that runs it; the
// thread may outlive the Post (and the poster) that started it.
struct OpenSslPoster::Lookup {
  ~Lookup() {
    if (done_fd >= 0) close(done_fd);
  }
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  std::vector<preflight::NameAnswer> answers ABSL_GUARDED_BY(mu);
  int done_fd = -1;  // an eventfd: readable once done.
};

absl::StatusOr<std::vector<std::string>> OpenSslPoster::Resolve(const std::string& host,
                                                                absl::Time deadline,
                                                                absl::Duration timeout) {
  if (resolver_ == nullptr) return absl::InternalError("no resolver");
  if (lookup_ != nullptr) {
    absl::MutexLock lock(&lookup_->mu);
    if (!lookup_->done) {
      return absl::UnavailableError(
          "the name does not resolve (an earlier lookup has not answered yet)");
    }
  }
  auto lookup = std::make_shared<Lookup>();
  lookup->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (lookup->done_fd < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  const absl::Duration left = std::max(absl::ZeroDuration(), deadline - Clock::Monotonic()->Now());
  try {
    std::thread([lookup, resolver = resolver_, host, left] {
      std::vector<preflight::NameAnswer> answers = resolver->Resolve({host}, left);
      absl::MutexLock lock(&lookup->mu);
      lookup->answers = std::move(answers);
      lookup->done = true;
      const uint64_t one = 1;
      ssize_t ignored = write(lookup->done_fd, &one, sizeof(one));
      (void)ignored;
    }).detach();
  } catch (const std::system_error& e) {
    return absl::UnavailableError(absl::StrCat("no thread to resolve the name: ", e.what()));
  }
  lookup_ = lookup;
  if (absl::Status w =
          Await(lookup->done_fd, POLLIN, cancel_fd_, deadline, "name resolution", timeout);
      !w.ok()) {
    return w;
  }
  absl::MutexLock lock(&lookup->mu);
  if (lookup->answers.empty() || lookup->answers[0].addrs.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "the name does not resolve (",
        lookup->answers.empty() ? "no answer" : SafeForLog(lookup->answers[0].error), ")"));
  }
  return lookup->answers[0].addrs;
}

absl::StatusOr<std::unique_ptr<OpenSslPoster>> OpenSslPoster::Create(
    std::shared_ptr<preflight::Resolver> resolver) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  return std::unique_ptr<OpenSslPoster>(new OpenSslPoster(std::move(resolver), fd));
}

OpenSslPoster::~OpenSslPoster() { close(cancel_fd_); }

void OpenSslPoster::Cancel() {
  const uint64_t one = 1;
  ssize_t ignored = write(cancel_fd_, &one, sizeof(one));
  (void)ignored;
}

void OpenSslPoster::Reset() {
  uint64_t count = 0;
  ssize_t ignored = read(cancel_fd_, &count, sizeof(count));
  (void)ignored;
}

absl::StatusOr<HttpAnswer> OpenSslPoster::Post(
    const HttpsTarget& target, const std::vector<std::pair<std::string, std::string>>& headers,
    absl::string_view body, absl::Duration timeout) {
  const absl::Time deadline = Clock::Monotonic()->Now() + timeout;
  const std::string where = absl::StrCat(SafeForLog(target.host), ":", target.port);
  auto failed = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  };
  {
    struct pollfd p = {cancel_fd_, POLLIN, 0};
    if (poll(&p, 1, 0) == 1) return failed(absl::CancelledError("cancelled: the agent is exiting"));
  }

  // The addresses to try.
  std::vector<std::string> addrs;
  if (IsIpAddress(target.host)) {
    addrs.push_back(target.host);
  } else {
    absl::StatusOr<std::vector<std::string>> resolved = Resolve(target.host, deadline, timeout);
    if (!resolved.ok()) return failed(resolved.status());
    addrs = std::move(*resolved);
  }
  OwnedFd sock;
  absl::Status last = absl::UnavailableError("no address");
  for (const std::string& addr : addrs) {
    absl::StatusOr<int> fd = Connect(addr, target.port, cancel_fd_, deadline, timeout);
    if (fd.ok()) {
      sock.fd = *fd;
      break;
    }
    last = fd.status();
    if (absl::IsCancelled(last) || absl::IsDeadlineExceeded(last)) break;
  }
  if (sock.fd < 0) return failed(last);

  // TLS: the server's certificate must chain to the CA file and carry the
  // URL's host (a DNS or IP SAN).
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) return failed(absl::InternalError(OpenSslErrors()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  if (target.ca_file.empty()) {
    SSL_CTX_set_default_verify_paths(ctx.get());
  } else if (absl::Status ca = LoadCaFile(ctx.get(), target.ca_file); !ca.ok()) {
    return failed(absl::FailedPreconditionError(absl::StrCat(
        "cannot load the CA certificate ", SafeForLog(target.ca_file), ": ", ca.message())));
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
  if (ssl == nullptr || SSL_set_fd(ssl.get(), sock.fd) != 1) {
    return failed(absl::InternalError(OpenSslErrors()));
  }
  if (IsIpAddress(target.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), target.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), target.host.c_str());
    SSL_set1_host(ssl.get(), target.host.c_str());
  }
  static const unsigned char kAlpn[] = "\x08http/1.1";
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn) - 1);
  absl::StatusOr<int> hs = SslRetry(ssl.get(), sock.fd, cancel_fd_, deadline, "TLS handshake",
                                    timeout, [&] { return SSL_connect(ssl.get()); });
  if (!hs.ok() || *hs == 0) {
    const long verify = SSL_get_verify_result(ssl.get());
    if (verify != X509_V_OK) {
      return failed(absl::UnavailableError(absl::StrCat(
          "its TLS certificate does not verify against ",
          target.ca_file.empty() ? "the default trust store" : SafeForLog(target.ca_file), " (",
          X509_verify_cert_error_string(verify), ")")));
    }
    return failed(hs.ok() ? absl::UnavailableError("TLS handshake: the server closed")
                          : hs.status());
  }

  // The request.
  std::string request = absl::StrCat(
      "POST ", target.path, " HTTP/1.1\r\nHost: ",
      absl::StrContains(target.host, ':') ? absl::StrCat("[", target.host, "]") : target.host,
      target.port == 443 ? "" : absl::StrCat(":", target.port), "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&request, name, ": ", value, "\r\n");
  absl::StrAppend(&request, "Content-Type: application/json\r\nContent-Length: ", body.size(),
                  "\r\nConnection: close\r\n\r\n", body);
  size_t written = 0;
  while (written < request.size()) {
    const int chunk = static_cast<int>(std::min<size_t>(request.size() - written, 1 << 16));
    absl::StatusOr<int> w =
        SslRetry(ssl.get(), sock.fd, cancel_fd_, deadline, "request written", timeout,
                 [&] { return SSL_write(ssl.get(), request.data() + written, chunk); });
    if (!w.ok()) return failed(w.status());
    if (*w == 0) return failed(absl::UnavailableError("the server closed before the request"));
    written += static_cast<size_t>(*w);
  }

  // The answer: until the server closes, the body is whole, or the cap.
  std::string raw;
  char buf[4096];
  while (raw.size() < kMaxAnswerBytes) {
    const int want = static_cast<int>(std::min(sizeof(buf), kMaxAnswerBytes - raw.size()));
    absl::StatusOr<int> r = SslRetry(ssl.get(), sock.fd, cancel_fd_, deadline, "answer", timeout,
                                     [&] { return SSL_read(ssl.get(), buf, want); });
    if (!r.ok()) {
      if (!raw.empty() && !absl::IsCancelled(r.status()) && !absl::IsDeadlineExceeded(r.status())) {
        break;  // a reset after the answer: what came is the answer.
      }
      return failed(r.status());
    }
    if (*r == 0) break;
    raw.append(buf, static_cast<size_t>(*r));
    const size_t at = BodyOffset(raw);
    if (at != std::string::npos) {
      const int64_t length = ContentLength(absl::string_view(raw).substr(0, at));
      if (length >= 0 && raw.size() - at >= static_cast<size_t>(length)) break;
    }
  }
  absl::StatusOr<HttpAnswer> answer = ParseHttpAnswer(raw);
  if (!answer.ok()) return failed(answer.status());
  return answer;
}

}  // namespace trainlet::kubeflow

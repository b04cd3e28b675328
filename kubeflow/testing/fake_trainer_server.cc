#include "kubeflow/testing/fake_trainer_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "topology/testing/tiny_json.h"

namespace trainlet::kubeflow::testing {
namespace {

using topology::testing::Json;

constexpr size_t kMaxBodySize = 1 << 16;  // server.go's maxBodySize.

// A number's raw text in `body` after "key": must be an integer for Go's
// int32 fields (45.0 and 4.5e1 do not decode). No std::regex: gcc's
// -Wmaybe-uninitialized fires inside <regex> at -O1 (the ASan build).
bool RawIsInteger(const std::string& body, const std::string& key) {
  const size_t at = body.find(absl::StrCat("\"", key, "\""));
  if (at == std::string::npos) return true;  // absent: nothing to check.
  absl::string_view rest = absl::string_view(body).substr(at + key.size() + 2);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (!absl::ConsumePrefix(&rest, ":")) return false;
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t end = 0;
  while (end < rest.size() && rest[end] != ',' && rest[end] != '}' &&
         !absl::ascii_isspace(static_cast<unsigned char>(rest[end]))) {
    ++end;
  }
  absl::string_view raw = rest.substr(0, end);
  if (raw == "null") return true;
  absl::ConsumePrefix(&raw, "-");
  return !raw.empty() && std::all_of(raw.begin(), raw.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// RFC 3339 as Go's time.RFC3339 parses it: 2006-01-02T15:04:05, optional
// fraction, then Z or +hh:mm/-hh:mm.
bool IsRfc3339(absl::string_view t) {
  auto digits = [&](size_t n) {
    if (t.size() < n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(t[i]))) return false;
    }
    t.remove_prefix(n);
    return true;
  };
  if (!digits(4) || !absl::ConsumePrefix(&t, "-") || !digits(2) || !absl::ConsumePrefix(&t, "-") ||
      !digits(2) || !absl::ConsumePrefix(&t, "T") || !digits(2) || !absl::ConsumePrefix(&t, ":") ||
      !digits(2) || !absl::ConsumePrefix(&t, ":") || !digits(2)) {
    return false;
  }
  if (absl::ConsumePrefix(&t, ".")) {
    if (!digits(1)) return false;
    while (!t.empty() && absl::ascii_isdigit(static_cast<unsigned char>(t[0]))) t.remove_prefix(1);
  }
  if (t == "Z") return true;
  if (!absl::ConsumePrefix(&t, "+") && !absl::ConsumePrefix(&t, "-")) return false;
  return digits(2) && absl::ConsumePrefix(&t, ":") && digits(2) && t.empty();
}

std::string StatusJson(int code, const std::string& message, const std::string& reason) {
  return absl::StrCat(R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)",
                      R"("message":")", message, R"(","reason":")", reason, R"(","code":)", code,
                      "}\n");
}

const char* ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 413:
      return "Request Entity Too Large";
    case 422:
      return "Unprocessable Entity";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

std::string TrainerBodyError(const std::string& body) {
  Json doc;
  std::string why;
  if (!topology::testing::ParseJson(body, &doc, &why)) return "Invalid payload: " + why;
  if (doc.kind != Json::kObject) return "Invalid payload: not an object";
  const Json* ts = doc.Get("trainerStatus");
  if (ts == nullptr || ts->kind == Json::kNull) return "";  // 200, nothing applied.
  if (ts->kind != Json::kObject) return "Invalid payload: trainerStatus is not an object";
  auto integer = [&](const char* key, double max) -> std::string {
    const Json* v = ts->Get(key);
    if (v == nullptr || v->kind == Json::kNull) return "";
    if (v->kind != Json::kNumber || !RawIsInteger(body, key)) {
      return absl::StrCat("Invalid payload: ", key, " is not an int32");
    }
    if (v->number < 0 || v->number > max) {
      return absl::StrCat("trainerStatus.", key, ": out of range");
    }
    return "";
  };
  if (std::string e = integer("progressPercentage", 100); !e.empty()) return e;
  if (std::string e = integer("estimatedRemainingSeconds", 2147483647.0); !e.empty()) return e;
  if (const Json* m = ts->Get("metrics"); m != nullptr && m->kind != Json::kNull) {
    if (m->kind != Json::kArray) return "Invalid payload: metrics is not an array";
    if (m->array.size() > 256)
      return "trainerStatus.metrics: Too many: must have at most 256 items";
    for (const Json& item : m->array) {
      if (item.kind != Json::kObject) return "Invalid payload: a metric is not an object";
      for (const char* field : {"name", "value"}) {
        const Json* f = item.Get(field);
        if (f == nullptr || f->kind != Json::kString) {
          return absl::StrCat("Invalid payload: metric ", field, " is not a string");
        }
        if (f->string.empty() || f->string.size() > 64) {
          return absl::StrCat("trainerStatus.metrics.", field, ": must be 1-64 bytes");
        }
      }
    }
  }
  const Json* t = ts->Get("lastUpdatedTime");
  if (t == nullptr || t->kind == Json::kNull) {
    return "trainerStatus: lastUpdatedTime is required when trainerStatus is present";
  }
  if (t->kind != Json::kString || !IsRfc3339(t->string)) {
    return "Invalid payload: lastUpdatedTime is not RFC 3339";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<FakeTrainerServer>> FakeTrainerServer::Start(Options options) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr || SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ctx != nullptr) SSL_CTX_free(ctx);
    return absl::InternalError("cannot load the server's certificate");
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    SSL_CTX_free(ctx);
    return absl::InternalError("cannot listen on 127.0.0.1");
  }
  const int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  auto server = std::unique_ptr<FakeTrainerServer>(
      new FakeTrainerServer(std::move(options), fd, stop, ntohs(addr.sin_port), ctx));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

FakeTrainerServer::FakeTrainerServer(Options options, int listen_fd, int stop_fd, int port,
                                     void* ctx)
    : options_(std::move(options)),
      listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      port_(port),
      ctx_(ctx) {}

FakeTrainerServer::~FakeTrainerServer() {
  const uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
}

std::string FakeTrainerServer::StatusPath() const {
  return absl::StrCat("/apis/trainer.kubeflow.org/v1alpha1/namespaces/", options_.namespace_name,
                      "/trainjobs/", options_.trainjob, "/status");
}

std::vector<RecordedRequest> FakeTrainerServer::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

int FakeTrainerServer::failed_handshakes() const {
  absl::MutexLock lock(&mu_);
  return failed_handshakes_;
}

void FakeTrainerServer::Serve() {
  while (true) {
    struct pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) continue;
    if (p[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Go's readTimeout and writeTimeout.
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ServeOne(fd);
    close(fd);
  }
}

void FakeTrainerServer::ServeOne(int fd) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx_));
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) != 1) {
    ERR_clear_error();
    SSL_free(ssl);
    absl::MutexLock lock(&mu_);
    ++failed_handshakes_;
    return;
  }
  // The request: headers, then Content-Length bytes.
  std::string raw;
  char buf[4096];
  size_t head_end = std::string::npos;
  while ((head_end = raw.find("\r\n\r\n")) == std::string::npos && raw.size() < 65536) {
    const int n = SSL_read(ssl, buf, sizeof(buf));
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  RecordedRequest r;
  if (head_end != std::string::npos) {
    std::vector<std::string> lines = absl::StrSplit(raw.substr(0, head_end), "\r\n");
    std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
    if (first.size() == 3) {
      r.method = first[0];
      r.path = first[1];
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
  }
  size_t length = 0;
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    absl::SimpleAtoi(it->second, &length);
  }
  int code = 200;
  std::string answer;
  if (head_end == std::string::npos) {
    code = 400;
    r.reason = "no whole request";
  } else if (length > kMaxBodySize) {
    code = 413;
    r.reason = "Payload too large";
  } else {
    r.body = raw.substr(head_end + 4);
    while (r.body.size() < length) {
      const int n = SSL_read(ssl, buf, sizeof(buf));
      if (n <= 0) break;
      r.body.append(buf, static_cast<size_t>(n));
    }
  }
  r.at = Clock::Monotonic()->Now();
  if (options_.mode == Mode::kSilent) {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(r);
    }
    struct pollfd p = {stop_fd_, POLLIN, 0};
    poll(&p, 1, -1);  // never answers; the test's end releases it.
    SSL_free(ssl);
    return;
  }
  if (code == 200 && options_.mode == Mode::kFixedStatus) {
    code = options_.fixed_status;
    r.reason = "fixed status";
  }
  if (code == 200) {
    // mux: "POST /apis/.../namespaces/{namespace}/trainjobs/{name}/status", else "/".
    std::vector<absl::string_view> seg = absl::StrSplit(r.path, '/');
    const bool route = r.method == "POST" && seg.size() == 9 && seg[0].empty() &&
                       seg[1] == "apis" && seg[2] == "trainer.kubeflow.org" &&
                       seg[3] == "v1alpha1" && seg[4] == "namespaces" && !seg[5].empty() &&
                       seg[6] == "trainjobs" && !seg[7].empty() && seg[8] == "status";
    std::vector<std::string> auth;
    if (auto it = r.headers.find("authorization"); it != r.headers.end()) {
      auth = absl::StrSplit(it->second, ' ', absl::SkipEmpty());
    }
    if (!route) {
      code = 404;
      r.reason = "Not found";
    } else if (auth.size() != 2 || !absl::EqualsIgnoreCase(auth[0], "Bearer") ||
               auth[1] != options_.token || r.path != StatusPath()) {
      // The real check: the JWT's signature, expiry, and audience
      // trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status.
      code = 403;
      r.reason = "Forbidden";
    } else if (std::string e = TrainerBodyError(r.body); !e.empty()) {
      code = 422;
      r.reason = e;
    }
  }
  if (code == 200) {
    answer = r.body + "\n";
  } else {
    answer = StatusJson(code, r.reason, ReasonPhrase(code));
  }
  r.answered = code;
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(r);
  }
  const std::string out =
      absl::StrCat("HTTP/1.1 ", code, " ", ReasonPhrase(code),
                   "\r\nContent-Type: application/json\r\nContent-Length: ", answer.size(),
                   "\r\nConnection: close\r\n\r\n", answer);
  SSL_write(ssl, out.data(), static_cast<int>(out.size()));
  SSL_shutdown(ssl);
  SSL_free(ssl);
}

}  // namespace trainlet::kubeflow::testing

#include "cmd/status_command.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <ostream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "config/options.h"
#include "controller/views.h"
#include "httplib.h"

namespace trainlet::agent {
namespace {

constexpr int kDefaultPort = 29680;
// The largest answer read: far above a page of a job's nodes (the
// controller's cap is 4 MiB) and every job's summary; a job of any size
// comes a page at a time.
constexpr size_t kMaxAnswerBytes = 64 << 20;

// httplib's error, as a person reads it.
std::string Describe(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or failed";
    case httplib::Error::ConnectionTimeout:
      return "no connection within --timeout";
    case httplib::Error::Read:
      return "no answer within --timeout, or the connection broke";
    case httplib::Error::Write:
      return "the request could not be sent";
    default:
      return httplib::to_string(error);
  }
}

// What answers at an address.
enum class Speaks { kHttp, kGrpc, kTls, kOther };

// Connects, sends an HTTP/1.1 request for /healthz and reads the first
// bytes: the views answer "HTTP/1.1 ..."; a gRPC server greets every
// connection with an HTTP/2 SETTINGS frame (type 4) and closes it on the
// request; a TLS server answers with an alert record (0x15) or closes the
// connection. Unavailable saying what happened (the caller names the
// address) when nothing answers within `timeout`.
absl::StatusOr<Speaks> Probe(const std::string& host, int port, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", SafeForLog(host, 64), ": ", gai_strerror(rc)));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string why = "connection refused or failed";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, ms) <= 0) {
      why = "no connection within --timeout";
      close(fd);
      fd = -1;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      why = std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(why);
  const std::string request =
      absl::StrCat("GET /healthz HTTP/1.1\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  bool closed = false;  // the peer ended the connection (FIN or RST).
  while (got.size() < 9) {
    pollfd p{fd, POLLIN, 0};
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(&p, 1, ms) <= 0) break;
    char buf[64];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (absl::StartsWith(got, "HTTP/")) return Speaks::kHttp;
  if (got.size() >= 9 && got[3] == '\x04') return Speaks::kGrpc;  // an HTTP/2 SETTINGS frame.
  if (!got.empty() && (got[0] == '\x15' || got[0] == '\x16')) return Speaks::kTls;
  if (got.empty() && closed) {
    // The controller's views with --http-tls end a plaintext request at once.
    return absl::UnavailableError(absl::StrCat(
        "closed the connection without answering; a TLS port (the views with --http-tls, or "
        "a gRPC port with TLS) wants --tls-ca, --tls-cert and --tls-key (or --tls-dir), as "
        "`trainlet run` was given, and the controller's gRPC address"));
  }
  if (got.empty()) {
    // A TLS gRPC port waits for a handshake and says nothing.
    return absl::UnavailableError(absl::StrCat(
        "connected, but no answer within --timeout; a controller whose gRPC port has TLS "
        "answers only with --tls-ca, --tls-cert and --tls-key (or --tls-dir), as `trainlet run` "
        "was given"));
  }
  return Speaks::kOther;
}

// `text` as one URL path segment: every byte outside [A-Za-z0-9._~-]
// percent-encoded (a job id from the network could hold anything).
std::string PathEscape(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// Bounds one request of `client` to `timeout` in all: httplib's timeouts
// are per read, so a server that sends its answer a byte at a time, each
// within the read timeout, would hold `trainlet status` for hours. Past the
// deadline a thread of its own stops the client (shuts its socket down, the
// only call httplib allows from another thread), again every 50 ms until
// the request has ended.
class RequestDeadline {
 public:
  RequestDeadline(httplib::Client* client, absl::Duration timeout)
      : deadline_(absl::Now() + timeout), thread_([this, client] { Watch(client); }) {}
  ~RequestDeadline() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  bool passed() const {
    absl::MutexLock lock(&mu_);
    return passed_;
  }

 private:
  void Watch(httplib::Client* client) {
    absl::MutexLock lock(&mu_);
    absl::Time next = deadline_;
    while (!mu_.AwaitWithDeadline(absl::Condition(&done_), next)) {
      passed_ = true;
      mu_.Unlock();
      client->stop();
      mu_.Lock();
      next = absl::Now() + absl::Milliseconds(50);
    }
  }

  const absl::Time deadline_;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool passed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it reads the members above.
};

// The controller's HTTP views.
class HttpViewsClient : public ViewsClient {
 public:
  HttpViewsClient(const std::string& host, int port, std::string token, double timeout_seconds)
      : where_(JoinHostPort(host, port)),
        client_(host, port),
        token_(std::move(token)),
        timeout_(absl::Seconds(timeout_seconds)) {
    const auto seconds = static_cast<time_t>(timeout_seconds);
    const auto micros = static_cast<time_t>((timeout_seconds - static_cast<double>(seconds)) * 1e6);
    client_.set_connection_timeout(seconds, micros);
    client_.set_read_timeout(seconds, micros);
    client_.set_write_timeout(seconds, micros);
  }

  absl::StatusOr<controller::ControllerSnapshot> Summary() override {
    absl::StatusOr<std::string> body = Get("/api/jobs");
    if (!body.ok()) return body.status();
    absl::StatusOr<controller::ControllerSnapshot> s = controller::ParseSnapshotJson(*body);
    if (!s.ok()) return Unavailable(s.status().message());
    return s;
  }

  absl::StatusOr<controller::JobView> Job(const std::string& job_id) override {
    controller::JobView whole;
    int64_t from = 0;
    bool first = true;
    while (from >= 0) {
      absl::StatusOr<std::string> body =
          Get(absl::StrCat("/api/jobs/", PathEscape(job_id), "?from=", from));
      if (!body.ok()) return body.status();
      controller::ControllerSnapshot figures;
      controller::JobView page;
      int64_t next = -1;
      if (absl::Status s = controller::ParseJobJson(*body, &figures, &page, &next); !s.ok()) {
        return Unavailable(s.message());
      }
      if (next >= 0 && next <= from) {
        return Unavailable(absl::StrCat("/api/jobs/", job_id, " did not move past node ", from));
      }
      if (first) {
        whole = std::move(page);
        first = false;
      } else {
        for (controller::NodeView& n : page.nodes) whole.nodes.push_back(std::move(n));
      }
      from = next;
    }
    whole.nodes_from = 0;
    return whole;
  }

  absl::StatusOr<std::vector<controller::EvidenceView>> Evidence(
      const std::string& job_id) override {
    absl::StatusOr<std::string> body =
        Get(absl::StrCat("/api/jobs/", PathEscape(job_id), "/evidence"));
    if (!body.ok()) return body.status();
    auto hangs = controller::ParseEvidenceJson(*body);
    if (!hangs.ok()) return Unavailable(hangs.status().message());
    return hangs;
  }

 private:
  absl::Status Unavailable(absl::string_view what) const {
    return absl::UnavailableError(absl::StrCat(where_, ": ", what));
  }

  absl::StatusOr<std::string> Get(const std::string& path) {
    httplib::Headers headers;
    if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
    std::string body;
    bool too_big = false;
    bool late = false;
    std::optional<httplib::Result> got;
    {
      RequestDeadline deadline(&client_, timeout_);
      got = client_.Get(path.c_str(), headers, [&](const char* data, size_t length) {
        if (body.size() + length > kMaxAnswerBytes) {
          too_big = true;
          return false;
        }
        body.append(data, length);
        return true;
      });
      late = deadline.passed();
    }
    const httplib::Result& res = *got;
    if (late) {
      return absl::UnavailableError(absl::StrCat(
          "the controller at http://", where_, SafeForLog(path, 200),
          " did not send its whole answer within --timeout (", absl::FormatDuration(timeout_),
          "): not a trainlet controller, or a very slow link?"));
    }
    if (too_big) {
      return Unavailable(absl::StrCat("answered ", SafeForLog(path, 200), " with over ",
                                      kMaxAnswerBytes >> 20, " MiB: not a trainlet controller?"));
    }
    if (!res) {
      return absl::UnavailableError(absl::StrCat("cannot reach the controller at http://", where_,
                                                 SafeForLog(path, 200), " (", Describe(res.error()),
                                                 ")"));
    }
    if (res->status == 404 && absl::StartsWith(path, "/api/jobs/")) {
      return absl::NotFoundError(absl::StrCat("the controller at ", where_, " knows no job"));
    }
    if (res->status == 401) {
      return absl::UnauthenticatedError(
          absl::StrCat("the controller at ", where_,
                       token_.empty() ? " wants a token: give --token-file (its --http-token-file)"
                                      : " refused the token of --token-file"));
    }
    if (res->status != 200) {
      return Unavailable(absl::StrCat("answered HTTP ", res->status, " for ", SafeForLog(path, 200),
                                      "; is that address a trainlet controller?"));
    }
    return body;
  }

  const std::string where_;
  httplib::Client client_;
  const std::string token_;
  const absl::Duration timeout_;
};

}  // namespace

absl::Status ParseHttpAddress(absl::string_view text, std::string* host, int* port) {
  const std::string shown = SafeForLog(text, 64);
  absl::string_view h = text;
  absl::string_view p;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller address '", shown, "': '[' without ']' (use [IPV6]:PORT)"));
    }
    h = text.substr(1, close - 1);
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat("controller address '", shown, "': expected :PORT after ']'"));
      }
      p = rest.substr(1);
    }
  } else if (const size_t colon = text.rfind(':'); colon != absl::string_view::npos) {
    if (text.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat(
          "controller address '", shown, "': an IPv6 address needs brackets: [IPV6]:PORT"));
    }
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (!IsValidHost(h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("controller address '", shown, "': not a host name or IP address"));
  }
  int value = kDefaultPort;
  if (!p.empty() || text.back() == ':') {
    if (!absl::SimpleAtoi(p, &value) || value < 1 || value > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller address '", shown, "': the port must be 1-65535"));
    }
  }
  *host = std::string(h);
  *port = value;
  return absl::OkStatus();
}

namespace {

constexpr char kStatusUsage[] = "trainlet status [OPTIONS] [JOB]";
constexpr char kStatusDescription[] =
    "Prints what the trainlet controller knows of its jobs: state, start,\n"
    "duration, command, the root cause of a failure, nodes (lost ones apart),\n"
    "ranks, workers, progress, the rounds with their restart causes, hangs, GPU\n"
    "health (docs/controller-views.md). JOB: that job only, in full.\n"
    "\n"
    "Exit codes: 0; 1 JOB unknown to the controller; 64 usage; 69 the controller\n"
    "is unreachable or did not answer as one; 77 it refused the token or\n"
    "certificate; 78 a token or TLS file that cannot be used.";
// The longest --timeout: a person waits for the answer.
constexpr absl::Duration kMaxTimeout = absl::Minutes(5);

}  // namespace

const std::vector<OptionSpec>& StatusOptionTable() {
  static const auto* table = new std::vector<OptionSpec>{
      {"controller", OptionKind::kString, "HOST:PORT", "127.0.0.1:29680",
       "The controller: the address `trainlet run --controller` was given (its gRPC port) or "
       "its views (--http). TRAINLET_CONTROLLER_HTTP, when set, comes before "
       "TRAINLET_CONTROLLER."},
      {"json", OptionKind::kBool, "", "false",
       "JSON (the documents of /api/jobs) instead of a table.", /*hidden=*/false,
       /*flag_only=*/true},
      {"evidence", OptionKind::kBool, "", "false", "With JOB: every line of every hang's evidence.",
       /*hidden=*/false, /*flag_only=*/true},
      {"timeout", OptionKind::kDuration, "DURATION", "5s",
       "Give up on an answer after DURATION (at most 5m).", /*hidden=*/false,
       /*flag_only=*/true},
      {"token-file", OptionKind::kString, "PATH", "",
       "The controller's token: its --token-file on the gRPC port, its --http-token-file on the "
       "views."},
      {"tls-cert", OptionKind::kString, "PATH", "",
       "This client's certificate for mutual TLS, as `trainlet run` has it: the address is then "
       "the controller's gRPC port. Needs --tls-key and --tls-ca."},
      {"tls-key", OptionKind::kString, "PATH", "", "The private key of --tls-cert."},
      {"tls-ca", OptionKind::kString, "PATH", "",
       "The CA certificate(s) the controller's certificate must be signed by."},
      {"tls-dir", OptionKind::kString, "DIR", "",
       "A mounted cert-manager Secret: DIR/tls.crt, DIR/tls.key and DIR/ca.crt, for any of the "
       "three not given by its own option."},
      {"tls-server-name", OptionKind::kString, "NAME", "the controller host dialled",
       "Name (DNS or IP) the controller's certificate must carry."},
  };
  return *table;
}

absl::StatusOr<StatusOptions> ParseStatusOptions(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  const std::vector<OptionSpec>& table = StatusOptionTable();
  absl::StatusOr<ParsedOptions> parsed =
      ParseOptions(table, args, env, kStatusUsage, /*foreign=*/{}, /*takes_words=*/true);
  if (!parsed.ok()) return parsed.status();
  StatusOptions options;
  if (parsed->help_requested) {
    options.help = true;
    return options;
  }
  if (parsed->saw_separator) {
    return absl::InvalidArgumentError(
        absl::StrCat("status runs no COMMAND; remove -- and what follows; usage: ", kStatusUsage));
  }
  if (parsed->words.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("one JOB at most (got '",
                                                   SafeForLog(parsed->words[0], 64), "' and '",
                                                   SafeForLog(parsed->words[1], 64), "')"));
  }
  if (!parsed->words.empty()) options.job = parsed->words[0];
  // The agents' variable is the gRPC address: one address serves both. The
  // views' own variable comes before it, a flag before either.
  OptionValue address = ValueOrDefault(*parsed, table, "controller");
  if (address.source != ValueSource::kFlag) {
    auto http = env.find("TRAINLET_CONTROLLER_HTTP");
    if (http != env.end() && !http->second.empty()) {
      address = {http->second, "TRAINLET_CONTROLLER_HTTP", ValueSource::kEnv};
    }
  }
  options.address_source = address.source == ValueSource::kDefault ? "the default" : address.origin;
  for (const char* name : {"json", "evidence"}) {
    absl::StatusOr<bool> on = ParseBoolValue(ValueOrDefault(*parsed, table, name));
    if (!on.ok()) return on.status();
    *(std::string(name) == "json" ? &options.json : &options.evidence) = *on;
  }
  const OptionValue timeout_value = ValueOrDefault(*parsed, table, "timeout");
  absl::StatusOr<absl::Duration> timeout = ParseDurationValue(timeout_value, absl::Milliseconds(1));
  if (!timeout.ok()) return timeout.status();
  if (*timeout > kMaxTimeout) {
    return absl::InvalidArgumentError(absl::StrCat(timeout_value.origin, "=",
                                                   SafeForLog(timeout_value.text, 32), ": at most ",
                                                   absl::FormatDuration(kMaxTimeout)));
  }
  options.timeout_seconds = absl::ToDoubleSeconds(*timeout);
  if (const OptionValue* token = parsed->Find("token-file")) options.token_file = *token;
  for (const char* name : {"tls-cert", "tls-key", "tls-ca", "tls-dir", "tls-server-name"}) {
    if (const OptionValue* v = parsed->Find(name)) options.tls.values[name] = *v;
  }
  if (options.evidence && options.job.empty()) {
    return absl::InvalidArgumentError("--evidence needs a JOB: trainlet status --evidence JOB");
  }
  if (absl::Status s = ParseHttpAddress(address.text, &options.host, &options.port); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (from ", options.address_source, ")"));
  }
  return options;
}

std::string StatusHelpText() {
  return HelpText(kStatusUsage, kStatusDescription, StatusOptionTable(),
                  /*kubernetes_discovery=*/false);
}

int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err) {
  absl::StatusOr<StatusOptions> options = ParseStatusOptions(args, env);
  if (!options.ok()) {
    err << UsageErrorText("status", options.status());
    return ExitCodeForConfigError(options.status());
  }
  if (options->help) {
    out << StatusHelpText();
    return kExitSuccess;
  }
  return RunStatus(*options, out, err);
}

int RunStatus(const StatusOptions& options, std::ostream& out, std::ostream& err) {
  std::string token;
  if (options.token_file.has_value()) {
    absl::StatusOr<std::string> read = ReadTokenFile(*options.token_file);
    if (!read.ok()) {
      err << "trainlet status: " << read.status().message() << "\n";
      return kExitConfig;
    }
    token = *std::move(read);
  }
  rendezvous::TlsConfig tls;
  if (!options.tls.values.empty()) {
    std::vector<std::string> warnings;
    absl::StatusOr<rendezvous::TlsConfig> loaded = ParseTlsOptions(options.tls, &warnings);
    if (!loaded.ok()) {
      err << "trainlet status: " << loaded.status().message() << "\n";
      return ExitCodeForConfigError(loaded.status());
    }
    for (const std::string& w : warnings) err << "trainlet status: warning: " << w << "\n";
    tls = *std::move(loaded);
  }

  const std::string where = JoinHostPort(options.host, options.port);
  const absl::Duration timeout = absl::Seconds(options.timeout_seconds);
  std::unique_ptr<ViewsClient> client;
  if (tls.enabled()) {
    client = NewGrpcViewsClient(options.host, options.port, token, tls, timeout);
  } else {
    absl::StatusOr<Speaks> speaks = Probe(options.host, options.port, timeout);
    if (!speaks.ok()) {
      err << "trainlet status: cannot reach the controller at " << where << " ("
          << speaks.status().message() << "); is `trainlet controller` running there? ("
          << options.address_source
          << " gives the address: its gRPC --listen port or its --http views)\n";
      return kExitUnavailable;
    }
    switch (*speaks) {
      case Speaks::kHttp:
        client = std::make_unique<HttpViewsClient>(options.host, options.port, token,
                                                   options.timeout_seconds);
        break;
      case Speaks::kGrpc:
        client = NewGrpcViewsClient(options.host, options.port, token, tls, timeout);
        break;
      case Speaks::kTls:
        err << "trainlet status: the controller at " << where
            << " speaks TLS: give its CA and a client certificate (--tls-ca, --tls-cert, "
               "--tls-key or --tls-dir, as `trainlet run` does) and its gRPC address\n";
        return kExitUnavailable;
      case Speaks::kOther:
        err << "trainlet status: " << where
            << " answered neither HTTP nor gRPC: is it a trainlet controller's address? ("
            << options.address_source << ")\n";
        return kExitUnavailable;
    }
  }

  auto fail = [&](const absl::Status& s) {
    err << "trainlet status: " << s.message() << "\n";
    return ExitCodeForStatusQuery(s);
  };
  if (options.evidence) {
    absl::StatusOr<std::vector<controller::EvidenceView>> hangs = client->Evidence(options.job);
    if (!hangs.ok()) {
      if (hangs.status().code() == absl::StatusCode::kNotFound) {
        err << "trainlet status: the controller at " << where << " knows no job '"
            << SafeForLog(options.job, 128) << "'\n";
        return kExitStatusJobUnknown;
      }
      return fail(hangs.status());
    }
    out << (options.json ? controller::RenderEvidenceJson(options.job, *hangs)
                         : controller::RenderEvidenceText(options.job, *hangs));
    return kExitSuccess;
  }
  absl::StatusOr<controller::ControllerSnapshot> snapshot = client->Summary();
  if (!snapshot.ok()) return fail(snapshot.status());
  std::vector<controller::JobView> jobs;
  bool found = options.job.empty();
  for (const controller::JobView& summary : snapshot->jobs) {
    if (!options.job.empty() && summary.job_id != options.job) continue;
    absl::StatusOr<controller::JobView> job = client->Job(summary.job_id);
    if (job.status().code() == absl::StatusCode::kNotFound) continue;  // forgotten meanwhile.
    if (!job.ok()) return fail(job.status());
    jobs.push_back(*std::move(job));
    found = true;
  }
  snapshot->jobs = std::move(jobs);
  if (options.json) {
    out << controller::RenderJson(*snapshot);
  } else {
    out << controller::RenderStatusTable(*snapshot, options.job);
  }
  if (!found) {
    err << "trainlet status: the controller at " << where << " knows no job '"
        << SafeForLog(options.job, 128) << "'\n";
    return kExitStatusJobUnknown;
  }
  return kExitSuccess;
}

}  // namespace trainlet::agent

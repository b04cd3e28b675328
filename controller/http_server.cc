#include "controller/http_server.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "controller/http_gate.h"
#include "controller/views.h"
#include "httplib.h"
#include "rendezvous/tcp_listener.h"

namespace trainlet::controller {
namespace {

// A job id as the path carries it, percent-decoded by httplib (the agents'
// ids are [A-Za-z0-9._-]; anything but '/' is looked up).
constexpr char kJobPath[] = R"(/api/jobs/([^/]{1,512}))";
constexpr char kEvidencePath[] = R"(/api/jobs/([^/]{1,512})/evidence)";

// httplib's view of a request the gate read: its bytes, and the answer
// drawn into memory (the gate writes it: a worker never waits on a socket).
class ConnectionStream : public httplib::Stream {
 public:
  explicit ConnectionStream(GateConnection* conn) : conn_(conn) {}
  bool is_readable() const override { return true; }  // a read never waits.
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override { return conn_->Read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override {
    conn_->Write(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    conn_->PeerAddress(&ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    conn_->LocalAddress(&ip, &port);
  }
  socket_t socket() const override { return conn_->fd(); }

 private:
  GateConnection* const conn_;
};

// httplib's routing and answers, on streams we give it; it never listens.
class Router : public httplib::Server {
 public:
  bool Serve(httplib::Stream& stream) {
    bool closed = false;
    // Range is ignored (RFC 9110 lets a server): httplib answers N parts
    // with N copies of the answer built in memory, so one request of 1,000
    // parts of a 2 MB /metrics would cost 2 GB.
    return process_request(stream, /*close_connection=*/true, closed,
                           [](httplib::Request& req) { req.ranges.clear(); });
  }
};

void CommonHeaders(httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
}

void Plain(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain; charset=utf-8");
}

// "Bearer TOKEN" holds `token` (compared in constant time).
bool TokenMatches(const std::string& header, const std::string& token) {
  constexpr absl::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(absl::string_view(header).substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  const absl::string_view given =
      absl::StripAsciiWhitespace(absl::string_view(header).substr(kScheme.size()));
  if (given.size() != token.size()) return false;
  return CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

// A query parameter as a count: `fallback` when absent; false when it is
// not a number in [0, max].
bool CountParam(const httplib::Request& req, const char* name, size_t fallback, size_t max,
                size_t* out) {
  if (!req.has_param(name)) {
    *out = fallback;
    return true;
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(req.get_param_value(name), &v) || v > max) return false;
  *out = static_cast<size_t>(v);
  return true;
}

}  // namespace

// ---- SnapshotViewSource.

ControllerSnapshot SnapshotViewSource::Summary() {
  ControllerSnapshot s = snapshot_();
  for (JobView& job : s.jobs) {
    job.totals = TotalsOf(job);
    job.nodes_total = static_cast<int64_t>(job.nodes.size());
    job.nodes.clear();
    job.restarts.clear();
    job.hangs.clear();
    job.rounds_timeline.clear();
    job.series = {};
  }
  return s;
}

absl::StatusOr<JobView> SnapshotViewSource::Job(absl::string_view job_id, size_t first_node,
                                                size_t max_nodes) {
  ControllerSnapshot s = snapshot_();
  for (JobView& job : s.jobs) {
    if (job.job_id != job_id) continue;
    job.totals = TotalsOf(job);
    job.nodes_total = static_cast<int64_t>(job.nodes.size());
    const size_t from = std::min(first_node, job.nodes.size());
    const size_t to = from + std::min(max_nodes, job.nodes.size() - from);
    job.nodes = std::vector<NodeView>(job.nodes.begin() + from, job.nodes.begin() + to);
    job.nodes_from = static_cast<int64_t>(from);
    return std::move(job);
  }
  return absl::NotFoundError(absl::StrCat("no job ", SafeForLog(job_id, 128)));
}

absl::StatusOr<std::vector<EvidenceView>> SnapshotViewSource::Evidence(absl::string_view job_id) {
  ControllerSnapshot s = snapshot_();
  for (const JobView& job : s.jobs) {
    if (job.job_id != job_id) continue;
    std::vector<EvidenceView> out;
    for (const HangView& h : job.hangs) {
      out.push_back({h.round, h.at_unix_ms, h.node_id, h.verdict, h.evidence_summary, h.seq});
    }
    return out;
  }
  return absl::NotFoundError(absl::StrCat("no job ", SafeForLog(job_id, 128)));
}

// ---- The server.

struct HttpServer::Impl {
  HttpServerOptions options;
  ViewSource* source = nullptr;
  Router router;
  std::unique_ptr<TlsContext> tls;
  std::unique_ptr<rendezvous::TcpListener> listener;
  std::unique_ptr<HttpGate> gate;

  // The workers and their queue of complete requests. (std::mutex: the
  // condition variables wait on it; the queue is small and local.)
  mutable std::mutex mu;
  std::condition_variable work;
  std::deque<std::unique_ptr<GateConnection>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
  int64_t served = 0;
  int64_t busy = 0;

  std::unique_ptr<GateConnection> Enqueue(std::unique_ptr<GateConnection> conn) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping || static_cast<int>(queue.size()) >= options.max_queued_requests) {
      ++busy;
      return conn;
    }
    queue.push_back(std::move(conn));
    work.notify_one();
    return nullptr;
  }

  // Draws each answer into memory and hands it to the gate to write: no
  // worker waits on a client.
  void Work() {
    for (;;) {
      std::unique_ptr<GateConnection> conn;
      {
        std::unique_lock<std::mutex> lock(mu);
        work.wait(lock, [&] { return !queue.empty() || stopping; });
        if (stopping) return;
        conn = std::move(queue.front());
        queue.pop_front();
      }
      ConnectionStream stream(conn.get());
      router.Serve(stream);
      gate->Send(std::move(conn));
      std::lock_guard<std::mutex> lock(mu);
      ++served;
    }
  }

  void Routes();
};

void HttpServer::Impl::Routes() {
  httplib::Server& server = router;
  server.set_payload_max_length(1024);
  ViewSource* const src = source;
  const HttpServerOptions& o = options;

  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.token.empty() || req.path == "/" || req.path == "/healthz") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (TokenMatches(req.get_header_value("Authorization"), options.token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    CommonHeaders(res);
    res.set_header("WWW-Authenticate", "Bearer realm=\"trainlet-controller\"");
    Plain(res, 401,
          "unauthorized: the controller's views want Authorization: Bearer TOKEN "
          "(its --http-token-file)\n");
    return httplib::Server::HandlerResponse::Handled;
  });

  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    // The page's own script and style only; it fetches /api/*, nothing else.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                   "form-action 'none'; frame-ancestors 'none'");
    res.set_content(StatusPageHtml(), "text/html; charset=utf-8");
  });
  server.Get("/api/jobs", [src](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_content(RenderJobsJson(src->Summary()), "application/json");
  });
  server.Get(kJobPath, [src, &o](const httplib::Request& req, httplib::Response& res) {
    CommonHeaders(res);
    size_t from = 0, limit = 0;
    if (!CountParam(req, "from", 0, SIZE_MAX >> 1, &from) ||
        !CountParam(req, "limit", o.default_page_nodes, o.max_page_nodes, &limit) || limit == 0) {
      return Plain(res, 400,
                   absl::StrCat("from= must be a node index and limit= a count of 1 to ",
                                o.max_page_nodes, "\n"));
    }
    absl::StatusOr<JobView> job = src->Job(req.matches[1].str(), from, limit);
    if (!job.ok()) return Plain(res, 404, absl::StrCat(job.status().message(), "\n"));
    res.set_content(RenderJobJson(src->Figures(), *job, o.max_answer_bytes), "application/json");
  });
  server.Get(kEvidencePath, [src](const httplib::Request& req, httplib::Response& res) {
    CommonHeaders(res);
    const std::string id = req.matches[1].str();
    absl::StatusOr<std::vector<EvidenceView>> hangs = src->Evidence(id);
    if (!hangs.ok()) return Plain(res, 404, absl::StrCat(hangs.status().message(), "\n"));
    res.set_content(RenderEvidenceJson(id, *hangs), "application/json");
  });
  server.Get("/metrics", [src](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    // One job at a time: the whole of one job's nodes is the most held.
    const ControllerSnapshot summary = src->Summary();
    PrometheusRenderer renderer(summary);
    for (const JobView& s : summary.jobs) {
      absl::StatusOr<JobView> job = src->Job(s.job_id, 0, SIZE_MAX);
      if (job.ok()) renderer.AddJob(*job);  // else forgotten since Summary().
    }
    res.set_content(renderer.Finish(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  // Read-only: every other method on a known path is 405.
  const auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_header("Allow", "GET, HEAD");
    Plain(res, 405, "method not allowed: the controller's views are read-only\n");
  };
  for (const char* path : {"/", "/api/jobs", kJobPath, kEvidencePath, "/metrics", "/healthz"}) {
    server.Post(path, not_allowed);
    server.Put(path, not_allowed);
    server.Delete(path, not_allowed);
    server.Patch(path, not_allowed);
  }
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    if (res.body.empty()) res.set_content(absl::StrCat(res.status, "\n"), "text/plain");
  });
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        static LogLimiter limiter(5, absl::Minutes(1));
        int64_t suppressed = 0;
        if (limiter.Allow(&suppressed)) {
          TLOG(kWarning) << "controller http: " << SafeForLog(req.path, 64)
                         << " failed with an exception" << SuppressedNote(suppressed);
        }
        res.status = 500;
        res.set_content("internal error\n", "text/plain");
      });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              SnapshotFn snapshot) {
  auto source = std::make_unique<SnapshotViewSource>(std::move(snapshot));
  absl::StatusOr<std::unique_ptr<HttpServer>> server = Start(options, source.get());
  if (server.ok()) (*server)->owned_source_ = std::move(source);
  return server;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              ViewSource* source) {
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->impl_ = std::make_unique<Impl>();
  Impl& impl = *self->impl_;
  impl.options = options;
  impl.options.threads = std::max(1, options.threads);
  impl.options.max_queued_requests = std::max(1, options.max_queued_requests);
  impl.source = source;
  impl.Routes();
  if (options.tls_mode != HttpTls::kOff) {
    auto tls = TlsContext::Create(options.tls, options.tls_mode == HttpTls::kMutual);
    if (!tls.ok()) return tls.status();
    impl.tls = std::move(*tls);
  }

  auto listener = rendezvous::TcpListener::Bind({{options.address, options.port}});
  if (!listener.ok()) {
    return absl::UnavailableError(
        absl::StrCat("controller: cannot listen for HTTP (--http): ", listener.status().message()));
  }
  impl.listener = std::move(*listener);
  self->port_ = impl.listener->port(0);

  HttpGate::Options gate;
  gate.head_timeout = options.head_timeout;
  gate.max_pending = options.max_pending;
  gate.max_pending_per_peer = options.max_pending_per_peer;
  gate.answer_timeout = options.answer_timeout;
  gate.max_sending = options.max_answers_sending;
  gate.max_sending_bytes = options.max_bytes_sending;
  gate.tls = impl.tls ? impl.tls->get() : nullptr;
  auto started = HttpGate::Start(gate, [&impl](std::unique_ptr<GateConnection> conn) {
    return impl.Enqueue(std::move(conn));
  });
  if (!started.ok()) return started.status();
  impl.gate = std::move(*started);
  for (int i = 0; i < impl.options.threads; ++i) {
    impl.workers.emplace_back([&impl] { impl.Work(); });
  }
  rendezvous::TcpListener::Options lo;
  lo.max_connections = options.max_connections;
  lo.name = "controller http";
  lo.on_connection = [gate = impl.gate.get()](int fd, int) { gate->Add(fd); };
  impl.listener->Start(std::move(lo));
  return self;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (!impl_) return;
  Impl& impl = *impl_;
  if (impl.listener) impl.listener->Stop();  // no new connections.
  if (impl.gate) impl.gate->Stop();          // none half-read.
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    if (impl.stopping && impl.workers.empty()) return;
    impl.stopping = true;
    impl.queue.clear();
  }
  impl.work.notify_all();
  for (std::thread& t : impl.workers) t.join();
  impl.workers.clear();
}

HttpServer::Stats HttpServer::stats() const {
  Stats s;
  if (!impl_) return s;
  if (impl_->gate) {
    const HttpGate::Stats g = impl_->gate->stats();
    s.timed_out = g.timed_out;
    s.refused = g.refused;
    s.dropped = g.dropped;
    s.evicted = g.evicted;
  }
  if (impl_->listener) s.refused += impl_->listener->stats().refused_full;
  std::lock_guard<std::mutex> lock(impl_->mu);
  s.served = impl_->served;
  s.busy = impl_->busy;
  return s;
}

}  // namespace trainlet::controller

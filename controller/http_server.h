// The controller's HTTP adapter: read-only views of what a ViewSource (the
// one seam: the controller's core adapted by snapshot.h, or a fixed
// snapshot in tests) says, drawn by views.h: GET / (the page,
// status_page.cc), /api/jobs (RenderJobsJson), /api/jobs/JOB?from=K&limit=N
// (RenderJobJson, nodes paged), /api/jobs/JOB/evidence (RenderEvidenceJson),
// /metrics (PrometheusRenderer) and /healthz. The paths, the token, the
// answers and every bound: docs/controller-views.md.
//
// Slow clients cannot take it down: connections come from a TcpListener
// (a cap on open connections) to an HttpGate, which reads each request (and
// does the TLS handshake) on one epoll thread; only complete requests reach
// the worker threads, through a bounded queue; a worker draws the answer
// into memory and the gate writes it, cutting it when the client is too slow.
//
// Threading: Start() binds and starts the listener's, the gate's and the
// workers' threads; the ViewSource is called on worker threads,
// concurrently, and must be thread-safe. Stop() (or the destructor) stops
// accepting, aborts the requests in flight and joins every thread.
#ifndef TRAINLET_CONTROLLER_HTTP_SERVER_H_
#define TRAINLET_CONTROLLER_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/view_model.h"
#include "rendezvous/tls_files.h"

namespace trainlet::controller {

// A ViewSource over whole snapshots (each job with all its nodes), taken
// anew for every call: the tests' and fake_controller_http's.
using SnapshotFn = std::function<ControllerSnapshot()>;
class SnapshotViewSource : public ViewSource {
 public:
  explicit SnapshotViewSource(SnapshotFn snapshot) : snapshot_(std::move(snapshot)) {}
  ControllerSnapshot Summary() override;
  absl::StatusOr<JobView> Job(absl::string_view job_id, size_t first_node,
                              size_t max_nodes) override;
  absl::StatusOr<std::vector<EvidenceView>> Evidence(absl::string_view job_id) override;

 private:
  SnapshotFn snapshot_;
};

inline constexpr int kDefaultHttpPort = 29680;

// How the views are protected (docs/security.md).
enum class HttpTls { kOff, kServer, kMutual };

struct HttpServerOptions {
  std::string address = "0.0.0.0";  // an IPv4 or IPv6 literal, or a host name.
  int port = kDefaultHttpPort;      // 0: any free port (tests).
  int threads = 4;
  int max_queued_requests = 64;  // complete requests waiting for a worker; beyond: 503.
  int max_connections = 512;     // open at once; beyond, new ones are closed.
  // Connections still sending their request, from one address (beyond, new
  // ones are closed) and in all (beyond, the oldest is closed for a new one).
  int max_pending_per_peer = 32;
  int max_pending = 256;
  absl::Duration head_timeout = absl::Seconds(10);  // accept -> whole request.
  // An answer not read whole within this is cut (its connection closed).
  absl::Duration answer_timeout = absl::Seconds(30);
  // Answers waiting for clients to read them, and their bytes not yet
  // written; beyond either the oldest is cut.
  int max_answers_sending = 128;
  size_t max_bytes_sending = 64 << 20;
  size_t max_answer_bytes = 4 << 20;  // JSON of one answer (not /metrics).
  size_t default_page_nodes = 256;    // /api/jobs/JOB without limit=.
  size_t max_page_nodes = 4096;
  std::string token;  // empty: no token.
  HttpTls tls_mode = HttpTls::kOff;
  rendezvous::TlsConfig tls;  // with tls_mode: this side's cert and key, and the CA.
};

class HttpServer {
 public:
  // Binds and starts serving. Unavailable naming the address when it
  // cannot listen there (in use, not an address of this host);
  // FailedPrecondition when the TLS material does not load.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           ViewSource* source);
  // Over whole snapshots (tests, fake_controller_http).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           SnapshotFn snapshot);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Idempotent.
  void Stop();

  struct Stats {
    int64_t served = 0;     // requests a worker answered.
    int64_t busy = 0;       // answered 503: the queue was full.
    int64_t timed_out = 0;  // no whole request within head_timeout.
    int64_t refused = 0;    // closed at once: over a connection cap.
    int64_t dropped = 0;    // answers cut: not read in time, or over a cap.
    int64_t evicted = 0;    // closed while sending its request, for a newer one.
  };
  Stats stats() const;

 private:
  struct Impl;
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<ViewSource> owned_source_;
  int port_ = 0;
};

// The page served at `/` (also for the tests).
const std::string& StatusPageHtml();

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HTTP_SERVER_H_

// ControllerHost: everything `trainlet controller` serves, built and torn
// down in one place (and by the tests, which run it in-process):
//
//   HistoryStore (SQLite, --db; none: history in memory only)
//     -> ControllerCore (restored from the store at start)
//     <- ControllerService (gRPC adapter, token and TLS check)
//     <- GrpcServer on listen (our own listener; grpc.health.v1 on the port)
//     <- HttpServer on http (the views: `/`, `/api/jobs`, `/metrics`,
//        `/healthz`; snapshot.h adapts the core to them)
//   + a sweeper thread calling ControllerCore::Sweep every second.
//
// Threading: Start/Shutdown from the owner's thread; core() is thread-safe.
// Shutdown (idempotent; the destructor runs it) stops the server (waiting
// up to `grace` for calls), then the sweeper, saves the summaries of the
// jobs that changed; the store closes last.
#ifndef TRAINLET_CONTROLLER_CONTROLLER_HOST_H_
#define TRAINLET_CONTROLLER_CONTROLLER_HOST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/periodic.h"
#include "controller/controller_core.h"
#include "controller/history_store.h"
#include "controller/http_server.h"
#include "controller/job_tokens.h"
#include "controller/step_rate.h"
#include "rendezvous/tcp_listener.h"
#include "rendezvous/tls_files.h"

namespace trainlet::rendezvous {
class GrpcServer;
}  // namespace trainlet::rendezvous

namespace trainlet::controller {

class ControllerService;

inline constexpr absl::Duration kSweepEvery = absl::Seconds(1);

struct ControllerHostOptions {
  ControllerOptions core;
  HistoryStoreOptions history;  // history.path empty: no database.
  // A damaged database is an error (DataLoss) instead of being moved aside
  // for an empty one (--db-required).
  bool db_required = false;
  JobTokens tokens;  // --token-file (job_tokens.h); none: every caller is accepted.
  rendezvous::ListenAddress listen{"0.0.0.0", 29600};  // port 0 = any free port.
  rendezvous::TlsConfig tls;
  // The views; port 0 = any free port (the default here, for tests;
  // `trainlet controller` passes --http, default :29680). Read-only; with
  // http_token they want `Authorization: Bearer`, with http_tls HTTPS with
  // `tls`'s certificate (kMutual: and a client certificate of its CA):
  // docs/security.md.
  rendezvous::ListenAddress http{"127.0.0.1", 0};
  std::string http_token;
  HttpTls http_tls = HttpTls::kOff;
  std::string version;           // shown by the views.
  Clock* clock = Clock::Real();  // wall time; tests pass a SimulatedClock.
};

class ControllerHost {
 public:
  // Opens and loads the history, then binds. A damaged database is moved
  // aside (HistoryStore::MoveAside) with one error line, and the controller
  // starts with an empty one, unless db_required. Errors: the store's
  // (FailedPrecondition naming the file; DataLoss with db_required), the
  // bind's (IsAddressInUse).
  static absl::StatusOr<std::unique_ptr<ControllerHost>> Start(ControllerHostOptions options);
  ~ControllerHost();
  ControllerHost(const ControllerHost&) = delete;
  ControllerHost& operator=(const ControllerHost&) = delete;

  int port() const;
  int http_port() const;
  ControllerCore& core() { return *core_; }
  void Shutdown(absl::Duration grace);

 private:
  ControllerHost() = default;

  // Destroyed in reverse: server and sweeper before the core, the store last.
  std::unique_ptr<HistoryStore> store_;
  std::unique_ptr<ControllerCore> core_;
  std::unique_ptr<rendezvous::PeerVerifier> peers_;
  std::unique_ptr<ControllerService> service_;
  std::unique_ptr<rendezvous::GrpcServer> server_;
  std::unique_ptr<StepRateTracker> rates_;
  std::unique_ptr<ViewSource> views_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<PeriodicThread> sweeper_;
  bool shut_down_ = false;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_CONTROLLER_HOST_H_

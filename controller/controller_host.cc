#include "controller/controller_host.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "common/host_names.h"
#include "common/logging.h"
#include "controller/controller_service.h"
#include "controller/snapshot.h"
#include "rendezvous/grpc_server.h"

namespace trainlet::controller {
namespace {

// Opens the store into `store` and loads its bounded summary.
absl::StatusOr<StoredHistory> OpenHistory(const ControllerHostOptions& options,
                                          std::unique_ptr<HistoryStore>* store) {
  absl::StatusOr<std::unique_ptr<HistoryStore>> opened =
      HistoryStore::Open(options.history, options.clock);
  if (!opened.ok()) return opened.status();
  *store = std::move(*opened);
  return (*store)->Load(options.core.max_jobs, kEntriesRestoredPerJob);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerHost>> ControllerHost::Start(
    ControllerHostOptions options) {
  std::unique_ptr<ControllerHost> host(new ControllerHost());
  StoredHistory restored;
  if (!options.history.path.empty()) {
    absl::StatusOr<StoredHistory> loaded = OpenHistory(options, &host->store_);
    if (!loaded.ok() && absl::IsDataLoss(loaded.status()) && !options.db_required) {
      // A damaged file: out of the way, and a fresh one, rather than no
      // controller at all (its history is not the job's).
      host->store_.reset();
      absl::StatusOr<std::string> moved =
          HistoryStore::MoveAside(options.history.path, options.clock->Now());
      if (!moved.ok()) return moved.status();
      TLOG(kError) << loaded.status().message() << "; moved it aside to " << SafeForLog(*moved, 256)
                   << " and starting with an empty history (--db-required makes this an error)";
      loaded = OpenHistory(options, &host->store_);
    }
    if (!loaded.ok()) return loaded.status();
    restored = *std::move(loaded);
  }
  host->core_ = std::make_unique<ControllerCore>(options.core, options.clock, host->store_.get());
  host->core_->Restore(restored);
  if (options.tls.enabled()) {
    auto peers = rendezvous::PeerVerifier::Create(
        options.tls.ca_pem, Clock::Real(), rendezvous::PeerVerifier::kMaxRemembered, "controller");
    if (!peers.ok()) return peers.status();
    host->peers_ = std::move(*peers);
  }
  host->service_ =
      std::make_unique<ControllerService>(host->core_.get(), options.tokens, host->peers_.get());
  rendezvous::GrpcServerOptions so;
  so.listen.push_back(options.listen);
  so.name = "controller";
  so.tls = options.tls;
  // A controller has no heartbeats; its clients' keepalive is the default.
  so.heartbeat_timeout = absl::Seconds(10);
  // A report is one small message every few seconds per connection.
  so.bdp_probe = false;
  auto server = rendezvous::GrpcServer::Start(so, {host->service_.get()});
  if (!server.ok()) return server.status();
  host->server_ = std::move(*server);
  ControllerCore* core = host->core_.get();
  host->rates_ = std::make_unique<StepRateTracker>();
  HttpServerOptions ho;
  ho.address = options.http.host.empty() ? "0.0.0.0" : options.http.host;
  ho.port = options.http.port;
  ho.token = options.http_token;
  ho.tls_mode = options.http_tls;
  ho.tls = options.tls;
  host->views_ = std::make_unique<CoreViewSource>(core, host->rates_.get(), options.clock,
                                                  options.clock->Now(), options.version);
  auto http = HttpServer::Start(ho, host->views_.get());
  if (!http.ok()) return http.status();
  const bool grpc_protected = !options.tokens.empty() || options.tls.enabled();
  const bool views_open = options.http_token.empty() && options.http_tls == HttpTls::kOff;
  if (grpc_protected && views_open && !IsLoopbackHost(ho.address)) {
    TLOG(kWarning) << "controller: the views on "
                   << rendezvous::FormatHostPort(ho.address, http.value()->port())
                   << " need no token and are plaintext, while the gRPC port needs "
                   << (options.tokens.empty() ? "TLS" : "a token")
                   << ": anyone who reaches them reads every job's nodes, commands and failures; "
                      "set --http-token-file (and --http-tls), or bind --http to 127.0.0.1 "
                      "(docs/security.md)";
  }
  host->http_ = std::move(*http);
  host->server_->SetServing(true);
  host->sweeper_ = std::make_unique<PeriodicThread>(kSweepEvery, [core] { core->Sweep(); });
  const ControllerCore::Stats stats = core->stats();
  TLOG(kInfo) << "controller listening on "
              << rendezvous::FormatHostPort(options.listen.host, host->port()) << " ("
              << (options.history.path.empty()
                      ? std::string("no --db: history in memory only")
                      : "history in " + SafeForLog(options.history.path, 256) + ", " +
                            std::to_string(stats.history_entries) + " entries of " +
                            std::to_string(stats.jobs) + " jobs reloaded")
              << (options.tokens.empty() ? ", no token"
                  : options.tokens.size() > 1
                      ? ", " + std::to_string(options.tokens.size()) + " tokens"
                      : "")
              << (options.tls.enabled() ? ", mutual TLS" : ", plaintext") << "); views on "
              << (options.http_tls == HttpTls::kOff ? "http://" : "https://")
              << rendezvous::FormatHostPort(ho.address, host->http_port()) << "/"
              << (options.http_token.empty() ? "" : " (token)");
  return host;
}

ControllerHost::~ControllerHost() { Shutdown(absl::ZeroDuration()); }

int ControllerHost::port() const { return server_->port(0); }

int ControllerHost::http_port() const { return http_ ? http_->port() : 0; }

void ControllerHost::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (http_) http_->Stop();
  if (server_) server_->Shutdown(grace);
  sweeper_.reset();
  if (core_) core_->Flush();
}

}  // namespace trainlet::controller

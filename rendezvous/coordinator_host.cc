#include "rendezvous/coordinator_host.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_server.h"
#include "rendezvous/liveness_receiver.h"

namespace trainlet::rendezvous {

absl::StatusOr<std::unique_ptr<CoordinatorHost>> CoordinatorHost::Start(
    CoordinatorHostOptions options) {
  std::unique_ptr<CoordinatorHost> host(new CoordinatorHost());
  const absl::Duration heartbeat_timeout = options.core.heartbeat_timeout;
  const std::string job_id = options.core.job_id;
  const int min_nodes = options.core.min_nodes;
  const int max_nodes = options.core.max_nodes;
  // A released member's directives (its next assignment among them) go as
  // signed, not encrypted, datagrams: not with TLS.
  if (options.tls.enabled()) options.core.release_streams_from = 0;
  host->core_ = std::make_unique<Coordinator>(std::move(options.core));
  if (options.tls.enabled()) {
    absl::StatusOr<std::unique_ptr<PeerVerifier>> peers = PeerVerifier::Create(options.tls.ca_pem);
    if (!peers.ok()) return peers.status();
    host->peers_ = std::move(*peers);
  }
  host->trimmer_ =
      std::make_unique<MemoryTrimmer>(Clock::Monotonic(), std::move(options.memory_trim));
  host->service_ = std::make_unique<CoordinatorService>(host->core_.get(), options.token,
                                                        host->peers_.get(), host->trimmer_.get());
  GrpcServerOptions so;
  so.listen.push_back({options.bind_addr, options.port});
  so.max_connections = options.max_connections;
  so.reserved_descriptors = options.reserved_descriptors;
  so.heartbeat_timeout = heartbeat_timeout;
  so.name = "coordinator";
  so.tls = options.tls;
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(so, {host->service_.get()});
  if (!server.ok()) return server.status();
  host->server_ = std::move(*server);
  Coordinator* core = host->core_.get();
  absl::StatusOr<std::unique_ptr<LivenessReceiver>> liveness =
      LivenessReceiver::Start(options.bind_addr, host->port(), core);
  if (liveness.ok()) {
    host->liveness_ = std::move(*liveness);
    core->EnableUdpLiveness(host->liveness_->port(), host->liveness_.get());
    // A restart brings every member's READY (and REJOIN confirmation) at
    // about the same moment; each small datagram takes about 768 bytes of
    // the receive buffer. Those that do not fit are repeated, but late.
    constexpr int kBytesPerQueuedDatagram = 768;
    const int fits = host->liveness_->receive_buffer_bytes() / kBytesPerQueuedDatagram;
    if (fits < max_nodes) {
      TLOG(kWarning) << "the UDP liveness socket's receive buffer holds about " << fits
                     << " datagrams (" << host->liveness_->receive_buffer_bytes() / 1024
                     << " KiB, capped by net.core.rmem_max), fewer than the job's " << max_nodes
                     << " nodes: at a restart, datagrams beyond it are dropped and repeated, "
                        "which slows the restart; on this node raise it with sysctl -w "
                        "net.core.rmem_max=4194304 (the coordinator asks for 4 MiB)";
    }
  } else {
    TLOG(kWarning) << "no UDP liveness (" << liveness.status().message()
                   << "): agents will send Report heartbeats every interval instead, which costs "
                      "the coordinator more CPU";
  }
  host->ticker_ = std::make_unique<PeriodicThread>(kCoordinatorTickEvery, [core] { core->Tick(); });
  MemoryTrimmer* trimmer = host->trimmer_.get();
  host->memory_thread_ = std::make_unique<PeriodicThread>(
      MemoryTrimmer::kPollEvery, [core, trimmer, released = 0]() mutable {
        // Released streams free their calls now and their idle connections
        // when the server closes them (kConnectionIdleClose).
        const int now_released = core->GetSnapshot().released;
        if (now_released > released) {
          trimmer->StreamsReleased(kConnectionIdleClose + absl::Seconds(5));
        }
        released = now_released;
        trimmer->MaybeTrim();
      });
  TLOG(kInfo) << "coordinator for job " << SafeForLog(job_id) << " listening on "
              << FormatHostPort(options.bind_addr, host->port()) << " ("
              << (min_nodes == max_nodes ? absl::StrCat(max_nodes)
                                         : absl::StrCat(min_nodes, "..", max_nodes))
              << " nodes" << (options.token.empty() ? ", no token" : "")
              << (options.tls.enabled() ? ", mutual TLS" : ", plaintext") << ")";
  TLOG(kDebug) << "coordinator: at most " << host->server_->max_connections()
               << " connections; UDP liveness " << (host->liveness_ ? "on" : "off");
  return host;
}

CoordinatorHost::~CoordinatorHost() { Shutdown(absl::ZeroDuration()); }

int CoordinatorHost::port() const { return server_->port(0); }

int CoordinatorHost::liveness_port() const { return liveness_ ? liveness_->port() : 0; }

LivenessReceiverStats CoordinatorHost::liveness_stats() const {
  return liveness_ ? liveness_->stats() : LivenessReceiverStats{};
}

void CoordinatorHost::SetServing(bool serving) { server_->SetServing(serving); }

bool CoordinatorHost::accepting() const { return server_->accepting(); }

void CoordinatorHost::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (core_) core_->Shutdown("the coordinator is shutting down");
  if (server_) server_->Shutdown(grace);
  // The ticker before the receiver: a restart it makes sends REJOINs
  // through the receiver.
  ticker_.reset();
  liveness_.reset();
  memory_thread_.reset();
}

}  // namespace trainlet::rendezvous

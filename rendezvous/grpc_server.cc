#include "rendezvous/grpc_server.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/health_service.h"
#include "rendezvous/keepalive.h"

namespace trainlet::rendezvous {
namespace {

int Ms(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

std::shared_ptr<grpc::ServerCredentials> CredentialsFor(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  // The handshake requires a client certificate and proves the client holds
  // its key; the services check its chain (PeerVerifier), so that a refused
  // client learns why from a gRPC status instead of a closed connection.
  grpc::SslServerCredentialsOptions ssl(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  ListenAddress a;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &a.port) ||
      a.port < 0 || a.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a HOST:PORT address: ", SafeForLog(host_port)));
  }
  a.host = host_port.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  return a;
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::vector<std::string>& listen, const std::vector<grpc::Service*>& services) {
  GrpcServerOptions options;
  for (const std::string& hp : listen) {
    absl::StatusOr<ListenAddress> a = ParseListenAddress(hp);
    if (!a.ok()) return a.status();
    options.listen.push_back(*a);
  }
  return Start(options, services);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const GrpcServerOptions& options, const std::vector<grpc::Service*>& services) {
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  // Bind first: a taken port must fail before anything else is built.
  absl::StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Bind(options.listen);
  if (!listener.ok()) return listener.status();
  server->listener_ = std::move(*listener);
  server->max_connections_ =
      options.max_connections > 0
          ? options.max_connections
          : std::max(16, DescriptorLimit() - std::max(0, options.reserved_descriptors));

  grpc::ServerBuilder builder;
  server->health_ = std::make_unique<HealthService>();
  builder.RegisterService(server->health_.get());
  for (grpc::Service* s : services) builder.RegisterService(s);
  // Connections come from our listener (no AddListeningPort); gRPC runs the
  // TLS handshake, if any, on each one it is handed.
  server->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      CredentialsFor(options.tls));
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  if (!options.bdp_probe) builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, Ms(kHandshakeTimeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Ms(kMaxConnectionIdle));
  // No server-side timer per call deadline. Every parked Join carries its
  // agent's deadline, and each such timer sits in gRPC's timer table (Debian's
  // gRPC is built without NDEBUG: a debug hash of every timer, scanned under
  // the shard's lock on each start and cancel). At 10,000 parked Joins their
  // cancels were a tenth of the coordinator's CPU while a round's answers
  // went out, and serialised them. Nothing is lost: the coordinator reads the
  // caller's deadline (ctx->deadline()) and answers before it, and a caller
  // whose deadline passes cancels the call itself (RST_STREAM: OnCancel).
  // This holds for every server built here (coordinator, health, controller):
  // Join is the only handler that waits, the others answer at once, and the
  // streams (Watch, the controller's reports) are opened without a deadline.
  // A peer that holds a call open and goes quiet could do so before by
  // sending no deadline; it is bounded by the streams per connection, the
  // connection cap, the memory quota and keepalive.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 0);
  // Keepalive is a fallback for half-open connections; liveness datagrams
  // and heartbeats detect a silent node (keepalive.h). The server keeps
  // pinging a connection whose Watch stream carries no data for a long time.
  const KeepaliveSettings keepalive = KeepaliveFor(options.heartbeat_timeout);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(keepalive.time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(keepalive.timeout));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Agents ping at KeepaliveFor(their heartbeat timeout).time, even with no
  // call open; allow it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Ms(MinPermittedPingInterval()));
  // TCP reads sized by what arrives, not 8 KiB per idle connection, once
  // DisableGrpcReadChunks turned gRPC's experiment off (grpc_memory.h).
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, kReadChunkBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, kMinReadChunkBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kMaxReadChunkBytes);
  grpc::ResourceQuota quota(absl::StrCat("trainlet ", options.name));
  quota.Resize(kMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::InternalError(absl::StrCat("gRPC could not start the ", options.name,
                                            " server (run with --log-level=debug for why)"));
  }

  TcpListener::Options lo;
  lo.name = options.name;
  lo.max_connections = server->max_connections_;
  grpc::experimental::ExternalConnectionAcceptor* acceptor = server->acceptor_.get();
  lo.on_connection = [acceptor](int fd, int listener_fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listener_fd;
    p.fd = fd;
    acceptor->HandleNewConnection(&p);
  };
  HealthService* health = server->health_.get();
  lo.on_accepting_change = [health](bool accepting) { health->SetAccepting(accepting); };
  server->listener_->Start(std::move(lo));
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::SetServing(bool serving) { health_->SetServing(serving); }

bool GrpcServer::accepting() const { return listener_->accepting(); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // The listener first: gRPC leaks (neither serves nor closes) a connection
  // handed to it after shutdown.
  if (listener_) listener_->Stop();
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
}

}  // namespace trainlet::rendezvous

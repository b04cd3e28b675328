// A gRPC server for this process on listening sockets it owns
// (tcp_listener.h), with the standard grpc.health.v1 service (kubelet gRPC
// probes, `trainlet health`; SERVING when the owner said so and the listener
// can accept) and whatever services the caller registers. The building block
// of CoordinatorHost (coordinator_host.h) and HealthServer (health_server.h).
// Every connection gets the limits of docs/protocol.md, "Connections" and
// "Limits at scale" (kMaxRequestBytes, kMaxStreamsPerConnection, kHandshakeTimeout, keepalive.h,
// one kMemoryQuotaBytes quota for the whole server).
//
// With GrpcServerOptions::tls set, every connection is TLS with a client
// certificate: gRPC runs the handshake on the connections our listener hands
// it; a client without a certificate, or one that cannot prove it holds the
// certificate's key, is refused in the handshake. The chain is NOT checked
// against the CA here: each service must (CoordinatorService does, with
// PeerVerifier), so that a refused client gets a status that says why. The
// health service answers any TLS client.
//
// Threading: Start, SetServing, Shutdown from any one thread at a time;
// accepting() from any thread. RPCs run on gRPC's callback threads.
#ifndef TRAINLET_RENDEZVOUS_GRPC_SERVER_H_
#define TRAINLET_RENDEZVOUS_GRPC_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/descriptors.h"
#include "rendezvous/tcp_listener.h"
#include "rendezvous/tls_files.h"

namespace grpc {
class Server;
class Service;
namespace experimental {
class ExternalConnectionAcceptor;
}  // namespace experimental
}  // namespace grpc

namespace trainlet::rendezvous {

class HealthService;

// The largest request the server reads (RESOURCE_EXHAUSTED beyond it); a
// JoinRequest is at most kMaxJoinRequestBytes (protocol.h).
inline constexpr int kMaxRequestBytes = 64 * 1024;
// An agent has at most Join, Watch, Report and Leave open on its connection.
inline constexpr int kMaxStreamsPerConnection = 16;
// A connection that has not spoken HTTP/2 by then is closed.
inline constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
// A connection with no call for this long is closed (a client reconnects
// transparently on its next call). An agent has a Join or Watch open, unless
// its stream was released (coordinator.h): its connection then goes, and
// node 0 keeps none of its gRPC state. gRPC 1.51 closes such a connection
// one to two of these after its last call (its idle timer skips a period
// in which a call started): ConnectionIdleClose.
inline constexpr absl::Duration kMaxConnectionIdle = absl::Seconds(30);
inline constexpr absl::Duration kConnectionIdleClose = absl::Seconds(60);  // 2 x kMaxConnectionIdle
// gRPC's buffers for every connection of one server, together.
inline constexpr int64_t kMemoryQuotaBytes = 256LL << 20;

struct GrpcServerOptions {
  std::vector<ListenAddress> listen;
  // Connections all listening sockets together may hold; 0: the descriptor
  // budget, DescriptorLimit() - reserved_descriptors (at least 16).
  int max_connections = 0;
  // Descriptors the rest of the process needs (see common/descriptors.h).
  int reserved_descriptors = kBaseDescriptors;
  // Keepalive derives from it (KeepaliveFor).
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // Names the server in log lines.
  std::string name = "server";
  // TLS when enabled(): clients must present a certificate (its chain is
  // the services' to check, above). server_name is not used here.
  TlsConfig tls;
  // HTTP/2 BDP probing (a PING per burst of data received, to size the
  // flow-control window). Worth nothing for small messages on idle
  // connections (the controller's reports: off, which saves about 15% of
  // its CPU per report, docs/benchmarks.md).
  bool bdp_probe = true;
};

class GrpcServer {
 public:
  // Binds every address, then starts. Bind errors name the address and the
  // cause (IsAddressInUse tells a taken port).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const GrpcServerOptions& options, const std::vector<grpc::Service*>& services);
  // The same with default options, listening on every "host:port" in
  // `listen` ("0.0.0.0:29400", "[::1]:0"; port 0 = any free port).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::vector<std::string>& listen, const std::vector<grpc::Service*>& services);
  ~GrpcServer();

  // The port actually bound for listen[i].
  int port(size_t i) const { return listener_->port(i); }
  // grpc.health.v1 status for the empty service name ("" = whole server).
  void SetServing(bool serving);
  // False while the listener cannot accept (out of descriptors, at the cap).
  bool accepting() const;
  int max_connections() const { return max_connections_; }
  TcpListener::Stats listener_stats() const { return listener_->stats(); }
  // Stops accepting connections, then calls; cancels what is left after
  // `grace`. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer() = default;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<TcpListener> listener_;
  int max_connections_ = 0;
  bool shut_down_ = false;
};

// "0.0.0.0:29400" -> {"0.0.0.0", 29400}; "[::1]:0" -> {"::1", 0}.
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& host_port);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_SERVER_H_

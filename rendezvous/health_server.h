// A server that serves ONLY grpc.health.v1, for the agent's health port
// (kubelet probes, `trainlet health`): the rendezvous service is never
// reachable there. It listens through the same hardened listener as the
// coordinator (tcp_listener.h), capped at kHealthConnections connections,
// since probes open a connection or two at a time.
//
// It answers SERVING when the agent says so (SetServing) and its own
// listener can accept; it does not reflect the coordinator port's state, so
// that a flood of the coordinator port cannot make kubelet restart node 0.
//
// Threading: as GrpcServer.
#ifndef TRAINLET_RENDEZVOUS_HEALTH_SERVER_H_
#define TRAINLET_RENDEZVOUS_HEALTH_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/grpc_server.h"

namespace trainlet::rendezvous {

inline constexpr int kHealthConnections = 16;

class HealthServer {
 public:
  // port 0 = any free port. Errors as GrpcServer::Start.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const std::string& bind_addr,
                                                             int port);
  int port() const { return server_->port(0); }
  void SetServing(bool serving) { server_->SetServing(serving); }
  // Idempotent; the destructor calls it.
  void Shutdown() { server_->Shutdown(absl::ZeroDuration()); }

 private:
  explicit HealthServer(std::unique_ptr<GrpcServer> server) : server_(std::move(server)) {}
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_HEALTH_SERVER_H_

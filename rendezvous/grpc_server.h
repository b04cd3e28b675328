// A gRPC server for this process: the listening ports, the standard
// grpc.health.v1 service (kubelet gRPC probes), and whatever services the
// caller registers (the coordinator on node 0 and standalone).
#ifndef TRAINLET_RENDEZVOUS_GRPC_SERVER_H_
#define TRAINLET_RENDEZVOUS_GRPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace trainlet::rendezvous {

class HealthService;

class GrpcServer {
 public:
  // Listens on every "host:port" in `listen` (port 0 = any free port).
  // Fails with an error naming the address when a port is taken.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::vector<std::string>& listen, const std::vector<grpc::Service*>& services);
  ~GrpcServer();

  // The port actually bound for listen[i].
  int port(size_t i) const { return ports_.at(i); }
  // grpc.health.v1 status for the empty service name ("" = whole server).
  void SetServing(bool serving);
  // Stops accepting calls, cancels what is left after `grace`.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer() = default;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> ports_;
  bool shut_down_ = false;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_SERVER_H_

#include "rendezvous/health_server.h"

#include <utility>

namespace trainlet::rendezvous {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& bind_addr,
                                                                  int port) {
  GrpcServerOptions o;
  o.listen.push_back({bind_addr, port});
  o.max_connections = kHealthConnections;
  o.name = "health";
  absl::StatusOr<std::unique_ptr<GrpcServer>> server = GrpcServer::Start(o, {});
  if (!server.ok()) return server.status();
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(*server)));
}

}  // namespace trainlet::rendezvous

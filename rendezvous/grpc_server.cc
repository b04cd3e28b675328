#include "rendezvous/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/health_service.h"

namespace trainlet::rendezvous {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::vector<std::string>& listen, const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder builder;
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->health_ = std::make_unique<HealthService>();
  builder.RegisterService(server->health_.get());
  server->ports_.assign(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    builder.AddListeningPort(listen[i], grpc::InsecureServerCredentials(), &server->ports_[i]);
  }
  for (grpc::Service* s : services) builder.RegisterService(s);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  // Agents ping every 2 s to notice a vanished coordinator; allow it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Notice a vanished agent's half-open connection.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  // Bind exclusively: a second process on the same port must fail, not share.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  bool bound = server->server_ != nullptr;
  for (int p : server->ports_) bound = bound && p > 0;
  if (!bound) {
    if (server->server_) server->server_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", absl::StrJoin(listen, ", "),
                     ": the port is in use or the address is not local; pick another port (e.g. "
                     "--coordinator=HOST:PORT or --health-port) or stop the process holding it"));
  }
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::SetServing(bool serving) { health_->SetServing(serving); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace trainlet::rendezvous

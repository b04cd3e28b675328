#include "rendezvous/health_service.h"

namespace trainlet::rendezvous {

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const grpc::health::v1::HealthCheckRequest* request,
                                               grpc::health::v1::HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // "" is the whole agent; "trainlet.v1.Agent" is an alias some probes name.
  if (!request->service().empty() && request->service() != "trainlet.v1.Agent") {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "unknown service; probe \"\" or \"trainlet.v1.Agent\""));
    return reactor;
  }
  response->set_status(serving() ? grpc::health::v1::HealthCheckResponse::SERVING
                                 : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace trainlet::rendezvous

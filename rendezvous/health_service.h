// grpc.health.v1.Health (Check) for kubelet gRPC probes and `trainlet
// health`. One status for the whole server (service name ""), plus named
// services; unknown names answer NOT_FOUND as the protocol specifies.
#ifndef TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_
#define TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"

namespace trainlet::rendezvous {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  void SetServing(bool serving) { serving_.store(serving); }
  bool serving() const { return serving_.load(); }

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;

 private:
  std::atomic<bool> serving_{false};
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_

// grpc.health.v1.Health (Check) for kubelet gRPC probes and `trainlet
// health`. One status for the whole server (service name "", or the alias
// "trainlet.v1.Agent"); other names answer NOT_FOUND as the protocol
// specifies. SERVING when the owner says so (SetServing) and the server's
// listener can accept connections (SetAccepting, from the listener).
//
// Threading: every method is thread-safe (two atomics).
#ifndef TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_
#define TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"

namespace trainlet::rendezvous {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  void SetServing(bool serving) { serving_.store(serving); }
  void SetAccepting(bool accepting) { accepting_.store(accepting); }
  bool serving() const { return serving_.load() && accepting_.load(); }

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;

 private:
  std::atomic<bool> serving_{false};
  std::atomic<bool> accepting_{true};
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_HEALTH_SERVICE_H_

// The reporter's gRPC transport: trainlet.v1.Controller/Report to the
// controller at `target`, with the job token and, when configured, mutual
// TLS (the same material as the rendezvous). The channel re-dials at most
// every report interval while the controller is away.
//
// Threading: Send from one thread at a time (the reporter's); Cancel from any.
#ifndef TRAINLET_AGENT_REPORTER_GRPC_H_
#define TRAINLET_AGENT_REPORTER_GRPC_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/reporter.h"
#include "rendezvous/tls_files.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace trainlet::agent {

class GrpcReportTransport : public ReportTransport {
 public:
  // `target`: "host:port"; `tls` disabled: plaintext.
  GrpcReportTransport(const std::string& target, std::string token,
                      const rendezvous::TlsConfig& tls, absl::Duration interval);
  ~GrpcReportTransport() override;

  absl::Status Send(const v1::HealthReport& report, absl::Duration timeout) override;
  void Cancel() override;

 private:
  struct Stub;
  const std::string token_;
  std::unique_ptr<Stub> stub_;
  absl::Mutex mu_;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_REPORTER_GRPC_H_

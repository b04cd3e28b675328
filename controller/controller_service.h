// gRPC adapter for the controller's core (controller_core.h): maps
// trainlet.v1.Controller calls onto it after checking the caller (mutual
// TLS client certificate when configured, rendezvous/grpc_auth.h; then the
// token, job_tokens.h): a job-scoped token may report and read only its
// jobs (PERMISSION_DENIED for another's; ListJobs lists only its own).
// Unary calls are answered at once. An agent's report stream (ReportStream,
// its periodic reports) stays open for the agent's life and holds a reactor
// and the message it reads into; its caller is checked once, when the stream
// starts (each report's job against the token's scope), so a token or
// certificate revoked later is noticed when the agent reconnects. Rejections
// are logged, rate-limited. Holds no controller logic.
//
// Threading: every call and every stream's reads run on gRPC callback
// threads; the core is thread-safe. The service owns neither the core nor
// the verifier.
#ifndef TRAINLET_CONTROLLER_CONTROLLER_SERVICE_H_
#define TRAINLET_CONTROLLER_CONTROLLER_SERVICE_H_

#include <string>

#include "common/logging.h"
#include "controller/controller_core.h"
#include "controller/job_tokens.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::controller {

class ControllerService final : public v1::Controller::CallbackService {
 public:
  // No tokens accept every caller; `peers` may be null (plaintext).
  ControllerService(ControllerCore* core, JobTokens tokens,
                    rendezvous::PeerVerifier* peers = nullptr);

  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::HealthReport* request,
                                   v1::HealthReportResponse* response) override;
  grpc::ServerReadReactor<v1::HealthReport>* ReportStream(
      grpc::CallbackServerContext* ctx, v1::HealthReportResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

 private:
  // The caller's scope (every job without tokens), or why it is refused.
  absl::StatusOr<TokenScope> CheckCaller(grpc::CallbackServerContext* ctx, absl::string_view rpc);

  ControllerCore* const core_;
  const JobTokens tokens_;
  rendezvous::PeerVerifier* const peers_;
  LogLimiter reject_log_;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_CONTROLLER_SERVICE_H_

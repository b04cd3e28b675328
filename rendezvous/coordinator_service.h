// gRPC adapter for the Coordinator: maps trainlet.v1.Rendezvous calls onto
// the core (coordinator.h), checks the caller before any call runs (with
// mutual TLS, that its certificate chains to the job's CA: tls_files.h's
// PeerVerifier; then the per-job token in metadata; rejections are logged,
// rate-limited, and answered UNAUTHENTICATED naming the reason), passes each Join's deadline to the
// core, and parks long-poll joins and directive streams as callback-API reactors. Holds no
// rendezvous logic of its own.
//
// Threading: reactors run on gRPC's callback threads; the core is
// thread-safe. The service does not own the core.
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_SERVICE_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_SERVICE_H_

#include <string>

#include "common/logging.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {

class CoordinatorService final : public v1::Rendezvous::CallbackService {
 public:
  // An empty token accepts every caller. `peers` (may be null: plaintext, or
  // certificates verified by the handshake) checks the client certificate
  // of every call; it must outlive the service.
  CoordinatorService(Coordinator* core, std::string token, PeerVerifier* peers = nullptr);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerWriteReactor<v1::Directive>* Watch(grpc::CallbackServerContext* ctx,
                                                 const v1::WatchRequest* request) override;
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::ReportRequest* request,
                                   v1::ReportResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;

 private:
  // The client certificate (when peers_), then the token.
  absl::Status CheckCaller(grpc::CallbackServerContext* ctx, absl::string_view rpc);

  Coordinator* const core_;
  const std::string token_;
  PeerVerifier* const peers_;
  LogLimiter reject_log_;
};

// "ipv4:10.0.0.3:4242" -> "10.0.0.3"; "ipv6:[::1]:4242" -> "::1".
std::string HostFromPeer(const std::string& peer);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_SERVICE_H_

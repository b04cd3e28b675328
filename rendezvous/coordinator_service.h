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

#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {

// Logs, once per round, when every Join answer of the round has been handed
// to the transport ("round 3: all 1000 answers sent 12.3 ms after the
// first"): the server's own part of "every response sent after the round
// closed", which the load benchmark reads (bench/coordinator_load.cc). Keeps
// only the latest round. Thread-safe.
class RoundAnswerTracker {
 public:
  // `trimmer` (may be null) hears when a round's answers are all sent.
  // `level`: of the line (DEBUG where an agent hosts the coordinator: a
  // timing, not an event of the job).
  explicit RoundAnswerTracker(Clock* clock = Clock::Monotonic(), MemoryTrimmer* trimmer = nullptr,
                              LogLevel level = LogLevel::kInfo)
      : clock_(clock), trimmer_(trimmer), level_(level) {}
  // A Join of `round` (of `nnodes` members) was answered successfully, or an
  // assignment of it was queued on a stream (a re-join by datagram).
  void Answered(uint64_t round, int nnodes);
  // That answer's call is done. Returns how long after the round's first
  // answer its last one was sent, once, when this was the last; nullopt
  // otherwise.
  std::optional<absl::Duration> Sent(uint64_t round);

 private:
  Clock* const clock_;
  MemoryTrimmer* const trimmer_;
  const LogLevel level_;
  absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int expected_ ABSL_GUARDED_BY(mu_) = 0;
  int sent_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_answer_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorService final : public v1::Rendezvous::CallbackService {
 public:
  // An empty token accepts every caller. `peers` (may be null: plaintext, or
  // certificates verified by the handshake) checks the client certificate
  // of every call; it must outlive the service. `trimmer` (may be null; must
  // outlive the service) is told when a round's answers are all sent.
  CoordinatorService(Coordinator* core, std::string token, PeerVerifier* peers = nullptr,
                     MemoryTrimmer* trimmer = nullptr);
  ~CoordinatorService() override;

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
  RoundAnswerTracker answers_;
};

// "ipv4:10.0.0.3:4242" -> "10.0.0.3"; "ipv6:[::1]:4242" -> "::1".
std::string HostFromPeer(const std::string& peer);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_SERVICE_H_

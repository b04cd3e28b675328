// CoordinatorHost: everything that serves a job's rendezvous, built and torn
// down in one place, for both `trainlet run` (the agent of node rank 0) and
// `trainlet coordinator` (standalone):
//
//   Coordinator (the state machine, coordinator.h)
//     <- CoordinatorService (gRPC adapter, token check)
//     <- GrpcServer on bind_addr:port (grpc_server.h: our own listener,
//        grpc.health.v1 on the same port, mutual TLS when options.tls is set)
//   + a ticker thread calling Coordinator::Tick every 20 ms (timeouts);
//   + a memory thread giving back the heap pages a round freed (grpc_memory.h);
//   + a LivenessReceiver on UDP bind_addr:port (liveness_receiver.h); when
//     that port cannot be bound, a warning says so and the members fall back
//     to Report heartbeats.
//
// Start binds the port first, so a taken port fails before anything else is
// built: IsAddressInUse(status) tells it apart (the agent then joins the
// agent that holds it, as torchrun's c10d rendezvous does).
//
// Threading: Start/SetServing/Shutdown from the owner's thread; core() is
// thread-safe (see coordinator.h). Shutdown (idempotent; the destructor runs
// it) ends every Join and Watch with UNAVAILABLE, stops the server (waiting up
// to `grace` for calls to finish), then the liveness thread and the ticker.
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_HOST_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_HOST_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/descriptors.h"
#include "common/periodic.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/liveness_receiver.h"
#include "rendezvous/tcp_listener.h"
#include "rendezvous/tls_files.h"

namespace trainlet::rendezvous {

// How often the coordinator's timeouts are applied (Coordinator::Tick), here
// and in a single-node run's in-process coordinator.
inline constexpr absl::Duration kCoordinatorTickEvery = absl::Milliseconds(20);
static_assert(kCoordinatorTickEvery <= kMaxTickDelay, "the +-5% budget assumes it (protocol.h)");

class CoordinatorService;
class GrpcServer;

struct CoordinatorHostOptions {
  CoordinatorOptions core;  // keepalive derives from core.heartbeat_timeout.
  std::string token;        // empty: every caller is accepted.
  std::string bind_addr = "0.0.0.0";
  int port = 29400;  // 0 = any free port.
  // Connections the coordinator port may hold at once; 0: the descriptor
  // budget, DescriptorLimit() - reserved_descriptors.
  int max_connections = 0;
  // What the rest of the process needs: kBaseDescriptors for `trainlet
  // coordinator`, DescriptorsForAgent(workers, 0) for an agent.
  int reserved_descriptors = kBaseDescriptors;
  // Mutual TLS on the coordinator port when enabled() (tls_files.h); the
  // token is checked as well.
  TlsConfig tls;
  // Gives freed heap back to the kernel after a round's answers are sent;
  // null: malloc_trim(0) (grpc_memory.h). Tests count the calls.
  std::function<void()> memory_trim;
};

class CoordinatorHost {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorHost>> Start(CoordinatorHostOptions options);
  ~CoordinatorHost();
  CoordinatorHost(const CoordinatorHost&) = delete;
  CoordinatorHost& operator=(const CoordinatorHost&) = delete;

  int port() const;
  // The UDP liveness port (port()), or 0 when it could not be bound.
  int liveness_port() const;
  // The liveness thread's counters (all zero without it).
  LivenessReceiverStats liveness_stats() const;
  Coordinator& core() { return *core_; }
  // grpc.health.v1 on the coordinator port.
  void SetServing(bool serving);
  // False while the port cannot accept connections (see above).
  bool accepting() const;
  void Shutdown(absl::Duration grace);

 private:
  CoordinatorHost() = default;

  // Destroyed in reverse: the ticker and the server go before the core.
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<PeerVerifier> peers_;  // with TLS only.
  // Gives a round's freed memory back, on memory_thread_ (grpc_memory.h).
  std::unique_ptr<MemoryTrimmer> trimmer_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<PeriodicThread> ticker_;
  std::unique_ptr<PeriodicThread> memory_thread_;
  std::unique_ptr<LivenessReceiver> liveness_;
  bool shut_down_ = false;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_HOST_H_

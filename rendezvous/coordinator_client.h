// The agent's side of the rendezvous protocol over gRPC, for one coordinator
// address, with the retry policy pods need while they start in any order
// (the coordinator's name may not resolve or answer yet).
//
//  - CoordinatorClient: blocking calls (Join blocks until the round closes).
//    Used by GrpcRendezvousClient, the in-process tests and the benchmarks.
//  - GrpcRendezvousClient: the agent's non-blocking RendezvousClient
//    (rendezvous_client.h) on top of it: a join thread and one sender thread
//    for reports and leaves.
//
// Threading: all methods are thread-safe. Watch delivers directives on gRPC
// threads.
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/liveness_sender.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// The largest answer an agent reads: a JoinResponse with the member list of
// a 10,000-node round is 1-3 MB (about 100 bytes per node, 250 with MPI's
// SSH host keys), above gRPC's default of 4 MB only with long node names
// and RSA keys; the bound leaves room for 10,000 such entries.
inline constexpr int kMaxResponseBytes = 64 << 20;

struct ClientOptions {
  std::string target;  // host:port
  std::string token;   // empty: none sent.
  // Backoff of Join's own retries when the coordinator answers "try
  // again" (10 ms growing to 100 ms), and the channel's reconnect backoff
  // while the coordinator is not up yet. For the latter gRPC (1.51 and
  // later; subchannel.cc, ParseArgsForBackoffValues) raises both values to
  // at least 100 ms, so a waiting agent re-dials every 80-120 ms (20%
  // jitter) and would reach a coordinator that just came up 0-120 ms late
  // (the last of three MPI workers about 90 ms: docs/benchmarks-history.md,
  // issue 33). Join's PortWatch (below) cuts that to about 20 ms.
  absl::Duration min_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(100);
  // Whether a Join waiting for a coordinator that is not up yet watches its
  // port (PortWatch: a connect every port_watch_every for up to 10 s). The
  // agent turns it on for jobs of at most kPortWatchMaxNodes nodes, every
  // PortWatchInterval(max nodes): at most 3,200 SYNs a second in all on the
  // coordinator's host, where a large job would send hundreds of thousands
  // for a gain that its own join spread hides.
  bool port_watch = false;
  absl::Duration port_watch_every = absl::Milliseconds(20);
  // HTTP/2 keepalive pings, to notice a coordinator host that vanished
  // without closing the connection. A transport is closed only after
  // keepalive_time + keepalive_timeout without an answer: keep that above
  // the heartbeat timeout (rendezvous/keepalive.h derives both from it).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Deadlines of the unary calls.
  absl::Duration report_timeout = absl::Seconds(5);
  absl::Duration leave_timeout = absl::Seconds(2);
  // Mutual TLS when enabled() (tls_files.h): this side's certificate, the CA
  // that must have signed the coordinator's, and the name its certificate
  // must carry (tls.server_name, else the host part of `target`).
  TlsConfig tls;
};

class CoordinatorClient {
 public:
  using OnDirective = std::function<void(const v1::Directive&)>;
  using OnStreamEnd = std::function<void(const absl::Status&)>;

  explicit CoordinatorClient(ClientOptions options);
  ~CoordinatorClient();

  // Long-poll join, retried while the coordinator is unreachable, until
  // `deadline`. Returns the coordinator's error (not retried) when it
  // rejects the join (Unauthenticated for a client certificate it does not
  // accept), Unauthenticated when this side's TLS handshake fails
  // kTlsFailuresBeforeGivingUp times in a row (the coordinator's certificate
  // not trusted or not naming it, or a coordinator without TLS),
  // DeadlineExceeded naming the target and the last connection error on
  // timeout (with a hint when a plaintext client's connections are closed,
  // as a TLS coordinator does), Cancelled after CancelJoin().
  absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request, absl::Time deadline);
  // Makes a blocked Join return Cancelled (SIGTERM during rendezvous), and
  // every later one until ResetJoinCancel().
  void CancelJoin();
  void ResetJoinCancel();
  // Cancels the Report/Leave calls in flight (shutdown).
  void CancelCalls();

  // Opens the directive stream. Callbacks run on gRPC threads; on_end runs
  // exactly once, after the last directive.
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request, OnDirective on_directive,
                                     OnStreamEnd on_end);

  absl::Status Report(const v1::ReportRequest& request, absl::Duration timeout,
                      v1::ReportResponse* response = nullptr);
  absl::Status Leave(const v1::LeaveRequest& request, absl::Duration timeout);

  const std::string& target() const { return options_.target; }

 private:
  void Prepare(grpc::ClientContext* ctx) const;
  // Join's error after kTlsFailuresBeforeGivingUp failed handshakes.
  absl::Status TlsRefusal(const absl::Status& last) const;
  void NewChannel();
  std::shared_ptr<grpc::Channel> Channel();
  std::shared_ptr<v1::Rendezvous::Stub> Stub();

  const ClientOptions options_;

  absl::Mutex mu_;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<v1::Rendezvous::Stub> stub_ ABSL_GUARDED_BY(mu_);
  bool join_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* join_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  bool calls_cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// The agent's RendezvousClient over gRPC. Report and Leave go out in order
// from one sender thread (each with its deadline from ClientOptions); a
// queued report is replaced by a newer one of the same round and state (the
// heartbeats repeat the node's state), whose answer then goes to both
// callbacks. Join runs on its own thread.
class GrpcRendezvousClient : public RendezvousClient {
 public:
  explicit GrpcRendezvousClient(ClientOptions options);
  // Cancels a pending join and the calls in flight, and drops what is still
  // queued (call Flush() first to send it).
  ~GrpcRendezvousClient() override;

  void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) override;
  void CancelJoin() override;
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request, OnDirective on_directive,
                                     OnStreamEnd on_end) override;
  void Report(const v1::ReportRequest& request, Done done) override;
  void SetReportResponseHandler(ReportResponseHandler handler) override {
    absl::MutexLock lock(&mu_);
    response_handler_ = std::move(handler);
  }
  void Leave(const v1::LeaveRequest& request, Done done) override;
  // Through a LivenessSender connected when a Join's answer offers a port.
  void SendLivenessDatagram(const LivenessBytes& datagram) override;
  void TakeLivenessDatagrams(std::vector<LivenessBytes>* acks,
                             std::vector<std::string>* directives) override;
  int liveness_fd() const override;
  bool Flush(absl::Duration timeout) override;

 private:
  struct Call {
    std::optional<v1::ReportRequest> report;
    std::optional<v1::LeaveRequest> leave;
    std::vector<Done> done;
  };
  void Enqueue(Call call);
  void SenderLoop();
  // On the join thread: a sender for the port the answer offers (0: none),
  // answering probes for this `incarnation` under the answer's slot and key.
  void ConnectLiveness(const v1::Assignment& assignment, uint64_t incarnation);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }

  const ClientOptions options_;
  CoordinatorClient client_;
  std::thread join_thread_;  // the loop thread only.

  mutable absl::Mutex mu_;
  std::deque<Call> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ReportResponseHandler response_handler_ ABSL_GUARDED_BY(mu_);
  // Connected on the join thread (DNS), used by the agent's loop.
  std::shared_ptr<LivenessSender> liveness_ ABSL_GUARDED_BY(mu_);
  std::thread sender_;
};

// gRPC's status codes that mean "try again": the coordinator is not up yet.
bool IsRetryableJoinError(const absl::Status& status);

// The largest job (its --nnodes MAX) whose agents watch the coordinator's
// port while it is not up (ClientOptions::port_watch).
inline constexpr int kPortWatchMaxNodes = 64;
// The watch's period for a job of `max_nodes`: 5 ms for up to 16 nodes (the
// last worker joins about 2.5 ms after the coordinator listens, not 10),
// growing with the job to 20 ms at kPortWatchMaxNodes, so that the job's
// agents together connect at most 3,200 times a second.
absl::Duration PortWatchInterval(int max_nodes);

// Watches for a closed TCP port to open, for Join: gRPC re-dials a closed
// port only every 80-120 ms (it floors its reconnect backoff at 100 ms), so
// a waiting agent reached a coordinator that just came up 0-120 ms late.
// A thread of its own resolves `target` ("host:port") once, then connects
// to it every `every` (one SYN and one RST while it is closed, as gRPC's
// own dials) and calls `on_open` once when a connection succeeds; Join
// then resets the channel's backoff, and gRPC dials at once. Resolving
// blocks in getaddrinfo (no timeout of its own), so the destructor does
// not wait for the thread: a late thread finds itself stopped and ends.
class PortWatch {
 public:
  PortWatch(std::string target, absl::Duration every, std::function<void()> on_open);
  ~PortWatch();
  PortWatch(const PortWatch&) = delete;
  PortWatch& operator=(const PortWatch&) = delete;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

// A connection error that says the TLS handshake failed (a certificate was
// refused, or the peer does not speak TLS), from gRPC's UNAVAILABLE text.
bool IsTlsHandshakeError(const absl::Status& status);
// Consecutive handshake failures before Join gives up: one could be a
// coordinator restarting mid-handshake; three are a configuration error.
inline constexpr int kTlsFailuresBeforeGivingUp = 3;

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_

// RendezvousClient: the agent's side of the rendezvous protocol as a small,
// non-blocking interface, so that the agent's round can be driven by a fake
// in unit tests (rendezvous/testing/fake_rendezvous_client.h). The real one
// (coordinator_client.h, GrpcRendezvousClient) talks gRPC to one coordinator
// address and runs blocking calls on its own threads.
//
// No call blocks its caller: results come back through callbacks, which run
// on the client's threads (or inline, in fakes). Report and Leave are queued
// in order on one sender thread; a queued report is replaced by a newer one
// of the same round and state (heartbeats repeat the node's state) rather
// than piling up behind a slow coordinator.
//
// Threading: every method is thread-safe.
#ifndef TRAINLET_RENDEZVOUS_RENDEZVOUS_CLIENT_H_
#define TRAINLET_RENDEZVOUS_RENDEZVOUS_CLIENT_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/liveness_datagram.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// An open Watch stream; destroying it cancels the stream and waits until its
// callbacks have finished (none runs after the destructor returns).
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  virtual void Cancel() = 0;
};

class RendezvousClient {
 public:
  using JoinDone = std::function<void(absl::StatusOr<v1::Assignment>)>;
  using Done = std::function<void(const absl::Status&)>;
  using OnDirective = std::function<void(const v1::Directive&)>;
  using OnStreamEnd = std::function<void(const absl::Status&)>;

  virtual ~RendezvousClient() = default;

  // Long-poll join, retried while the coordinator is unreachable, for up to
  // `timeout`. `done` runs exactly once: with the assignment, the
  // coordinator's error (not retried), DeadlineExceeded naming what was
  // missing, or Cancelled after CancelJoin(). One join at a time.
  virtual void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) = 0;
  // Makes a pending Join finish with Cancelled (signal during rendezvous).
  virtual void CancelJoin() = 0;

  // Opens the directive stream. on_end runs exactly once, after the last
  // directive.
  virtual std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request,
                                             OnDirective on_directive, OnStreamEnd on_end) = 0;

  // Queued on the sender thread; `done` (may be null) gets the answer.
  virtual void Report(const v1::ReportRequest& request, Done done) = 0;
  // Every successful Report's answer body goes to `handler` (on the
  // sender thread), before that Report's `done`. The MPI launcher reads
  // placement from it. Set before the first Report.
  using ReportResponseHandler = std::function<void(const v1::ReportResponse&)>;
  virtual void SetReportResponseHandler(ReportResponseHandler handler) = 0;
  virtual void Leave(const v1::LeaveRequest& request, Done done) = 0;

  // Sends one UDP liveness datagram to the liveness port of the coordinator
  // (Assignment.liveness_udp_port of the last successful Join, on the host
  // this client dials) and returns at once, never blocking: dropped when
  // there is no such port or the kernel cannot take it now.
  virtual void SendLivenessDatagram(const LivenessBytes& datagram) = 0;
  // Appends what came back on that port, unchecked (the round machine
  // checks them), at most kMaxAcksPerTake in all: the coordinator's acks and
  // REJOINs (48 bytes) to `acks`, its DIRECTIVE datagrams (longer, up to
  // kMaxDirectiveDatagramBytes) to `directives`; never blocks. A client
  // without UDP liveness has none.
  static constexpr int kMaxAcksPerTake = 16;
  virtual void TakeLivenessDatagrams(std::vector<LivenessBytes>* acks,
                                     std::vector<std::string>* directives) {
    (void)acks;
    (void)directives;
  }
  // The socket those come in on, for the caller's poll (readable: call
  // TakeLivenessDatagrams); -1 while there is none. It may change after a
  // Join's answer. Not owned.
  virtual int liveness_fd() const { return -1; }

  // Waits up to `timeout` for the queued Report/Leave calls to go out (the
  // agent calls it once before it exits). True when the queue is empty.
  virtual bool Flush(absl::Duration timeout) = 0;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_RENDEZVOUS_CLIENT_H_

// InProcessRendezvousClient: the RendezvousClient of a single-node run
// (`trainlet run` with nothing configured, or --standalone), talking to a
// Coordinator in the same process by plain calls: no gRPC channel, no server,
// no socket. The coordinator core and its rules are the same as over gRPC
// (joins, reports, heartbeats, restarts, verdicts), so a single-node run
// behaves like node 0 of a one-node job; only the transport is left out.
//
// Callbacks run inline: from the caller's thread (an error or an answer that
// is ready at once, every Report and Leave) or from whichever thread drives
// the coordinator (its ticker, another call). The agent's callbacks only post
// to its inbox, so that is safe.
//
// Threading: every method is thread-safe. The coordinator must outlive the
// client and every WatchStream it returned.
#ifndef TRAINLET_RENDEZVOUS_IN_PROCESS_CLIENT_H_
#define TRAINLET_RENDEZVOUS_IN_PROCESS_CLIENT_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/rendezvous_client.h"

namespace trainlet::rendezvous {

class InProcessRendezvousClient : public RendezvousClient {
 public:
  // `peer_addr` stands in for the address a gRPC request would come from
  // (the member's address when it advertises none).
  InProcessRendezvousClient(Coordinator* core, std::string peer_addr);

  void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) override;
  void CancelJoin() override;
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request, OnDirective on_directive,
                                     OnStreamEnd on_end) override;
  void Report(const v1::ReportRequest& request, Done done) override;
  void SetReportResponseHandler(ReportResponseHandler handler) override;
  void Leave(const v1::LeaveRequest& request, Done done) override;
  // The in-process coordinator offers no UDP liveness (its agent's Reports
  // are plain calls): nothing to send.
  void SendLivenessDatagram(const LivenessBytes&) override {}
  // Nothing is ever queued.
  bool Flush(absl::Duration timeout) override { return true; }

 private:
  Coordinator* const core_;
  const std::string peer_addr_;
  absl::Mutex mu_;
  uint64_t join_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  ReportResponseHandler report_handler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_IN_PROCESS_CLIENT_H_

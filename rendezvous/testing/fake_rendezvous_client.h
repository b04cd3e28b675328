// A scripted rendezvous::RendezvousClient for unit tests of the agent: it
// records every call and lets the test answer them, inline and on the test
// thread, so scenarios are deterministic.
//
//   - Join: recorded; answered at once by `on_join` when set (return the
//     answer), else left pending until AnswerJoin(). CancelJoin() answers a
//     pending join with Cancelled, as the real client does.
//   - Watch: the latest stream is the "current" one; SendDirective() and
//     EndStream() deliver on it. Destroying a stream that has not ended ends
//     it with Cancelled (the real client's behaviour).
//   - Report/Leave: recorded and answered at once with `report_status` (a
//     function of the request, OK by default).
//
// Threading: thread-safe (a mutex), but meant for one test thread.
#ifndef TRAINLET_RENDEZVOUS_TESTING_FAKE_RENDEZVOUS_CLIENT_H_
#define TRAINLET_RENDEZVOUS_TESTING_FAKE_RENDEZVOUS_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "rendezvous/rendezvous_client.h"

namespace trainlet::rendezvous::testing {

class FakeRendezvousClient : public RendezvousClient {
 public:
  FakeRendezvousClient();
  ~FakeRendezvousClient() override;

  // RendezvousClient.
  void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) override;
  void CancelJoin() override;
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request, OnDirective on_directive,
                                     OnStreamEnd on_end) override;
  void Report(const v1::ReportRequest& request, Done done) override;
  void SetReportResponseHandler(ReportResponseHandler handler) override;
  // The answer body each successful Report gets (default: empty).
  std::function<v1::ReportResponse(const v1::ReportRequest&)> report_response;
  void Leave(const v1::LeaveRequest& request, Done done) override;
  bool Flush(absl::Duration timeout) override { return true; }
  void SendLivenessDatagram(const LivenessBytes& datagram) override;
  void TakeLivenessDatagrams(std::vector<LivenessBytes>* acks,
                             std::vector<std::string>* directives) override;
  int liveness_fd() const override { return liveness_fd_value; }

  // ---- Test controls.
  // What liveness_fd() says (no real socket behind it).
  int liveness_fd_value = -1;
  // Comes back on the next TakeLivenessDatagrams, unasked (a REJOIN).
  void DeliverDatagram(const LivenessBytes& datagram);
  // A DIRECTIVE datagram, on the next TakeLivenessDatagrams.
  void DeliverDirectiveDatagram(const std::string& datagram);
  // Called for each datagram sent; what it returns comes back on the next
  // TakeLivenessDatagrams (as the coordinator's ack would).
  std::function<std::optional<LivenessBytes>(const LivenessBytes&)> on_datagram;
  // Answers the next Join at once when set; nullopt leaves it pending.
  std::function<std::optional<absl::StatusOr<v1::Assignment>>(const v1::JoinRequest&)> on_join;
  std::function<absl::Status(const v1::ReportRequest&)> report_status;
  // Called after each Report is recorded (before its answer).
  std::function<void(const v1::ReportRequest&)> on_report;

  bool join_pending() const;
  void AnswerJoin(absl::StatusOr<v1::Assignment> result);
  // On the current stream; false when there is none (or it ended).
  bool SendDirective(const v1::Directive& directive);
  bool EndStream(const absl::Status& status);
  bool stream_open() const;

  // What the agent sent.
  std::vector<v1::JoinRequest> joins() const;
  std::vector<absl::Duration> join_timeouts() const;
  std::vector<v1::WatchRequest> watches() const;
  std::vector<v1::ReportRequest> reports() const;
  std::vector<v1::LeaveRequest> leaves() const;
  std::vector<LivenessBytes> datagrams() const;
  int cancel_joins() const;
  // Reports with `state` (heartbeats are RUNNING).
  int CountReports(v1::ReportRequest::State state) const;

  // Shared with the streams it hands out, which may outlive a Watch call.
  struct Stream {
    OnDirective on_directive;
    OnStreamEnd on_end;
    bool ended = false;
  };

 private:
  mutable absl::Mutex mu_;
  JoinDone pending_join_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JoinRequest> joins_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> join_timeouts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WatchRequest> watches_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportRequest> reports_ ABSL_GUARDED_BY(mu_);
  ReportResponseHandler response_handler_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::LeaveRequest> leaves_ ABSL_GUARDED_BY(mu_);
  std::vector<LivenessBytes> datagrams_ ABSL_GUARDED_BY(mu_);
  std::vector<LivenessBytes> acks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> directive_datagrams_ ABSL_GUARDED_BY(mu_);
  int cancel_joins_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Stream> current_ ABSL_GUARDED_BY(mu_);
};

// An assignment as a coordinator would hand it out for a job whose nodes all
// run `local_world_size` workers: round `round`, this node at `node_rank` of
// `nnodes`, heartbeats every `heartbeat_interval`.
v1::Assignment MakeAssignment(uint64_t round, int node_rank, int nnodes, int local_world_size,
                              absl::Duration heartbeat_interval = absl::Milliseconds(500),
                              int restart_count = 0);

// A directive for `round` of the coordinator incarnation MakeAssignment uses.
v1::Directive MakeDirective(uint64_t round);

}  // namespace trainlet::rendezvous::testing

#endif  // TRAINLET_RENDEZVOUS_TESTING_FAKE_RENDEZVOUS_CLIENT_H_

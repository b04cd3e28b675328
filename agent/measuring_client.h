// MeasuringClient: the agent's side of --preflight's network measurement
// (docs/preflight.md, "The network"), as a RendezvousClient that wraps the
// real one, so that the round machine (round.h) never sees it:
//
//   Join(request) --> + link_port, network_due (Hooks::due)
//        |
//        v                 answer: Assignment.measure_first (exclude|fail)
//   inner Join ----------------------------------------------+
//        |  answer: an assignment or an error                |  measure the plan's links on
//        v                                                   v  this client's thread (bounded)
//   done(answer)  <-- inner Join (request + the links) <-- MEASURING
//
// It also runs this node's link measurer (preflight/link_server.h), keeps
// it accepting the job's key from every answer (Assignment.link_key),
// times every Join for the clock-offset check (Hooks::clock), and measures
// the plan of a warn round (Assignment.network_plan) when asked (Measure).
//
// Bounded: a plan is validated (preflight::ValidatePlan) and measured
// within its per-link limits; the coordinator may ask to measure at most
// kMaxMeasuresPerJoin times for one Join call (then the answer is
// an error naming it).
//
// Threading: thread-safe. The measuring thread is this object's; its
// destructor stops it (a measurement in progress ends within its bounds)
// and fails the Join it held with Cancelled.
#ifndef TRAINLET_AGENT_MEASURING_CLIENT_H_
#define TRAINLET_AGENT_MEASURING_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "preflight/clock_offset.h"
#include "preflight/dns.h"
#include "preflight/link_client.h"
#include "preflight/link_server.h"
#include "rendezvous/rendezvous_client.h"

namespace trainlet::agent {

inline constexpr int kMaxMeasuresPerJoin = 3;

class MeasuringClient : public rendezvous::RendezvousClient {
 public:
  struct Options {
    std::string job_id;
    std::string node_id;
    // The measurer's listening address and port (--preflight-port; 0: any).
    std::string host = "0.0.0.0";
    int port = 0;
    preflight::MeasureOptions measure;  // each link's limits, under the plan's
  };
  struct Hooks {
    // Whether this Join's links are due (JoinRequest.network_due). May be
    // empty: never.
    std::function<bool()> due;
    // Each Join's four timestamps (preflight/clock_offset.h). May be empty.
    std::function<void(const preflight::ClockSample&)> clock;
    // The links of a measure_first plan were measured (whatever they
    // showed). May be empty.
    std::function<void()> measured;
    // Brings the report the Join sends again up to date (the clock offset
    // of the exchange that asked for the measurement). May be empty.
    std::function<void(v1::PreflightReport*)> refresh;
  };

  // Starts the measurer; an error when it cannot listen (the agent then
  // joins without one: it is neither measured nor measures).
  static absl::StatusOr<std::unique_ptr<MeasuringClient>> Start(
      rendezvous::RendezvousClient* inner, Options options, Hooks hooks,
      std::shared_ptr<preflight::Resolver> resolver);
  ~MeasuringClient() override;

  int port() const { return server_->port(); }
  // Measures `plan` now (blocking, bounded): the warn round's links.
  std::vector<v1::LinkResult> Measure(const v1::NetworkPlan& plan);

  void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) override;
  void CancelJoin() override;
  std::unique_ptr<rendezvous::WatchStream> Watch(const v1::WatchRequest& request,
                                                 OnDirective on_directive,
                                                 OnStreamEnd on_end) override {
    return inner_->Watch(request, std::move(on_directive), std::move(on_end));
  }
  void Report(const v1::ReportRequest& request, Done done) override {
    inner_->Report(request, std::move(done));
  }
  void SetReportResponseHandler(ReportResponseHandler handler) override {
    inner_->SetReportResponseHandler(std::move(handler));
  }
  void Leave(const v1::LeaveRequest& request, Done done) override {
    inner_->Leave(request, std::move(done));
  }
  void SendLivenessDatagram(const rendezvous::LivenessBytes& datagram) override {
    inner_->SendLivenessDatagram(datagram);
  }
  void TakeLivenessDatagrams(std::vector<rendezvous::LivenessBytes>* acks,
                             std::vector<std::string>* directives) override {
    inner_->TakeLivenessDatagrams(acks, directives);
  }
  int liveness_fd() const override { return inner_->liveness_fd(); }
  bool Flush(absl::Duration timeout) override { return inner_->Flush(timeout); }

 private:
  struct Pending {
    uint64_t generation = 0;
    v1::JoinRequest request;
    absl::Duration timeout;
    JoinDone done;
    int measures = 0;
    v1::NetworkPlan plan;  // to measure, before it is sent again.
  };
  MeasuringClient(rendezvous::RendezvousClient* inner, Options options, Hooks hooks,
                  std::shared_ptr<preflight::Resolver> resolver,
                  std::unique_ptr<preflight::LinkServer> server);
  // One inner Join of `pending`; its answer in OnAnswer.
  void Send(Pending pending);
  void OnAnswer(Pending pending, absl::Time sent, absl::StatusOr<v1::Assignment> answer);
  void Loop();

  rendezvous::RendezvousClient* const inner_;
  const Options options_;
  const Hooks hooks_;
  const std::shared_ptr<preflight::Resolver> resolver_;
  const std::unique_ptr<preflight::LinkServer> server_;

  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // CancelJoin moves it on.
  std::deque<Pending> to_measure_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_MEASURING_CLIENT_H_

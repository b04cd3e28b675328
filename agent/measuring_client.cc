#include "agent/measuring_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::agent {

absl::StatusOr<std::unique_ptr<MeasuringClient>> MeasuringClient::Start(
    rendezvous::RendezvousClient* inner, Options options, Hooks hooks,
    std::shared_ptr<preflight::Resolver> resolver) {
  preflight::LinkServerOptions so;
  so.job_id = options.job_id;
  so.node_id = options.node_id;
  so.host = options.host;
  so.port = options.port;
  absl::StatusOr<std::unique_ptr<preflight::LinkServer>> server =
      preflight::LinkServer::Start(std::move(so));
  if (!server.ok()) return server.status();
  return std::unique_ptr<MeasuringClient>(new MeasuringClient(
      inner, std::move(options), std::move(hooks), std::move(resolver), *std::move(server)));
}

MeasuringClient::MeasuringClient(rendezvous::RendezvousClient* inner, Options options, Hooks hooks,
                                 std::shared_ptr<preflight::Resolver> resolver,
                                 std::unique_ptr<preflight::LinkServer> server)
    : inner_(inner),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      resolver_(std::move(resolver)),
      server_(std::move(server)) {
  thread_ = std::thread([this] { Loop(); });
}

MeasuringClient::~MeasuringClient() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  // A Join that was to be measured, or sent again, ends now.
  std::deque<Pending> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(to_measure_);
  }
  for (Pending& p : left) p.done(absl::CancelledError("the agent is stopping"));
}

std::vector<v1::LinkResult> MeasuringClient::Measure(const v1::NetworkPlan& plan) {
  preflight::LinkIdentity me{options_.job_id, options_.node_id, plan.round(), plan.nonce()};
  absl::StatusOr<std::vector<v1::LinkResult>> links =
      preflight::MeasurePlan(me, plan, options_.measure, resolver_.get());
  if (!links.ok()) {
    TLOG(kWarning) << "preflight: the coordinator's network plan was refused: "
                   << links.status().message();
    return {};
  }
  return *std::move(links);
}

void MeasuringClient::Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) {
  Pending p;
  p.request = request;
  p.request.set_link_port(server_->port());
  p.request.set_network_due(hooks_.due ? hooks_.due() : false);
  p.timeout = timeout;
  p.done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    p.generation = generation_;
  }
  Send(std::move(p));
}

void MeasuringClient::CancelJoin() {
  {
    absl::MutexLock lock(&mu_);
    ++generation_;
  }
  inner_->CancelJoin();
}

void MeasuringClient::Send(Pending pending) {
  const absl::Time sent = absl::Now();
  const v1::JoinRequest request = pending.request;
  const absl::Duration timeout = pending.timeout;
  // The answer comes on the inner client's thread (or inline).
  auto shared = std::make_shared<Pending>(std::move(pending));
  inner_->Join(request, timeout, [this, shared, sent](absl::StatusOr<v1::Assignment> answer) {
    OnAnswer(std::move(*shared), sent, std::move(answer));
  });
}

void MeasuringClient::OnAnswer(Pending pending, absl::Time sent,
                               absl::StatusOr<v1::Assignment> answer) {
  if (!answer.ok()) return pending.done(std::move(answer));
  const v1::Assignment& a = *answer;
  if (a.link_key() != 0) server_->SetRound(std::max<uint64_t>(a.round(), 1), a.link_key());
  if (hooks_.clock && a.join_received_unix_micros() > 0 && a.answered_unix_micros() > 0) {
    hooks_.clock({sent, absl::FromUnixMicros(a.join_received_unix_micros()),
                  absl::FromUnixMicros(a.answered_unix_micros()), absl::Now()});
  }
  if (!a.has_measure_first()) return pending.done(std::move(answer));
  if (++pending.measures > kMaxMeasuresPerJoin) {
    return pending.done(absl::InternalError(
        absl::StrCat("the coordinator asked this node to measure its links ", pending.measures,
                     " times for one join; is another trainlet version coordinating?")));
  }
  // Peers may measure to this node from now on.
  server_->SetRound(a.measure_first().round(), a.measure_first().nonce());
  pending.plan = a.measure_first();
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = pending.generation != generation_ || stop_;
    if (!cancelled) to_measure_.push_back(std::move(pending));
  }
  if (cancelled) pending.done(absl::CancelledError("join cancelled while measuring the links"));
}

void MeasuringClient::Loop() {
  while (true) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](MeasuringClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->stop_ || !c->to_measure_.empty();
          },
          this));
      if (stop_) return;
      p = std::move(to_measure_.front());
      to_measure_.pop_front();
    }
    const v1::NetworkPlan& plan = p.plan;
    const absl::Time start = absl::Now();
    std::vector<v1::LinkResult> links = Measure(plan);
    TLOG(kInfo) << "preflight: measured " << links.size() << " link(s) in "
                << absl::FormatDuration(absl::Now() - start) << " before round " << plan.round();
    if (hooks_.measured) hooks_.measured();
    v1::PreflightReport* report = p.request.mutable_preflight();
    if (report->node_id().empty()) report->set_node_id(options_.node_id);
    if (report->incarnation() == 0) report->set_incarnation(p.request.member().incarnation());
    report->clear_links();
    for (v1::LinkResult& l : links) *report->add_links() = std::move(l);
    if (hooks_.refresh) hooks_.refresh(report);
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      cancelled = p.generation != generation_ || stop_;
    }
    if (cancelled) {
      p.done(absl::CancelledError("join cancelled while measuring the links"));
      continue;
    }
    const uint64_t generation = p.generation;
    Send(std::move(p));
    // A CancelJoin between the check above and the inner Join (which
    // starts with its cancel cleared) would be lost: cancel it again.
    bool moved;
    {
      absl::MutexLock lock(&mu_);
      moved = generation != generation_;
    }
    if (moved) inner_->CancelJoin();
  }
}

}  // namespace trainlet::agent

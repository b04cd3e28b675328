#include "rendezvous/testing/scale_job.h"

#include <time.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous::testing {
namespace {

class NullSink : public DirectiveSink {
 public:
  void Send(const v1::Directive&, bool) override {}
  void Close(const absl::Status&) override {}
};

absl::Duration CpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

v1::JoinRequest Req(int i, int hint) {
  v1::JoinRequest r;
  r.mutable_member()->set_node_id(absl::StrCat("job-node-", i));
  r.mutable_member()->set_incarnation(1000 + i);
  r.set_job_id("job");
  r.set_protocol_version(kProtocolVersion);
  r.set_rank_hint(hint);
  r.set_local_world_size(8);
  r.set_master_port(29500);
  r.set_advertise_addr(absl::StrCat("10.0.", i / 256, ".", i % 256));
  return r;
}

template <typename M>
M Addressed(const v1::JoinRequest& r, uint64_t round) {
  M m;
  *m.mutable_member() = r.member();
  m.set_job_id("job");
  m.set_round(round);
  return m;
}

}  // namespace

absl::StatusOr<ScaleJobCost> RunScaleJob(int n, bool elastic) {
  SimulatedClock clock(absl::FromUnixSeconds(1700000000));
  CoordinatorOptions o;
  o.job_id = "job";
  o.min_nodes = elastic ? n - 1 : n;
  o.max_nodes = n;
  o.max_restarts = elastic ? 1 : 0;
  o.last_call = absl::Milliseconds(500);
  o.heartbeat_timeout = absl::Seconds(5);
  o.min_nodes_timeout = absl::Minutes(5);
  o.incarnation = 0xC0;
  o.clock = &clock;
  Coordinator core(o);
  std::vector<v1::JoinRequest> reqs;
  for (int i = 0; i < n; ++i) reqs.push_back(Req(i, elastic ? -1 : (i * 7919) % n));
  // A round's answers may run on two threads (RunActions).
  std::atomic<int> answered{0};
  auto done = [&answered](absl::StatusOr<v1::Assignment> a) { answered += a.ok(); };

  const absl::Duration start = CpuTime();
  for (const v1::JoinRequest& r : reqs) {
    // With a deadline, as the agents' Joins have: the ticker, which runs
    // every 20 ms while the joins arrive, must not walk the parked ones.
    core.Join(r, "", clock.Now() + absl::Minutes(10), done);
    core.GetSnapshot();  // the health and status pages ask for it often.
    core.Tick();
  }
  if (answered != n) {
    return absl::InternalError(absl::StrCat(answered.load(), " of ", n, " joins answered"));
  }
  const uint64_t round = core.GetSnapshot().round;
  std::vector<uint64_t> watch_ids;
  for (const v1::JoinRequest& r : reqs) {
    watch_ids.push_back(
        core.Watch(Addressed<v1::WatchRequest>(r, round), std::make_shared<NullSink>())
            .value_or(0));
  }
  for (int beat = 0; beat < 3; ++beat) {
    clock.Advance(absl::Milliseconds(500));
    for (const v1::JoinRequest& r : reqs) {
      v1::ReportRequest rep = Addressed<v1::ReportRequest>(r, round);
      rep.set_state(v1::ReportRequest::RUNNING);
      if (absl::Status s = core.Report(rep); !s.ok()) return s;
    }
    core.Tick();
  }
  // Every stream breaks and is re-opened at once (a proxy restart).
  for (int i = 0; i < n; ++i) {
    core.WatchClosed(watch_ids[i]);
    core.Watch(Addressed<v1::WatchRequest>(reqs[i], round), std::make_shared<NullSink>())
        .IgnoreError();
  }
  core.Tick();
  if (elastic) {
    // One node leaves: every survivor re-joins round 2, which closes when
    // the last of them is back.
    v1::LeaveRequest leave;
    *leave.mutable_member() = reqs[0].member();
    leave.set_job_id("job");
    if (absl::Status s = core.Leave(leave); !s.ok()) return s;
    answered = 0;
    for (int i = 1; i < n; ++i) {
      v1::JoinRequest r = reqs[i];
      r.set_last_round(round);
      core.Join(r, "", absl::InfiniteFuture(), done);
    }
    if (answered != n - 1) {
      return absl::InternalError(
          absl::StrCat(answered.load(), " of ", n - 1, " re-joins answered"));
    }
    if (core.GetSnapshot().round != round + 1) {
      return absl::InternalError(absl::StrCat("the re-joins closed round ",
                                              core.GetSnapshot().round, ", not ", round + 1));
    }
    reqs.erase(reqs.begin());
  }
  const uint64_t last_round = core.GetSnapshot().round;
  for (const v1::JoinRequest& r : reqs) {
    v1::ReportRequest rep = Addressed<v1::ReportRequest>(r, last_round);
    rep.set_state(v1::ReportRequest::SUCCEEDED);
    core.Report(rep).IgnoreError();
  }
  ScaleJobCost cost;
  cost.cpu = CpuTime() - start;
  cost.member_walks = core.MemberWalksForTest();
  if (core.GetSnapshot().phase != Phase::kSucceeded) {
    return absl::InternalError("the job did not succeed after every node reported success");
  }
  return cost;
}

}  // namespace trainlet::rendezvous::testing

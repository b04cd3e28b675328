// The rendezvous state machine driven directly (no gRPC), with a simulated
// clock: every timeout is exercised by advancing time, never by sleeping.
#include "rendezvous/coordinator.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

class RecordingSink : public DirectiveSink {
 public:
  void Send(const v1::Directive& d, bool last) override {
    directives.push_back(d);
    if (last) closed = true;
  }
  void Close(const absl::Status& s) override {
    closed = true;
    close_status = s;
  }
  std::vector<v1::Directive> directives;
  bool closed = false;
  absl::Status close_status;
};

struct JoinResult {
  std::optional<absl::StatusOr<v1::Assignment>> result;
  uint64_t ticket = 0;
  bool done() const { return result.has_value(); }
  const v1::Assignment& assignment() const { return result->value(); }
  absl::Status status() const { return result->status(); }
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void Make(int min_nodes, int max_nodes, int max_restarts = 0) {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.max_restarts = max_restarts;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Seconds(60);
    o.incarnation = 0xC0;
    o.clock = &clock_;
    core_ = std::make_unique<Coordinator>(o);
  }

  static v1::JoinRequest Req(const std::string& node, uint64_t inc, int hint = -1, int lws = 2) {
    v1::JoinRequest r;
    r.mutable_member()->set_node_id(node);
    r.mutable_member()->set_incarnation(inc);
    r.set_job_id("job");
    r.set_rank_hint(hint);
    r.set_local_world_size(lws);
    r.set_master_port(29500);
    return r;
  }

  std::shared_ptr<JoinResult> Join(const v1::JoinRequest& r, const std::string& peer = "") {
    auto res = std::make_shared<JoinResult>();
    std::string addr = peer.empty() ? absl::StrCat("10.0.0.", r.member().incarnation()) : peer;
    res->ticket = core_->Join(r, addr, [res](absl::StatusOr<v1::Assignment> a) {
      ASSERT_FALSE(res->done()) << "done called twice";
      res->result = std::move(a);
    });
    return res;
  }

  std::shared_ptr<RecordingSink> Watch(const v1::JoinRequest& r, uint64_t round,
                                       uint64_t* id = nullptr) {
    auto sink = std::make_shared<RecordingSink>();
    v1::WatchRequest w;
    *w.mutable_member() = r.member();
    w.set_job_id("job");
    w.set_round(round);
    absl::StatusOr<uint64_t> wid = core_->Watch(w, sink);
    EXPECT_TRUE(wid.ok()) << wid.status();
    if (id && wid.ok()) *id = *wid;
    return sink;
  }

  absl::Status Report(const v1::JoinRequest& r, uint64_t round, v1::ReportRequest::State state,
                      int code = 0) {
    v1::ReportRequest rep;
    *rep.mutable_member() = r.member();
    rep.set_job_id("job");
    rep.set_round(round);
    rep.set_state(state);
    rep.set_exit_code(code);
    return core_->Report(rep);
  }

  SimulatedClock clock_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(CoordinatorTest, StaticRound_ClosesWhenAllJoined_HintsBecomeRanks) {
  Make(3, 3);
  auto a = Join(Req("pod-a", 1, 2));
  auto b = Join(Req("pod-b", 2, 0));
  EXPECT_FALSE(a->done());
  EXPECT_FALSE(b->done());
  auto c = Join(Req("pod-c", 3, 1, 4));
  ASSERT_TRUE(a->done() && b->done() && c->done());
  EXPECT_EQ(a->assignment().node_rank(), 2);
  EXPECT_EQ(b->assignment().node_rank(), 0);
  EXPECT_EQ(c->assignment().node_rank(), 1);
  EXPECT_EQ(a->assignment().round(), 1u);
  EXPECT_EQ(a->assignment().nnodes(), 3);
  EXPECT_EQ(a->assignment().world_size(), 8);
  // Rank 0 is pod-b: its address is the master address for everyone.
  EXPECT_EQ(a->assignment().master_addr(), "10.0.0.2");
  EXPECT_EQ(a->assignment().master_port(), 29500);
  // Global ranks: node 0 (2 workers) 0-1, node 1 (4 workers) 2-5, node 2 6-7.
  EXPECT_EQ(c->assignment().self().first_global_rank(), 2);
  EXPECT_EQ(a->assignment().self().first_global_rank(), 6);
  EXPECT_EQ(a->assignment().coordinator_incarnation(), 0xC0u);
  EXPECT_EQ(a->assignment().nodes_size(), 0) << "nodes only on request";
}

TEST_F(CoordinatorTest, WantNodes_GetsWholeMemberListInRankOrder) {
  Make(2, 2);
  auto r0 = Req("n-1", 1);
  r0.set_want_nodes(true);
  auto a = Join(r0);
  auto b = Join(Req("n-0", 2));
  ASSERT_TRUE(a->done() && b->done());
  ASSERT_EQ(a->assignment().nodes_size(), 2);
  EXPECT_EQ(a->assignment().nodes(0).member().node_id(), "n-0");
  EXPECT_EQ(a->assignment().nodes(1).member().node_id(), "n-1");
  EXPECT_EQ(b->assignment().nodes_size(), 0);
}

TEST_F(CoordinatorTest, AdvertisedAddressWinsOverPeerAddress) {
  Make(1, 1);
  auto r = Req("n", 7, 0);
  r.set_advertise_addr("node0.example");
  auto a = Join(r, "127.0.0.1");
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->assignment().master_addr(), "node0.example");
}

TEST_F(CoordinatorTest, Join_WrongJobId_IsRejected) {
  Make(2, 2);
  auto r = Req("a", 1);
  r.set_job_id("other");
  auto a = Join(r);
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(a->status().message(), HasSubstr("\"other\""));
}

TEST_F(CoordinatorTest, Join_MalformedFields_AreRejectedNamingTheField) {
  Make(2, 2);
  auto r = Req("", 1);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("node_id"));
  r = Req("a", 0);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("incarnation"));
  r = Req("a", 1, -1, 0);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("local_world_size"));
  r = Req("a b", 1);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("node_id"));
  r = Req("a", 1);
  r.set_master_port(70000);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("master_port"));
  EXPECT_EQ(core_->GetSnapshot().gathering, 0);
}

TEST_F(CoordinatorTest, Join_RankHintOutOfRange_IsRejected) {
  Make(2, 2);
  auto a = Join(Req("a", 1, 2));
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a->status().message(), HasSubstr("rank_hint 2"));
}

TEST_F(CoordinatorTest, Join_DuplicateRankHint_IsRejected) {
  Make(3, 3);
  auto a = Join(Req("a", 1, 1));
  auto b = Join(Req("b", 2, 1));
  ASSERT_TRUE(b->done());
  EXPECT_EQ(b->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b->status().message(), HasSubstr("already held by node a"));
  EXPECT_FALSE(a->done());
}

TEST_F(CoordinatorTest, Join_SameNodeIdLiveIncarnation_IsRejected) {
  Make(2, 2);
  auto a = Join(Req("a", 1));
  auto dup = Join(Req("a", 2));
  ASSERT_TRUE(dup->done());
  EXPECT_EQ(dup->status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(a->done());
}

TEST_F(CoordinatorTest, Join_RetrySameIncarnation_SupersedesParkedJoin) {
  Make(2, 2);
  auto first = Join(Req("a", 1));
  auto retry = Join(Req("a", 1));
  ASSERT_TRUE(first->done());
  EXPECT_EQ(first->status().code(), absl::StatusCode::kAborted);
  auto b = Join(Req("b", 2));
  ASSERT_TRUE(retry->done());
  EXPECT_TRUE(retry->status().ok());
  EXPECT_EQ(core_->GetSnapshot().members, 2);
}

TEST_F(CoordinatorTest, Join_FullStaticRound_IsRejected) {
  Make(2, 2);
  Join(Req("a", 1));
  Join(Req("b", 2));
  auto c = Join(Req("c", 3));
  ASSERT_TRUE(c->done());
  EXPECT_EQ(c->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c->status().message(), HasSubstr("full"));
}

TEST_F(CoordinatorTest, CancelledJoin_DoesNotCountTowardTheRound) {
  Make(2, 2);
  auto a = Join(Req("a", 1));
  core_->CancelJoin(a->ticket);
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kCancelled);
  auto b = Join(Req("b", 2));
  EXPECT_FALSE(b->done());
  // "a" may come back with a new incarnation: the old one is gone.
  auto a2 = Join(Req("a", 3));
  EXPECT_TRUE(a2->done() && a2->status().ok());
}

TEST_F(CoordinatorTest, WorkerFailure_FailsJobForEveryMember) {
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  auto sa = Watch(ra, 1);
  auto sb = Watch(rb, 1);
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(rb, 1, v1::ReportRequest::FAILED, 3).ok());
  for (auto* s : {sa.get(), sb.get()}) {
    ASSERT_EQ(s->directives.size(), 1u);
    ASSERT_TRUE(s->directives[0].has_job_failed());
    EXPECT_EQ(s->directives[0].job_failed().exit_code(), 3);
    EXPECT_EQ(s->directives[0].job_failed().failed_node_id(), "b");
    EXPECT_FALSE(s->directives[0].job_failed().restarts_exhausted());
    EXPECT_TRUE(s->closed);
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
}

TEST_F(CoordinatorTest, AllSucceeded_FinishesJob_ThenDrainsWhenStreamsEnd) {
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  uint64_t ida = 0, idb = 0;
  auto sa = Watch(ra, 1, &ida);
  auto sb = Watch(rb, 1, &idb);
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::SUCCEEDED).ok());
  EXPECT_TRUE(sa->directives.empty()) << "no verdict before every node succeeded";
  ASSERT_TRUE(Report(rb, 1, v1::ReportRequest::SUCCEEDED).ok());
  ASSERT_EQ(sa->directives.size(), 1u);
  EXPECT_TRUE(sa->directives[0].has_job_finished());
  EXPECT_TRUE(sb->directives[0].has_job_finished());
  EXPECT_FALSE(core_->Drained());
  core_->WatchClosed(ida);
  core_->WatchClosed(idb);
  EXPECT_TRUE(core_->Drained());
}

TEST_F(CoordinatorTest, StreamBreak_WhileRunning_FailsStaticJob) {
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  auto sa = Watch(ra, 1);
  uint64_t idb = 0;
  Watch(rb, 1, &idb);
  core_->WatchClosed(idb);
  ASSERT_EQ(sa->directives.size(), 1u);
  ASSERT_TRUE(sa->directives[0].has_job_failed());
  EXPECT_THAT(sa->directives[0].job_failed().reason(), HasSubstr("disconnected"));
}

TEST_F(CoordinatorTest, SilentNode_LostAfterHeartbeatTimeout) {
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  auto sa = Watch(ra, 1);
  Watch(rb, 1);
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::RUNNING).ok());
  core_->Tick();
  EXPECT_TRUE(sa->directives.empty());
  clock_.Advance(absl::Seconds(2));  // b silent for 5 s, a for 2 s.
  core_->Tick();
  EXPECT_TRUE(sa->directives.empty()) << "lost only after timeout + half a heartbeat interval";
  clock_.Advance(absl::Milliseconds(250));  // b silent for 5.25 s.
  core_->Tick();
  ASSERT_EQ(sa->directives.size(), 1u);
  EXPECT_THAT(sa->directives[0].job_failed().reason(), HasSubstr("no heartbeat"));
  EXPECT_EQ(sa->directives[0].job_failed().failed_node_id(), "b");
}

TEST_F(CoordinatorTest, Report_StaleRoundOrFencedIncarnation_IsRejected) {
  Make(1, 1);
  auto ra = Req("a", 1, 0);
  Join(ra);
  EXPECT_EQ(Report(ra, 7, v1::ReportRequest::RUNNING).code(), absl::StatusCode::kAborted);
  auto stale = Req("a", 99, 0);
  EXPECT_EQ(Report(stale, 1, v1::ReportRequest::RUNNING).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, JoinAfterVerdict_IsRejected) {
  Make(1, 1);
  auto ra = Req("a", 1, 0);
  Join(ra);
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::FAILED, 1).ok());
  auto late = Join(Req("b", 2));
  EXPECT_EQ(late->status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, Elastic_LastCallClosesAfterMinJoined) {
  Make(2, 4);
  auto a = Join(Req("a", 1));
  auto b = Join(Req("b", 2));
  EXPECT_FALSE(a->done());
  clock_.Advance(absl::Milliseconds(499));
  core_->Tick();
  EXPECT_FALSE(a->done());
  clock_.Advance(absl::Milliseconds(1));
  core_->Tick();
  ASSERT_TRUE(a->done() && b->done());
  EXPECT_EQ(a->assignment().nnodes(), 2);
}

TEST_F(CoordinatorTest, Elastic_LostNode_ReopensRoundWithSurvivorsInOrder) {
  Make(2, 4, /*max_restarts=*/3);
  std::vector<v1::JoinRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Req(absl::StrCat("n-", i), 10 + i, i));
  for (auto& r : reqs) Join(r);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<uint64_t> ids(4);
  for (int i = 0; i < 4; ++i) sinks.push_back(Watch(reqs[i], 1, &ids[i]));
  core_->WatchClosed(ids[1]);  // n-1 dies.
  for (int i : {0, 2, 3}) {
    ASSERT_EQ(sinks[i]->directives.size(), 1u);
    ASSERT_TRUE(sinks[i]->directives[0].has_rejoin());
    EXPECT_EQ(sinks[i]->directives[0].rejoin().next_round(), 2u);
  }
  std::vector<std::shared_ptr<JoinResult>> res;
  for (int i : {3, 0, 2}) {
    auto r = reqs[i];
    r.set_last_round(1);
    res.push_back(Join(r));
  }
  clock_.Advance(absl::Milliseconds(500));
  core_->Tick();
  ASSERT_TRUE(res[0]->done());
  EXPECT_EQ(res[0]->assignment().round(), 2u);
  EXPECT_EQ(res[0]->assignment().world_size(), 6);
  EXPECT_EQ(res[0]->assignment().restart_count(), 1);
  EXPECT_EQ(res[1]->assignment().node_rank(), 0);  // n-0
  EXPECT_EQ(res[2]->assignment().node_rank(), 1);  // n-2
  EXPECT_EQ(res[0]->assignment().node_rank(), 2);  // n-3
}

TEST_F(CoordinatorTest, RestartBudgetExhausted_FailsJob) {
  Make(1, 2, /*max_restarts=*/1);
  auto ra = Req("a", 1, 0);
  Join(ra);
  clock_.Advance(absl::Milliseconds(500));
  core_->Tick();
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::FAILED, 2).ok());  // restart 1 of 1
  ra.set_last_round(1);
  Join(ra);
  clock_.Advance(absl::Milliseconds(500));
  core_->Tick();
  auto s = Watch(ra, 2);
  ASSERT_TRUE(Report(ra, 2, v1::ReportRequest::FAILED, 2).ok());
  ASSERT_EQ(s->directives.size(), 1u);
  EXPECT_TRUE(s->directives[0].job_failed().restarts_exhausted());
  EXPECT_THAT(s->directives[0].job_failed().reason(), HasSubstr("restart budget exhausted"));
}

TEST_F(CoordinatorTest, FreshCoordinator_ContinuesRoundNumbersCarriedByJoiners) {
  Make(1, 1);
  auto r = Req("a", 1, 0);
  r.set_last_round(7);
  r.set_restart_count(4);
  auto a = Join(r);
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->assignment().round(), 8u);
  EXPECT_EQ(a->assignment().restart_count(), 5);
}

}  // namespace
}  // namespace trainlet::rendezvous

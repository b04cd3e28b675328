// The rendezvous state machine driven directly (no gRPC), with a simulated
// clock: every timeout is exercised by advancing time, never by sleeping.
#include "rendezvous/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/network_check.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/testing/recording_datagram_sender.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

// What a test's Watch offers to take besides its stream's directives.
struct Accepts {
  bool assignment = false;        // an assignment down the stream
  bool rejoin_datagram = false;   // a REJOIN datagram
  bool release = false;           // a release of the stream
  bool rejoin_directive = false;  // the Rejoin as a DIRECTIVE datagram
};

class CoordinatorTest : public ::testing::Test {
 protected:
  int release_streams_from_ = 0;  // CoordinatorOptions::release_streams_from for Make
  v1::PreflightPolicy preflight_ = v1::PREFLIGHT_WARN;   // ... preflight
  v1::SlowNodePolicy slow_nodes_ = v1::SLOW_NODES_WARN;  // ... slow_nodes
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
    o.release_streams_from = release_streams_from_;
    o.preflight = preflight_;
    o.quarantine = absl::Minutes(5);
    o.slow_nodes = slow_nodes_;
    core_ = std::make_unique<Coordinator>(o);
  }

  static v1::JoinRequest Req(const std::string& node, uint64_t inc, int hint = -1, int lws = 2) {
    v1::JoinRequest r;
    r.mutable_member()->set_node_id(node);
    r.mutable_member()->set_incarnation(inc);
    r.set_job_id("job");
    r.set_protocol_version(kProtocolVersion);
    r.set_rank_hint(hint);
    r.set_local_world_size(lws);
    r.set_master_port(29500);
    return r;
  }

  std::shared_ptr<JoinResult> Join(const v1::JoinRequest& r, const std::string& peer = "",
                                   absl::Time deadline = absl::InfiniteFuture()) {
    auto res = std::make_shared<JoinResult>();
    std::string addr =
        peer.empty() ? absl::StrCat("10.0.0.", r.member().incarnation() % 256) : peer;
    res->ticket = core_->Join(r, addr, deadline, [res](absl::StatusOr<v1::Assignment> a) {
      ASSERT_FALSE(res->done()) << "done called twice";
      res->result = std::move(a);
    });
    return res;
  }

  std::shared_ptr<RecordingSink> Watch(const v1::JoinRequest& r, uint64_t round,
                                       uint64_t* id = nullptr, Accepts accepts = {}) {
    auto sink = std::make_shared<RecordingSink>();
    v1::WatchRequest w;
    *w.mutable_member() = r.member();
    w.set_job_id("job");
    w.set_round(round);
    w.set_accepts_assignment(accepts.assignment);
    w.set_accepts_rejoin_datagram(accepts.rejoin_datagram);
    w.set_accepts_release(accepts.release);
    w.set_accepts_rejoin_directive(accepts.rejoin_directive);
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

  // --slow-nodes: a RUNNING Report of `r` with its `seq`th SlowSignals
  // (10 s: a third of the default window), its workers waiting for a CPU
  // `waited` per mille of it.
  absl::Status SlowReport(const v1::JoinRequest& r, uint64_t round, uint64_t seq, int waited,
                          v1::ReportResponse* response = nullptr) {
    v1::ReportRequest rep;
    *rep.mutable_member() = r.member();
    rep.set_job_id("job");
    rep.set_round(round);
    rep.set_state(v1::ReportRequest::RUNNING);
    v1::SlowSignals* s = rep.mutable_slow();
    s->set_seq(seq);
    s->set_interval_ms(10000);
    s->set_workers(r.local_world_size());
    s->set_cpu_ran_permille(1000 - waited);
    s->set_cpu_waited_permille(waited);
    s->set_step(-1);
    return core_->Report(rep, response);
  }

  // A static 2-node job running round 1: members a (rank 0) and b, both
  // watching; `a_sink` is a's stream, `b_watch` the id of b's.
  struct RunningPair {
    v1::JoinRequest a, b;
    std::shared_ptr<RecordingSink> a_sink;
    uint64_t b_watch = 0;
  };
  RunningPair StartRunningPair(const std::string& a = "a", const std::string& b = "b",
                               int lws = 2) {
    Make(2, 2);
    RunningPair p{Req(a, 1, 0, lws), Req(b, 2, 1, lws)};
    Join(p.a);
    Join(p.b);
    p.a_sink = Watch(p.a, 1);
    Watch(p.b, 1, &p.b_watch);
    return p;
  }

  // The stream `watch_id` closed and was not re-opened within the grace:
  // the coordinator counts its member as lost.
  void LoseStream(uint64_t watch_id) {
    core_->WatchClosed(watch_id);
    clock_.Advance(kStreamLossGrace);
    core_->Tick();
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

TEST_F(CoordinatorTest, AgentStorePort_IsRankZerosForEveryone) {
  Make(2, 2);
  auto r0 = Req("n-0", 1, 0);
  r0.set_agent_store_port(29499);
  auto r1 = Req("n-1", 2, 1);
  r1.set_agent_store_port(29000);
  auto a = Join(r0);
  auto b = Join(r1);
  ASSERT_TRUE(a->done() && b->done());
  EXPECT_EQ(a->assignment().agent_store_port(), 29499);
  EXPECT_EQ(b->assignment().agent_store_port(), 29499);
  EXPECT_EQ(b->assignment().master_port(), 29500);
}

TEST_F(CoordinatorTest, AgentStorePort_NoneWhenRankZeroHostsNone) {
  Make(2, 2);
  auto r1 = Req("n-1", 2, 1);
  r1.set_agent_store_port(29499);
  auto a = Join(Req("n-0", 1, 0));
  auto b = Join(r1);
  ASSERT_TRUE(a->done() && b->done());
  EXPECT_EQ(a->assignment().agent_store_port(), 0);
  EXPECT_EQ(b->assignment().agent_store_port(), 0);
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

TEST_F(CoordinatorTest, ColocatedPodsGetOneNcclHostIdInTheirOwnEntry) {
  Make(3, 3);
  auto r0 = Req("n-0", 1, 0);
  auto r1 = Req("n-1", 2, 1);
  auto r2 = Req("n-2", 3, 2);
  for (v1::JoinRequest* r : {&r0, &r1}) {
    r->mutable_topology()->set_boot_id("machine-a");
    r->mutable_topology()->set_ipc_namespace("ipc:[1]");
  }
  r2.mutable_topology()->set_boot_id("machine-b");
  r2.mutable_topology()->set_ipc_namespace("ipc:[1]");
  r2.set_want_nodes(true);
  auto a = Join(r0);
  auto b = Join(r1);
  auto c = Join(r2);
  ASSERT_TRUE(a->done() && b->done() && c->done());
  EXPECT_EQ(a->assignment().self().colocated(), 2);
  EXPECT_EQ(a->assignment().self().nccl_hostid(), "machine-a");
  EXPECT_EQ(b->assignment().self().nccl_hostid(), "machine-a");
  EXPECT_EQ(c->assignment().self().colocated(), 1);
  EXPECT_EQ(c->assignment().self().nccl_hostid(), "");
  ASSERT_EQ(c->assignment().nodes_size(), 3);
  EXPECT_EQ(c->assignment().nodes(1).nccl_hostid(), "machine-a");
  // Each node's topology stays with the coordinator.
  EXPECT_FALSE(c->assignment().nodes(1).has_topology());
  EXPECT_FALSE(a->assignment().self().has_topology());
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
  EXPECT_THAT(a->status().message(), HasSubstr("check --job-id on both sides"));
}

TEST_F(CoordinatorTest, Join_OtherProtocolVersion_IsRefusedNamingBoth) {
  Make(2, 2);
  auto newer = Req("a", 1);
  newer.set_protocol_version(kProtocolVersion + 1);
  auto a = Join(newer);
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a->status().message(),
              HasSubstr(absl::StrCat("node a speaks rendezvous protocol ", kProtocolVersion + 1,
                                     ", this coordinator speaks ", kProtocolVersion)));
  EXPECT_THAT(a->status().message(), HasSubstr("run the same trainlet version on every pod"));

  // An agent from before the field sends 0.
  auto old = Req("b", 2);
  old.clear_protocol_version();
  auto b = Join(old);
  ASSERT_TRUE(b->done());
  EXPECT_EQ(b->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(b->status().message(), HasSubstr("protocol 0 (a trainlet from before"));

  // Neither was admitted: the same version still joins, and the round waits.
  auto c = Join(Req("c", 3));
  EXPECT_FALSE(c->done());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
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
  r = Req("a", 1);
  r.set_agent_store_port(-1);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("agent_store_port"));
  r.set_agent_store_port(65536);
  EXPECT_THAT(Join(r)->status().message(), HasSubstr("agent_store_port"));
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

TEST_F(CoordinatorTest, StreamBreak_ReopenedWithinGrace_IsNoLoss) {
  // Issue 7, D4: a stream that breaks while its agent lives is re-opened by
  // the agent; the coordinator must not count it as a lost node.
  RunningPair p = StartRunningPair();
  core_->WatchClosed(p.b_watch);
  clock_.Advance(kStreamLossGrace / 2);
  core_->Tick();
  Watch(p.b, 1);  // re-opened (EXPECTs that it is not fenced)
  clock_.Advance(kStreamLossGrace * 4);
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_TRUE(p.a_sink->directives.empty());
}

TEST_F(CoordinatorTest, StreamBreak_HeartbeatWithinGrace_IsNoLoss) {
  RunningPair p = StartRunningPair();
  core_->WatchClosed(p.b_watch);
  clock_.Advance(kStreamLossGrace / 2);
  EXPECT_TRUE(Report(p.b, 1, v1::ReportRequest::RUNNING).ok());
  clock_.Advance(kStreamLossGrace * 2);
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_TRUE(p.a_sink->directives.empty());
}

TEST_F(CoordinatorTest, Report_AfterTheVerdict_CarriesIt) {
  // An agent whose stream cannot deliver the verdict learns it from the
  // answer to its next heartbeat.
  Make(1, 1);
  auto ra = Req("a", 1, 0);
  Join(ra);
  EXPECT_TRUE(Report(ra, 1, v1::ReportRequest::SUCCEEDED).ok());
  absl::Status again = Report(ra, 1, v1::ReportRequest::SUCCEEDED);
  EXPECT_EQ(ReasonOf(again), v1::ErrorInfo::JOB_SUCCEEDED) << again;
}

TEST_F(CoordinatorTest, StreamBreak_WhileRunning_FailsStaticJob_NamingTheNode) {
  RunningPair p = StartRunningPair("pod-a", "pod-b");
  LoseStream(p.b_watch);
  ASSERT_EQ(p.a_sink->directives.size(), 1u);
  ASSERT_TRUE(p.a_sink->directives[0].has_job_failed());
  EXPECT_THAT(p.a_sink->directives[0].job_failed().reason(), HasSubstr("disconnected"));
  EXPECT_THAT(p.a_sink->directives[0].job_failed().reason(), HasSubstr("node pod-b"));
  EXPECT_EQ(p.a_sink->directives[0].job_failed().failed_node_id(), "pod-b");
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
  EXPECT_THAT(sa->directives[0].job_failed().reason(),
              ::testing::StartsWith("node b (ranks 2-3) lost: no heartbeat"));
  EXPECT_EQ(sa->directives[0].job_failed().failed_node_id(), "b");
}

TEST(ReportsAtScale, HeardReportIntervalGrowsWithTheRound_FirstReportsSpreadWithinHalfT) {
  const absl::Duration t = absl::Seconds(5);
  const absl::Duration interval = HeartbeatInterval(t);  // 470 ms
  EXPECT_EQ(HeardReportInterval(t, 2), t - interval);
  EXPECT_EQ(HeardReportInterval(t, 1000), t - interval);
  EXPECT_EQ(HeardReportInterval(t, 10000), absl::Seconds(20));
  // At most kMaxHeardReportsPerSecond Reports a second from heard members.
  for (int n : {100, 2265, 2266, 5000, 10000, 50000}) {
    EXPECT_LE(n / absl::ToDoubleSeconds(HeardReportInterval(t, n)), kMaxHeardReportsPerSecond + 1)
        << n;
  }
  // Small rounds: the first Report one interval after the answer, as before.
  for (int r = 0; r < 200; ++r) EXPECT_EQ(FirstReportDelay(t, 200, r), interval);
  // 10,000 nodes: spread over [interval, T/2], evenly (no tenth of the
  // window holds more than 12% of the ranks).
  std::vector<int> tenths(10, 0);
  for (int r = 0; r < 10000; ++r) {
    const absl::Duration d = FirstReportDelay(t, 10000, r);
    ASSERT_GE(d, interval) << r;
    ASSERT_LT(d, t / 2) << r;
    ++tenths[std::min(9, static_cast<int>((d - interval) / ((t / 2 - interval) / 10)))];
  }
  for (int count : tenths) EXPECT_LE(count, 1200);
}

TEST_F(CoordinatorTest, AnswerSentLate_TheMemberGetsTheWholeTimeoutFromThen) {
  // At 10,000 nodes the last answers leave seconds after the round closed.
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);  // round 1 closes now
  clock_.Advance(absl::Seconds(3));
  core_->AnswerSent(ra.member(), 1);
  core_->AnswerSent(rb.member(), 1);
  // Stale calls change nothing: another round, another incarnation, a stranger.
  v1::Member other = rb.member();
  other.set_incarnation(99);
  clock_.Advance(absl::Seconds(1));
  core_->AnswerSent(other, 1);
  core_->AnswerSent(rb.member(), 2);
  v1::Member stranger = rb.member();
  stranger.set_node_id("zz");
  core_->AnswerSent(stranger, 1);
  auto sa = Watch(ra, 1);
  clock_.Advance(absl::Seconds(3));  // b: 7 s after the close, 4 s after its answer.
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::RUNNING).ok());
  core_->Tick();
  EXPECT_TRUE(sa->directives.empty()) << "b's clock started when its answer left";
  clock_.Advance(absl::Milliseconds(1250));  // 5.25 s after b's answer.
  core_->Tick();
  ASSERT_EQ(sa->directives.size(), 1u);
  EXPECT_EQ(sa->directives[0].job_failed().failed_node_id(), "b");
}

// UDP liveness: datagrams (liveness_datagram.h) keep a member alive in O(1)
// each; Reports still count; bad datagrams are ignored.
class UdpLivenessTest : public CoordinatorTest {
 protected:
  static v1::JoinRequest UdpReq(const std::string& node, uint64_t inc, int hint) {
    v1::JoinRequest r = Req(node, inc, hint);
    r.set_udp_liveness(true);
    return r;
  }
  // A datagram as the member with `a` sends it (or with the fields changed).
  static LivenessDatagram Datagram(const v1::Assignment& a, uint64_t incarnation, uint64_t seq,
                                   std::optional<uint32_t> slot = std::nullopt,
                                   std::optional<LivenessKey> key = std::nullopt) {
    const LivenessBytes b =
        EncodeLivenessDatagram(slot.value_or(a.liveness_slot()), incarnation, a.round(), seq,
                               key.value_or(*LivenessKeyFromBytes(a.liveness_key())));
    return *ParseLivenessDatagram(b.data(), b.size());
  }
  LivenessBatchStats Send(const LivenessDatagram& d) { return core_->NoteLivenessBatch({d}); }
  // A static pair (a, b) with UDP liveness, running round 1, both watching.
  void StartUdpPair() {
    Make(2, 2);
    core_->EnableUdpLiveness(29400);
    ra_ = UdpReq("a", 1, 0);
    rb_ = UdpReq("b", 2, 1);
    auto ja = Join(ra_);
    auto jb = Join(rb_);
    ASSERT_TRUE(ja->done() && jb->done());
    a_ = ja->assignment();
    b_ = jb->assignment();
    sa_ = Watch(ra_, 1);
    Watch(rb_, 1);
  }
  // Advances in 20 ms ticks until the job leaves RUNNING (or `max`); returns
  // the time that took.
  absl::Duration TickUntilLost(absl::Duration max, uint64_t* a_seq) {
    const absl::Time start = clock_.Now();
    absl::Time next_a = start;
    while (clock_.Now() - start < max && core_->GetSnapshot().phase == Phase::kRunning) {
      if (clock_.Now() >= next_a) {  // a stays alive over UDP.
        EXPECT_EQ(Send(Datagram(a_, 1, ++*a_seq)).accepted, 1);
        next_a += HeartbeatInterval(absl::Seconds(5));
      }
      clock_.Advance(kMaxTickDelay);
      core_->Tick();
    }
    return clock_.Now() - start;
  }
  v1::JoinRequest ra_, rb_;
  v1::Assignment a_, b_;
  std::shared_ptr<RecordingSink> sa_;
};

TEST_F(UdpLivenessTest, Assignment_CarriesPortSlotAndKey_OnlyWhenOfferedAndEnabled) {
  Make(3, 3);
  core_->EnableUdpLiveness(29400);
  auto ja = Join(UdpReq("a", 1, 0));
  auto jb = Join(UdpReq("b", 2, 1));
  auto jc = Join(Req("c", 3, 2));  // an agent that does not offer it
  ASSERT_TRUE(ja->done() && jb->done() && jc->done());
  EXPECT_EQ(ja->assignment().liveness_udp_port(), 29400u);
  EXPECT_EQ(ja->assignment().liveness_key().size(), 16u);
  EXPECT_NE(ja->assignment().liveness_slot(), jb->assignment().liveness_slot());
  EXPECT_NE(ja->assignment().liveness_key(), jb->assignment().liveness_key());
  EXPECT_EQ(jc->assignment().liveness_udp_port(), 0u);
  EXPECT_TRUE(jc->assignment().liveness_key().empty());
  // T/10 less the tick and the coalescing wait; the timeout as configured.
  EXPECT_EQ(ja->assignment().heartbeat_interval_ms(), 470);
  EXPECT_EQ(ja->assignment().heartbeat_timeout_ms(), 5000);

  Make(1, 1);  // a coordinator without a UDP socket offers nothing
  auto j = Join(UdpReq("a", 1, 0));
  ASSERT_TRUE(j->done());
  EXPECT_EQ(j->assignment().liveness_udp_port(), 0u);
  EXPECT_TRUE(j->assignment().liveness_key().empty());
}

TEST_F(UdpLivenessTest, Acks_OnePerMemberPerQuarterTimeout_ForTheDatagramItAcks) {
  StartUdpPair();
  std::vector<LivenessAck> acks;
  uint64_t a_seq = 0, b_seq = 0;
  int a_acks = 0;
  // 5 s (one timeout) of datagrams every 470 ms from both: acks at 0,
  // >= 1.25 s, ... for each: 4 per member.
  const absl::Time start = clock_.Now();
  core_->Tick();
  while (clock_.Now() - start < absl::Seconds(5)) {
    acks.clear();
    const std::vector<LivenessDatagram> batch = {Datagram(a_, 1, ++a_seq),
                                                 Datagram(b_, 2, ++b_seq)};
    const LivenessBatchStats st = core_->NoteLivenessBatch(batch, &acks);
    EXPECT_EQ(st.accepted, 2);
    EXPECT_EQ(st.acks, static_cast<int>(acks.size()));
    for (const LivenessAck& ack : acks) {
      const v1::Assignment& mine = ack.index == 0 ? a_ : b_;
      std::optional<LivenessDatagram> d =
          ParseLivenessDatagram(ack.bytes.data(), ack.bytes.size(), LivenessKind::kAck);
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(d->slot, mine.liveness_slot());
      EXPECT_EQ(d->incarnation, ack.index == 0 ? 1u : 2u);
      EXPECT_EQ(d->round, mine.round());
      EXPECT_EQ(d->seq, batch[ack.index].seq);
      EXPECT_TRUE(d->MacValid(*LivenessKeyFromBytes(mine.liveness_key())));
      a_acks += ack.index == 0;
    }
    clock_.Advance(absl::Milliseconds(470));
    core_->Tick();
  }
  EXPECT_EQ(a_acks, 4);
  // Without a place to put them, none are made (and none are owed).
  EXPECT_EQ(core_->NoteLivenessBatch({Datagram(a_, 1, ++a_seq)}).acks, 0);
  // A refused datagram gets no ack.
  acks.clear();
  clock_.Advance(absl::Milliseconds(300));
  const LivenessBatchStats st = core_->NoteLivenessBatch({Datagram(a_, 1, a_seq)}, &acks);
  EXPECT_EQ(st.stale_seq, 1);
  EXPECT_TRUE(acks.empty());
  // A stalled ticker: the liveness thread alone proves nothing; no ack
  // (the datagram still counts).
  clock_.Advance(absl::Milliseconds(2500));  // 2.8 s since the last Tick (b: 3.1 s silent)
  const LivenessBatchStats stalled =
      core_->NoteLivenessBatch({Datagram(a_, 1, ++a_seq), Datagram(b_, 2, ++b_seq)}, &acks);
  EXPECT_EQ(stalled.accepted, 2);
  EXPECT_TRUE(acks.empty());
  core_->Tick();  // the ticker runs again: so do the acks
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_EQ(core_->NoteLivenessBatch({Datagram(a_, 1, ++a_seq)}, &acks).acks, 1);
}

TEST_F(UdpLivenessTest, Acks_NoneOnceTheRoundIsOver) {
  // After the verdict the members' datagrams still count, but get no ack:
  // their Reports then bring the verdict.
  StartUdpPair();
  core_->Tick();
  ASSERT_TRUE(Report(ra_, 1, v1::ReportRequest::FAILED, 3).ok());
  ASSERT_NE(core_->GetSnapshot().phase, Phase::kRunning);
  std::vector<LivenessAck> acks;
  core_->Tick();
  core_->NoteLivenessBatch({Datagram(b_, 2, 1)}, &acks);
  EXPECT_TRUE(acks.empty());
}

TEST_F(UdpLivenessTest, Datagrams_KeepAMemberAliveWithoutReports) {
  StartUdpPair();
  uint64_t a_seq = 0, b_seq = 0;
  for (int i = 0; i < 60; ++i) {  // ~28 s of datagrams only
    clock_.Advance(HeartbeatInterval(absl::Seconds(5)));
    EXPECT_EQ(Send(Datagram(a_, 1, ++a_seq)).accepted, 1);
    EXPECT_EQ(Send(Datagram(b_, 2, ++b_seq)).accepted, 1);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_TRUE(sa_->directives.empty());
}

// Re-join by datagram (docs/protocol.md, "Re-join on the stream"): a
// restart keeps the streams that take an assignment, a READY datagram is the
// member's re-join, and its assignment goes down its stream.
class ReadyRejoinTest : public UdpLivenessTest {
 protected:
  // An elastic job (2..3 nodes, 2 restarts) with a, b, c running round 1,
  // each watching with accepts_assignment = `accepts` (per member) and
  // accepts_rejoin_datagram = `rejoin_datagram` (per member; with any of
  // them, the coordinator has a DatagramSender).
  void StartTrio(std::vector<bool> accepts = {true, true, true},
                 std::vector<bool> rejoin_datagram = {false, false, false},
                 std::vector<bool> rejoin_directive = {false, false, false}) {
    Make(2, 3, /*max_restarts=*/2);
    const bool sender =
        std::find(rejoin_datagram.begin(), rejoin_datagram.end(), true) != rejoin_datagram.end();
    core_->EnableUdpLiveness(29400, sender ? &sender_ : nullptr);
    reqs_ = {UdpReq("a", 1, -1), UdpReq("b", 2, -1), UdpReq("c", 3, -1)};
    std::vector<std::shared_ptr<JoinResult>> joins;
    for (const v1::JoinRequest& r : reqs_) joins.push_back(Join(r));
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(joins[i]->done());
      as_.push_back(joins[i]->assignment());
      uint64_t id = 0;
      sinks_.push_back(
          Watch(reqs_[i], 1, &id, {accepts[i], rejoin_datagram[i], false, rejoin_directive[i]}));
      ASSERT_NE(id, 0u);
      watch_ids_.push_back(id);
      Alive(i);  // heard over UDP: a READY would get here
    }
    ASSERT_EQ(core_->GetSnapshot().round, 1u);
  }
  void Alive(size_t i) {
    std::vector<LivenessAck> acks;
    ASSERT_EQ(AliveFrom(i, &acks).accepted, 1);
  }
  bool with_origin_ = true;  // whether AliveFrom says where a datagram came from
  // Member i's address as the liveness receiver would see it: 127.0.0.1,
  // port 41000 + i.
  static sockaddr_storage AddressOf(size_t i) {
    sockaddr_storage ss{};
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(41000 + i));
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ss;
  }
  // An alive datagram of member i (of the round it was assigned), from its
  // address on the receiver's socket 0; `acks` gets what answers it.
  // With `round`, one of that round (what an agent that took its REJOIN
  // sends to confirm it).
  LivenessBatchStats AliveFrom(size_t i, std::vector<LivenessAck>* acks, uint64_t round = 0) {
    const sockaddr_storage from[1] = {AddressOf(i)};
    const LivenessOrigin origin{0, from};
    v1::Assignment a = as_[i];
    if (round != 0) a.set_round(round);
    return core_->NoteLivenessBatch({Datagram(a, reqs_[i].member().incarnation(), ++seq_[i])}, acks,
                                    nullptr, with_origin_ ? &origin : nullptr);
  }
  // Checks that `bytes` is member i's REJOIN for `round`, under its key.
  void ExpectRejoinOf(size_t i, const LivenessBytes& bytes, uint64_t round) {
    std::optional<LivenessDatagram> d = ParseCoordinatorDatagram(bytes.data(), bytes.size());
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->kind, LivenessKind::kRejoin);
    EXPECT_TRUE(IsOwnNewerRejoin(*d, as_[i].liveness_slot(), reqs_[i].member().incarnation(),
                                 round - 1, *LivenessKeyFromBytes(as_[i].liveness_key())));
    EXPECT_EQ(d->round, round);
  }
  void ExpectRejoinOf(size_t i, const std::string& bytes, uint64_t round) {
    ASSERT_EQ(bytes.size(), kLivenessDatagramBytes);
    LivenessBytes b;
    std::memcpy(b.data(), bytes.data(), b.size());
    ExpectRejoinOf(i, b, round);
  }
  // b's worker failed: the round re-opens as round 2 for all three.
  void FailB() {
    ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::FAILED, 3).ok());
    ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  }
  // A READY of member i for `round`; *acked: whether the coordinator acked
  // it (it holds the re-join), checked to be an ack of that READY.
  LivenessBatchStats Ready(size_t i, uint64_t round, bool* acked = nullptr) {
    const v1::Assignment& a = as_[i];
    const LivenessBytes b =
        EncodeLivenessDatagram(a.liveness_slot(), reqs_[i].member().incarnation(), round, ++seq_[i],
                               *LivenessKeyFromBytes(a.liveness_key()), LivenessKind::kReady);
    std::optional<LivenessDatagram> d = ParseAgentDatagram(b.data(), b.size());
    EXPECT_TRUE(d.has_value());
    std::vector<LivenessAck> acks;
    LivenessBatchStats st = core_->NoteLivenessBatch({*d}, &acks);
    EXPECT_LE(acks.size(), 1u);
    if (!acks.empty()) {
      std::optional<LivenessDatagram> ack =
          ParseLivenessDatagram(acks[0].bytes.data(), acks[0].bytes.size(), LivenessKind::kAck);
      EXPECT_TRUE(ack.has_value());
      if (ack.has_value()) {
        EXPECT_EQ(ack->round, round);
        EXPECT_EQ(ack->seq, seq_[i]);
        EXPECT_TRUE(ack->MacValid(*LivenessKeyFromBytes(a.liveness_key())));
      }
    }
    if (acked != nullptr) *acked = !acks.empty();
    return st;
  }
  // The DIRECTIVE datagrams sent to member i so far, parsed and checked
  // (its slot, incarnation, key), in order.
  std::vector<v1::Directive> DirectivesTo(size_t i) {
    std::vector<v1::Directive> out;
    for (const OutgoingDatagram& d : sender_.sent()) {
      std::optional<DirectiveDatagram> dd =
          ParseDirectiveDatagram(reinterpret_cast<const uint8_t*>(d.bytes.data()), d.bytes.size());
      if (!dd.has_value()) continue;
      if (!IsOwnDirective(*dd, as_[i].liveness_slot(), reqs_[i].member().incarnation(),
                          *LivenessKeyFromBytes(as_[i].liveness_key()))) {
        continue;
      }
      v1::Directive directive;
      EXPECT_TRUE(directive.ParseFromString(dd->payload));
      EXPECT_EQ(dd->header.round, directive.round());
      out.push_back(directive);
    }
    return out;
  }
  // The assignments pushed down member i's stream so far.
  std::vector<v1::Assignment> Pushed(size_t i) const {
    std::vector<v1::Assignment> out;
    for (const v1::Directive& d : sinks_[i]->directives) {
      if (d.has_assignment()) out.push_back(d.assignment());
    }
    return out;
  }
  std::vector<v1::JoinRequest> reqs_;
  std::vector<v1::Assignment> as_;
  std::vector<std::shared_ptr<RecordingSink>> sinks_;
  std::vector<uint64_t> watch_ids_;
  uint64_t seq_[3] = {0, 0, 0};
  RecordingDatagramSender sender_;
};

TEST_F(CoordinatorTest, Reasons_NameTheNodeAndItsGlobalRanks) {
  // Lost by its stream: "node b (ranks 2-3)" (two workers each).
  RunningPair p = StartRunningPair();
  LoseStream(p.b_watch);
  ASSERT_EQ(p.a_sink->directives.size(), 1u);
  EXPECT_EQ(p.a_sink->directives[0].job_failed().reason(),
            "node b (ranks 2-3) lost: its agent disconnected (watch stream closed)");

  // Left, one worker each: "(rank 1)". (Silent: SilentNode_LostAfterHeartbeatTimeout.)
  p = StartRunningPair("a", "b", /*lws=*/1);
  v1::LeaveRequest leave;
  *leave.mutable_member() = p.b.member();
  leave.set_job_id("job");
  leave.set_reason("agent received signal 15 (Terminated)");
  ASSERT_TRUE(core_->Leave(leave).ok());
  ASSERT_EQ(p.a_sink->directives.size(), 1u);
  EXPECT_EQ(p.a_sink->directives[0].job_failed().reason(),
            "node b (rank 1) left: agent received signal 15 (Terminated)");
}

// Hang attribution (coordinator.h, "Hangs"; docs/progress.md, "Who hung").
class HangTest : public CoordinatorTest {
 protected:
  // Nodes a, b, c (one worker each: ranks 0, 1, 2) running round 1 of a
  // job with `max_restarts`; all watching.
  void StartTrio(int max_restarts = 0) {
    Make(3, 3, max_restarts);
    reqs_ = {Req("a", 1, 0, 1), Req("b", 2, 1, 1), Req("c", 3, 2, 1)};
    for (const v1::JoinRequest& r : reqs_) Join(r);
    for (const v1::JoinRequest& r : reqs_) sinks_.push_back(Watch(r, 1));
    ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  }
  absl::Status ReportHang(size_t i, const v1::HangReport& hang, uint64_t round = 1) {
    v1::ReportRequest rep;
    *rep.mutable_member() = reqs_[i].member();
    rep.set_job_id("job");
    rep.set_round(round);
    rep.set_state(v1::ReportRequest::RUNNING);
    *rep.mutable_hang() = hang;
    return core_->Report(rep);
  }
  static v1::HangReport Declared() {
    v1::HangReport h;
    h.set_declared(true);
    h.set_declared_local_rank(0);
    h.set_silence_ms(10000);
    return h;
  }
  static v1::HangReport Collected(v1::WorkerEvidence::Stack stack, const std::string& where,
                                  v1::HangReport h = {}) {
    h.set_collected(true);
    v1::WorkerEvidence* w = h.add_workers();
    w->set_local_rank(0);
    w->set_stack(stack);
    w->set_where(where);
    w->set_step(6);
    w->set_progress_age_ms(10000);
    return h;
  }
  std::vector<v1::JoinRequest> reqs_;
  std::vector<std::shared_ptr<RecordingSink>> sinks_;
};

TEST_F(HangTest, DeclaredByOne_EveryOtherIsAskedFirst_TheRankNotInACollectiveIsTheSuspect) {
  StartTrio();
  // a's rank 0 waits in all_reduce for c's rank 2, which sleeps: a is the
  // first to notice.
  ASSERT_TRUE(ReportHang(0, Declared()).ok());
  EXPECT_TRUE(sinks_[0]->directives.empty());
  for (size_t i : {1, 2}) {
    ASSERT_EQ(sinks_[i]->directives.size(), 1u) << i;
    const v1::Directive& d = sinks_[i]->directives[0];
    ASSERT_TRUE(d.has_collect_evidence()) << i;
    EXPECT_EQ(d.collect_evidence().declared_by_node(), "a");
    EXPECT_EQ(d.collect_evidence().declared_rank(), 0);
    EXPECT_EQ(d.round(), 1u);
    EXPECT_FALSE(sinks_[i]->closed) << i << ": nothing is stopped yet";
  }
  // c declares too (its own silent worker): asked once all the same.
  ASSERT_TRUE(ReportHang(2, Declared()).ok());
  EXPECT_EQ(sinks_[1]->directives.size(), 1u);
  // The evidence comes in; the round runs until the last of it.
  ASSERT_TRUE(
      ReportHang(0, Collected(v1::WorkerEvidence::IN_COLLECTIVE, "all_reduce", Declared())).ok());
  ASSERT_TRUE(ReportHang(2, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE,
                                      "train.py:41 in main; main thread S in hrtimer_nanosleep"))
                  .ok());
  ASSERT_TRUE(ReportHang(2, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE, "again")).ok());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning) << "b's evidence is not in yet";
  ASSERT_TRUE(ReportHang(1, Collected(v1::WorkerEvidence::IN_COLLECTIVE, "all_reduce")).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  const std::string reason =
      "hang: suspect rank 2 on c (not in a collective: train.py:41 in main; main thread S in "
      "hrtimer_nanosleep); declared by node a (rank 0: no progress for 10s); evidence from 3 of 3 "
      "nodes";
  EXPECT_EQ(core_->GetSnapshot().verdict, reason);
  for (size_t i = 0; i < 3; ++i) {
    const v1::Directive& d = sinks_[i]->directives.back();
    ASSERT_TRUE(d.has_job_failed()) << i;
    EXPECT_EQ(d.job_failed().reason(), reason);
    EXPECT_EQ(d.job_failed().failed_node_id(), "c");
    EXPECT_EQ(d.job_failed().exit_code(), 80);
    EXPECT_EQ(d.job_failed().hang().suspect_node_id(), "c");
    EXPECT_EQ(d.job_failed().hang().suspect_rank(), 2);
    EXPECT_EQ(d.job_failed().hang().suspect_local_rank(), 0);
    EXPECT_THAT(d.job_failed().hang().summary(), ::testing::StartsWith("suspect rank 2 on c ("));
  }
}

TEST_F(HangTest, EvidenceMissing_JudgedAtTheWaitWithWhatCame_AndTheJobRestarts) {
  StartTrio(/*max_restarts=*/1);
  ASSERT_TRUE(ReportHang(1, Declared()).ok());
  ASSERT_TRUE(ReportHang(1, Collected(v1::WorkerEvidence::STACK_UNKNOWN, "", Declared())).ok());
  v1::HangReport older = Collected(v1::WorkerEvidence::STACK_UNKNOWN, "");
  older.mutable_workers(0)->set_progress_age_ms(16000);
  ASSERT_TRUE(ReportHang(0, older).ok());
  // c (frozen, say) never answers.
  clock_.Advance(kHangEvidenceWait - absl::Milliseconds(1));
  ASSERT_TRUE(Report(reqs_[2], 1, v1::ReportRequest::RUNNING).ok());  // alive, though
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  clock_.Advance(absl::Milliseconds(1));
  core_->Tick();
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  const v1::Directive& d = sinks_[2]->directives.back();
  ASSERT_TRUE(d.has_rejoin());
  EXPECT_EQ(d.rejoin().reason(),
            "hang: suspect rank 0 on a (no Python stack; the oldest progress: 16s "
            "ago at step 6); declared by node b (rank 1: no progress for 10s); evidence from 2 "
            "of 3 nodes (restart 1 of 1)");
  EXPECT_EQ(d.rejoin().hang().suspect_rank(), 0);
}

TEST_F(HangTest, AnotherFailureFirst_EndsItWithoutAVerdict) {
  StartTrio(/*max_restarts=*/2);
  ASSERT_TRUE(ReportHang(0, Declared()).ok());
  ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::FAILED, 3).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  const v1::Directive& d = sinks_[0]->directives.back();
  ASSERT_TRUE(d.has_rejoin());
  EXPECT_THAT(d.rejoin().reason(), ::testing::StartsWith("worker local rank 0 (global rank 1)"));
  EXPECT_FALSE(d.rejoin().has_hang());
  // Late evidence of the old round: refused as any stale report is.
  EXPECT_TRUE(
      absl::IsAborted(ReportHang(2, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE, "x.py:1"))));
  clock_.Advance(kHangEvidenceWait * 2);
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering) << "no verdict later either";
}

TEST_F(HangTest, ASucceededNodeHasNothingToAdd_AndEvidenceWithoutADeclarationIsNoHang) {
  StartTrio();
  // Evidence nobody asked for (no hang declared this round): nothing.
  ASSERT_TRUE(ReportHang(2, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE, "x.py:1")).ok());
  clock_.Advance(kHangEvidenceWait * 2);
  ASSERT_TRUE(Report(reqs_[0], 1, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(reqs_[2], 1, v1::ReportRequest::RUNNING).ok());
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  // b's workers all exited 0 before the hang: not asked, and a SUCCEEDED
  // while asked counts as its answer.
  ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::SUCCEEDED).ok());
  ASSERT_TRUE(
      ReportHang(0, Collected(v1::WorkerEvidence::IN_COLLECTIVE, "barrier", Declared())).ok());
  EXPECT_TRUE(sinks_[1]->directives.empty()) << "not asked";
  ASSERT_TRUE(Report(reqs_[2], 1, v1::ReportRequest::SUCCEEDED).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  EXPECT_THAT(core_->GetSnapshot().verdict,
              ::testing::StartsWith("hang: suspect rank 0 on a (the only rank with evidence; in a "
                                    "collective: barrier)"));
}

TEST_F(HangTest, OnlyTheMembersAskedAnswer_ASucceededNodesRepeatIsNoAnswer) {
  StartTrio();
  // b's workers all exited 0 before the hang: not asked.
  ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::SUCCEEDED).ok());
  ASSERT_TRUE(
      ReportHang(0, Collected(v1::WorkerEvidence::IN_COLLECTIVE, "barrier", Declared())).ok());
  // b's heartbeat repeats its SUCCEEDED, and b (or anyone not asked) sends
  // evidence nobody asked it for: neither stands in for c's.
  ASSERT_TRUE(Report(reqs_[1], 1, v1::ReportRequest::SUCCEEDED).ok());
  ASSERT_TRUE(ReportHang(1, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE, "b.py:1")).ok());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning) << "c's evidence is not in yet";
  ASSERT_TRUE(ReportHang(2, Collected(v1::WorkerEvidence::NOT_IN_COLLECTIVE, "c.py:7")).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  EXPECT_EQ(core_->GetSnapshot().verdict,
            "hang: suspect rank 2 on c (not in a collective: c.py:7); declared by node a (rank 0: "
            "no progress for 10s); evidence from 2 of 2 nodes");
}

TEST_F(HangTest, AMalformedHangReportIsRefused_NamingTheField) {
  StartTrio();
  v1::HangReport h = Declared();
  h.set_declared_local_rank(1);  // a has one worker
  const absl::Status s = ReportHang(0, h);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("hang.declared_local_rank"));
  EXPECT_TRUE(sinks_[1]->directives.empty());
}

TEST_F(ReadyRejoinTest, RejoinByDatagram_NoStreamWrite_EachSurvivorGetsItsRejoinDatagram) {
  StartTrio({true, true, true}, {true, true, true});
  FailB();
  const std::vector<OutgoingDatagram> sent = sender_.sent();
  ASSERT_EQ(sent.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(sinks_[i]->directives.empty()) << i << ": no stream write for the Rejoin";
    EXPECT_FALSE(sinks_[i]->closed) << i;
    const OutgoingDatagram& d = sent[i];  // members in node-id order: a, b, c
    EXPECT_EQ(d.socket, 0);
    EXPECT_EQ(reinterpret_cast<const sockaddr_in&>(d.to).sin_port,
              htons(static_cast<uint16_t>(41000 + i)))
        << "sent to where its datagrams come from";
    ExpectRejoinOf(i, d.bytes, 2);
  }
  // The rest is the re-join by datagram of before: READYs, the assignment
  // down each kept stream.
  bool acked = false;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Ready(i, 2, &acked).ready, 1);
    EXPECT_TRUE(acked) << i;
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(Pushed(i).size(), 1u) << i;
    EXPECT_EQ(Pushed(i)[0].round(), 2u);
  }
  EXPECT_EQ(sender_.sent().size(), 3u) << "nothing more went by datagram";
}

TEST_F(ReadyRejoinTest, AnAliveOfTheOldRound_GetsTheRejoinAgain_ThenTheStreamCarriesIt) {
  StartTrio({true, true, true}, {true, true, true});
  FailB();
  ASSERT_EQ(sender_.sent().size(), 3u);
  // a still sends alive datagrams of round 1: it did not get the REJOIN.
  for (int repeat = 0; repeat < kRejoinDatagramTries; ++repeat) {
    std::vector<LivenessAck> acks;
    LivenessBatchStats st = AliveFrom(0, &acks);
    EXPECT_EQ(st.accepted, 1);
    EXPECT_EQ(st.rejoins, 1) << repeat;
    ASSERT_EQ(acks.size(), 1u) << repeat;
    ExpectRejoinOf(0, acks[0].bytes, 2);
    EXPECT_TRUE(sinks_[0]->directives.empty()) << repeat;
  }
  // Once more: UDP from the coordinator does not reach it; the stream does.
  std::vector<LivenessAck> acks;
  EXPECT_EQ(AliveFrom(0, &acks).rejoins, 0);
  EXPECT_TRUE(acks.empty());
  ASSERT_EQ(sinks_[0]->directives.size(), 1u);
  const v1::Directive& rejoin = sinks_[0]->directives[0];
  ASSERT_TRUE(rejoin.has_rejoin());
  EXPECT_EQ(rejoin.rejoin().next_round(), 2u);
  EXPECT_TRUE(rejoin.rejoin().ready_by_datagram());
  EXPECT_FALSE(sinks_[0]->closed);
  AliveFrom(0, &acks);
  EXPECT_TRUE(acks.empty()) << "told once on the stream: nothing more";
  EXPECT_EQ(sinks_[0]->directives.size(), 1u);
  // b took it: its READY is held, and an alive datagram in flight from
  // before it stopped gets nothing.
  Ready(1, 2);
  acks.clear();
  EXPECT_EQ(AliveFrom(1, &acks).rejoins, 0);
  EXPECT_TRUE(acks.empty());
  EXPECT_TRUE(sinks_[1]->directives.empty());
}

TEST_F(ReadyRejoinTest, AnUnconfirmedRejoin_IsSentAgainByTheTicker_ThenDownTheStream) {
  StartTrio({true, true, true}, {true, true, true});
  FailB();
  ASSERT_EQ(sender_.sent().size(), 3u);
  // a confirms (an alive datagram of round 2); b and c stay silent.
  std::vector<LivenessAck> acks;
  EXPECT_EQ(AliveFrom(0, &acks, /*round=*/2).accepted, 1);
  EXPECT_TRUE(acks.empty());
  clock_.Advance(kRejoinConfirmWithin - absl::Milliseconds(1));
  core_->Tick();
  EXPECT_EQ(sender_.sent().size(), 3u) << "not yet";
  // (Each member's repeats come kRejoinConfirmWithin plus its share of
  // kRejoinRepeatSpread apart.)
  const absl::Duration step = kRejoinConfirmWithin + kRejoinRepeatSpread;
  for (int repeat = 1; repeat <= kRejoinDatagramTries; ++repeat) {
    clock_.Advance(step);
    core_->Tick();
    const std::vector<OutgoingDatagram> sent = sender_.sent();
    ASSERT_EQ(sent.size(), 3u + 2u * static_cast<size_t>(repeat)) << repeat;
    // b's and c's, in either order, each to its own address.
    const size_t b =
        reinterpret_cast<const sockaddr_in&>(sent[sent.size() - 2].to).sin_port == htons(41001)
            ? sent.size() - 2
            : sent.size() - 1;
    const size_t c = b == sent.size() - 2 ? sent.size() - 1 : sent.size() - 2;
    ExpectRejoinOf(1, sent[b].bytes, 2);
    ExpectRejoinOf(2, sent[c].bytes, 2);
    EXPECT_EQ(reinterpret_cast<const sockaddr_in&>(sent[c].to).sin_port, htons(41002));
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(sinks_[i]->directives.empty()) << i;
  // Still nothing: UDP from here does not reach them; the streams do.
  clock_.Advance(step);
  core_->Tick();
  EXPECT_EQ(sender_.sent().size(), 3u + 2u * kRejoinDatagramTries);
  EXPECT_TRUE(sinks_[0]->directives.empty()) << "a confirmed";
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_EQ(sinks_[i]->directives.size(), 1u) << i;
    EXPECT_TRUE(sinks_[i]->directives[0].rejoin().ready_by_datagram()) << i;
    EXPECT_EQ(sinks_[i]->directives[0].rejoin().next_round(), 2u);
  }
  clock_.Advance(10 * kRejoinConfirmWithin);
  core_->Tick();
  EXPECT_EQ(sender_.sent().size(), 3u + 2u * kRejoinDatagramTries) << "done with";
  EXPECT_EQ(sinks_[1]->directives.size(), 1u);
  // The round closes as before.
  for (size_t i = 0; i < 3; ++i) Ready(i, 2);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
}

TEST_F(ReadyRejoinTest, ARejoinConfirmedOrReadied_IsNotRepeated) {
  StartTrio({true, true, true}, {true, true, true});
  FailB();
  std::vector<LivenessAck> acks;
  AliveFrom(0, &acks, /*round=*/2);  // a confirms
  Ready(1, 2);                       // b's workers stopped at once: its READY
  for (int i = 0; i <= kRejoinDatagramTries; ++i) {
    clock_.Advance(kRejoinConfirmWithin + kRejoinRepeatSpread);
    core_->Tick();
  }
  // Only c (silent) got repeats, then the stream.
  const std::vector<OutgoingDatagram> sent = sender_.sent();
  ASSERT_EQ(sent.size(), 3u + kRejoinDatagramTries);
  for (size_t k = 3; k < sent.size(); ++k) ExpectRejoinOf(2, sent[k].bytes, 2);
  EXPECT_TRUE(sinks_[0]->directives.empty());
  EXPECT_TRUE(sinks_[1]->directives.empty());
  EXPECT_EQ(sinks_[2]->directives.size(), 1u);
  // a's old-round datagram still in flight after its confirmation: nothing.
  acks.clear();
  EXPECT_EQ(AliveFrom(0, &acks).rejoins, 0);
  EXPECT_TRUE(acks.empty());
}

TEST_F(ReadyRejoinTest, RejoinByDatagram_OnlyForWatchesThatAcceptIt) {
  StartTrio({true, true, false}, {false, true, true});
  FailB();
  // a: accepts an assignment but not the REJOIN datagram: the Rejoin on
  // the stream. b: both: a datagram. c: no assignment on the stream (so no
  // REJOIN datagram either): the Rejoin of before, which ends its stream.
  const std::vector<OutgoingDatagram> sent = sender_.sent();
  ASSERT_EQ(sent.size(), 1u);
  ExpectRejoinOf(1, sent[0].bytes, 2);
  ASSERT_EQ(sinks_[0]->directives.size(), 1u);
  EXPECT_TRUE(sinks_[0]->directives[0].rejoin().ready_by_datagram());
  EXPECT_TRUE(sinks_[1]->directives.empty());
  ASSERT_EQ(sinks_[2]->directives.size(), 1u);
  EXPECT_FALSE(sinks_[2]->directives[0].rejoin().ready_by_datagram());
  EXPECT_TRUE(sinks_[2]->closed);
}

TEST_F(ReadyRejoinTest, RejoinDirective_CarriesTheReason_AgainForAnAliveOfTheOldRound) {
  // b and c take the Rejoin as a DIRECTIVE datagram (reason and all), a as
  // the 48-byte REJOIN of before.
  StartTrio({true, true, true}, {true, true, true}, {false, true, true});
  FailB();
  const std::vector<OutgoingDatagram> sent = sender_.sent();
  ASSERT_EQ(sent.size(), 3u);
  ExpectRejoinOf(0, sent[0].bytes, 2);
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(sinks_[i]->directives.empty()) << i << ": no stream write";
    const std::vector<v1::Directive> d = DirectivesTo(i);
    ASSERT_EQ(d.size(), 1u) << i;
    EXPECT_EQ(d[0].round(), 1u);
    EXPECT_EQ(d[0].coordinator_incarnation(), 0xC0u);
    ASSERT_TRUE(d[0].has_rejoin());
    EXPECT_EQ(d[0].rejoin().next_round(), 2u);
    EXPECT_TRUE(d[0].rejoin().ready_by_datagram());
    EXPECT_EQ(d[0].rejoin().reason(),
              "worker local rank 0 (global rank 2) on node b exited with code 3 (restart 1 of 2)");
  }
  // c still sends alive datagrams of round 1: it did not get it. Again, by
  // the sender (a DIRECTIVE datagram is no ack).
  std::vector<LivenessAck> acks;
  EXPECT_EQ(AliveFrom(2, &acks).rejoins, 1);
  EXPECT_TRUE(acks.empty());
  const std::vector<v1::Directive> again = DirectivesTo(2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].rejoin().reason(), again[0].rejoin().reason());
}

TEST_F(ReadyRejoinTest, RejoinDirective_AReasonTooLongForADatagram_IsCut) {
  StartTrio({true, true, true}, {true, true, true}, {true, true, true});
  v1::ReportRequest rep;
  *rep.mutable_member() = reqs_[1].member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::FAILED);
  rep.set_exit_code(3);
  rep.set_message(std::string(1024, '\x01'));  // 4 KiB once escaped
  ASSERT_TRUE(core_->Report(rep).ok());
  const std::vector<v1::Directive> d = DirectivesTo(0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_THAT(d[0].rejoin().reason(), ::testing::StartsWith("worker local rank 0 (global rank 2)"));
  EXPECT_THAT(d[0].rejoin().reason(), ::testing::EndsWith("...(cut: see the coordinator's log)"));
}

TEST_F(ReadyRejoinTest, RejoinByDatagram_NeedsTheMembersAddress) {
  // The datagrams of round 1 came without an origin (a caller that does not
  // say where from): no address to send a REJOIN to.
  with_origin_ = false;
  StartTrio({true, true, true}, {true, true, true});
  FailB();
  EXPECT_TRUE(sender_.sent().empty());
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(sinks_[i]->directives.size(), 1u) << i;
    EXPECT_TRUE(sinks_[i]->directives[0].rejoin().ready_by_datagram()) << i;
  }
}

TEST_F(ReadyRejoinTest, SurvivorsReadyByDatagram_RoundClosesAndEachAssignmentGoesDownItsStream) {
  StartTrio();
  FailB();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_FALSE(sinks_[i]->directives.empty());
    const v1::Directive& rejoin = sinks_[i]->directives.back();
    ASSERT_TRUE(rejoin.has_rejoin());
    EXPECT_EQ(rejoin.rejoin().next_round(), 2u);
    EXPECT_TRUE(rejoin.rejoin().ready_by_datagram());
    EXPECT_FALSE(sinks_[i]->closed) << "the stream stays open for the assignment";
  }
  bool acked = false;
  EXPECT_EQ(Ready(0, 2, &acked).ready, 1);
  EXPECT_TRUE(acked) << "held: acked";
  EXPECT_EQ(Ready(0, 2, &acked).ready, 1);  // a repeat (its ack was lost, for all it knows)
  EXPECT_TRUE(acked) << "a repeat is acked too";
  EXPECT_EQ(Ready(1, 3, &acked).accepted, 1);  // another round: liveness only
  EXPECT_FALSE(acked);
  EXPECT_EQ(core_->GetSnapshot().gathering, 1);
  Ready(1, 2);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering) << "c is a survivor not back yet";
  EXPECT_TRUE(Pushed(0).empty());
  Ready(2, 2);  // every survivor back: the round closes at once
  const Coordinator::Snapshot snap = core_->GetSnapshot();
  EXPECT_EQ(snap.phase, Phase::kRunning);
  EXPECT_EQ(snap.round, 2u);
  EXPECT_EQ(snap.watching, 3);
  std::set<int> ranks;
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<v1::Assignment> pushed = Pushed(i);
    ASSERT_EQ(pushed.size(), 1u) << "member " << i;
    EXPECT_EQ(sinks_[i]->directives.back().round(), 2u);
    EXPECT_EQ(sinks_[i]->directives.back().coordinator_incarnation(), 0xC0u);
    EXPECT_EQ(pushed[0].round(), 2u);
    EXPECT_EQ(pushed[0].nnodes(), 3);
    EXPECT_EQ(pushed[0].restart_count(), 1);
    EXPECT_EQ(pushed[0].liveness_slot(), as_[i].liveness_slot());
    EXPECT_EQ(pushed[0].liveness_key(), as_[i].liveness_key());
    ranks.insert(pushed[0].node_rank());
    EXPECT_FALSE(sinks_[i]->closed);
    // The same stream serves round 2: a Report of round 2 is in the round.
    EXPECT_TRUE(Report(reqs_[i], 2, v1::ReportRequest::RUNNING).ok());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  // A late repeat of a READY is a liveness datagram of the running round
  // (acked: the round closed with it, its assignment is on the way).
  EXPECT_EQ(Ready(0, 2, &acked).accepted, 1);
  EXPECT_TRUE(acked);
  EXPECT_EQ(Pushed(0).size(), 1u);
  // The kept stream still carries the round's directives: the next failure
  // re-opens round 3 on it.
  ASSERT_TRUE(Report(reqs_[0], 2, v1::ReportRequest::FAILED, 1).ok());
  ASSERT_TRUE(sinks_[2]->directives.back().has_rejoin());
  EXPECT_EQ(sinks_[2]->directives.back().rejoin().next_round(), 3u);
}

TEST_F(ReadyRejoinTest, AStreamThatDoesNotAcceptIt_GetsTheRejoinOfBefore_AndItsReadyIsNoJoin) {
  StartTrio({true, true, false});
  FailB();
  const v1::Directive& rejoin = sinks_[2]->directives.back();
  ASSERT_TRUE(rejoin.has_rejoin());
  EXPECT_FALSE(rejoin.rejoin().ready_by_datagram());
  EXPECT_TRUE(sinks_[2]->closed) << "the stream of before ends with the Rejoin";
  Ready(0, 2);
  Ready(1, 2);
  bool acked = true;
  EXPECT_EQ(Ready(2, 2, &acked).accepted, 1);
  EXPECT_FALSE(acked) << "not held: its agent falls back to a Join call";
  EXPECT_EQ(core_->GetSnapshot().gathering, 2) << "c's READY is not a join";
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  v1::JoinRequest c = reqs_[2];
  c.set_last_round(1);
  auto jc = Join(c);  // c re-joins with a Join call, as before
  ASSERT_TRUE(jc->done());
  EXPECT_EQ(jc->assignment().round(), 2u);
  EXPECT_EQ(Pushed(0).size(), 1u);
  EXPECT_TRUE(Pushed(2).empty());
}

TEST_F(ReadyRejoinTest, StreamClosedBeforeTheRoundCloses_WithdrawsTheRejoin_AJoinCallStillWorks) {
  StartTrio();
  FailB();
  Ready(0, 2);
  Ready(1, 2);
  EXPECT_EQ(core_->GetSnapshot().gathering, 2);
  core_->WatchClosed(watch_ids_[0]);  // a's stream broke: its answer has no way back
  EXPECT_EQ(core_->GetSnapshot().gathering, 1);
  Ready(2, 2);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering) << "a is not back";
  v1::JoinRequest a = reqs_[0];
  a.set_last_round(1);
  auto ja = Join(a);
  ASSERT_TRUE(ja->done()) << "every survivor is back";
  EXPECT_EQ(ja->assignment().round(), 2u);
  EXPECT_TRUE(Pushed(0).empty());
  EXPECT_EQ(Pushed(1).size(), 1u);
  EXPECT_EQ(Pushed(2).size(), 1u);
}

TEST_F(ReadyRejoinTest, AJoinCallSupersedesTheReady_AndALeaveWithdrawsIt) {
  StartTrio();
  FailB();
  Ready(0, 2);
  v1::JoinRequest a = reqs_[0];
  a.set_last_round(1);
  auto ja = Join(a);  // the agent fell back to a Join call: that call is answered
  EXPECT_FALSE(ja->done());
  EXPECT_EQ(core_->GetSnapshot().gathering, 1);
  Ready(1, 2);
  v1::LeaveRequest leave;
  *leave.mutable_member() = reqs_[1].member();
  leave.set_job_id("job");
  ASSERT_TRUE(core_->Leave(leave).ok());  // b got a signal while re-joining
  EXPECT_EQ(core_->GetSnapshot().gathering, 1);
  Ready(2, 2);
  clock_.Advance(absl::Milliseconds(600));  // b will not come back: the last call
  core_->Tick();
  ASSERT_TRUE(ja->done());
  EXPECT_EQ(ja->assignment().nnodes(), 2);
  EXPECT_TRUE(Pushed(0).empty());
  EXPECT_TRUE(Pushed(1).empty());
  ASSERT_EQ(Pushed(2).size(), 1u);
  EXPECT_EQ(Pushed(2)[0].nnodes(), 2);
}

TEST_F(ReadyRejoinTest, AMemberNotHeardOverUdpLately_GetsTheRejoinOfBefore) {
  StartTrio();
  clock_.Advance(absl::Seconds(2));  // c's datagrams stop; a and b go on
  Alive(0);
  Alive(1);
  FailB();
  EXPECT_TRUE(sinks_[0]->directives.back().rejoin().ready_by_datagram());
  EXPECT_FALSE(sinks_[2]->directives.back().rejoin().ready_by_datagram())
      << "its READYs might never get here";
  EXPECT_TRUE(sinks_[2]->closed);
}

TEST_F(ReadyRejoinTest, ASurvivorLeftOutOfTheRound_ItsKeptStreamEnds_ItsJoinIsAScaleUp) {
  StartTrio();
  FailB();
  Ready(0, 2);
  Ready(1, 2);
  clock_.Advance(absl::Milliseconds(600));  // c still stopping: the last call closes the round
  core_->Tick();
  ASSERT_EQ(core_->GetSnapshot().round, 2u);
  EXPECT_EQ(core_->GetSnapshot().members, 2);
  EXPECT_TRUE(sinks_[2]->closed) << "its stream would wait for nothing";
  EXPECT_TRUE(absl::IsAborted(sinks_[2]->close_status)) << sinks_[2]->close_status;
  EXPECT_TRUE(Pushed(2).empty());
  bool acked = true;
  Ready(2, 2, &acked);  // too late
  EXPECT_FALSE(acked);
  v1::JoinRequest c = reqs_[2];
  c.set_last_round(1);
  auto jc = Join(c);  // its fallback: a newcomer while running, below max
  EXPECT_FALSE(jc->done());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering) << "a scale-up restart, as before";
}

TEST_F(ReadyRejoinTest, ANewIncarnationWhileTheOldKeepsItsStream_IsToldToRetry_NotRefused) {
  StartTrio();
  FailB();
  v1::JoinRequest c2 = reqs_[2];
  c2.mutable_member()->set_incarnation(33);  // c's pod restarted; the old stream is still open
  auto j = Join(c2);
  ASSERT_TRUE(j->done());
  EXPECT_TRUE(absl::IsUnavailable(j->status())) << j->status() << " (retried by the client)";
  Ready(2, 2);  // the old one's READY parked on its stream: the same
  auto j2 = Join(c2);
  ASSERT_TRUE(j2->done());
  EXPECT_TRUE(absl::IsUnavailable(j2->status())) << j2->status();
  core_->WatchClosed(watch_ids_[2]);  // the old connection goes (its READY withdrawn)
  auto again = Join(c2);
  EXPECT_FALSE(again->done()) << "parked: the new incarnation replaced the dead one";
}

TEST_F(ReadyRejoinTest, ALeaveWhileGathering_EndsTheKeptStream) {
  StartTrio();
  FailB();
  v1::LeaveRequest leave;
  *leave.mutable_member() = reqs_[2].member();
  leave.set_job_id("job");
  ASSERT_TRUE(core_->Leave(leave).ok());
  EXPECT_TRUE(sinks_[2]->closed);
}

TEST_F(ReadyRejoinTest, TheRoundsAnswersRunAfterTheBatch_WhenTheCallerDefersThem) {
  StartTrio();
  FailB();
  Ready(0, 2);
  Ready(1, 2);
  const v1::Assignment& a = as_[2];
  const LivenessBytes b =
      EncodeLivenessDatagram(a.liveness_slot(), 3, 2, ++seq_[2],
                             *LivenessKeyFromBytes(a.liveness_key()), LivenessKind::kReady);
  std::vector<LivenessAck> acks;
  std::vector<std::function<void()>> deferred;
  core_->NoteLivenessBatch({*ParseAgentDatagram(b.data(), b.size())}, &acks, &deferred);
  EXPECT_EQ(acks.size(), 1u);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_TRUE(Pushed(2).empty()) << "not before the caller sent the acks";
  EXPECT_EQ(deferred.size(), 3u);
  for (auto& work : deferred) work();
  EXPECT_EQ(Pushed(0).size(), 1u);
  EXPECT_EQ(Pushed(2).size(), 1u);
}

TEST_F(ReadyRejoinTest, TheJobFailsWhileGathering_TheVerdictGoesDownTheKeptStreams) {
  StartTrio();
  FailB();
  Ready(0, 2);
  clock_.Advance(absl::Seconds(61));  // --min-nodes-timeout (60 s) with 1 of 2 back
  core_->Tick();
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(sinks_[i]->directives.back().has_job_failed()) << i;
    EXPECT_TRUE(sinks_[i]->closed) << i;
    EXPECT_TRUE(Pushed(i).empty());
  }
}

// Released streams (docs/protocol.md): in a round of release_streams_from
// members or more, a member acked twice gets a Release as its stream's last
// directive; then it is told by datagram.
class ReleasedStreamTest : public ReadyRejoinTest {
 protected:
  // a, b, c running round 1 as in StartTrio, every Watch accepting a REJOIN
  // datagram and a release (`release`), streams released from `from`
  // members on; then two acks for each (T/4 apart).
  void StartReleased(int from = 3, std::vector<bool> release = {true, true, true},
                     int min_nodes = 2) {
    StartReleasedJob({UdpReq("a", 1, -1), UdpReq("b", 2, -1), UdpReq("c", 3, -1)}, min_nodes,
                     /*max_restarts=*/2, from, release);
  }
  // The same for a job of `reqs` (min_nodes..their number).
  void StartReleasedJob(std::vector<v1::JoinRequest> reqs, int min_nodes, int max_restarts,
                        int from, std::vector<bool> release) {
    release_streams_from_ = from;
    Make(min_nodes, static_cast<int>(reqs.size()), max_restarts);
    core_->EnableUdpLiveness(29400, &sender_);
    reqs_ = std::move(reqs);
    std::vector<std::shared_ptr<JoinResult>> joins;
    for (const v1::JoinRequest& r : reqs_) joins.push_back(Join(r));
    for (size_t i = 0; i < reqs_.size(); ++i) {
      ASSERT_TRUE(joins[i]->done());
      as_.push_back(joins[i]->assignment());
      uint64_t id = 0;
      sinks_.push_back(Watch(reqs_[i], 1, &id, {true, true, release[i]}));
      ASSERT_NE(id, 0u);
      watch_ids_.push_back(id);
    }
    core_->Tick();
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < reqs_.size(); ++i) Alive(i);
      clock_.Advance(AckInterval(absl::Seconds(5)));
      core_->Tick();
    }
  }
  static bool Released(const RecordingSink& s) {
    return s.closed && !s.directives.empty() && s.directives.back().has_release();
  }
  // A TAKEN datagram of member i (the verdict of `round`).
  LivenessBatchStats Taken(size_t i, uint64_t round) {
    const LivenessBytes b = EncodeLivenessDatagram(
        as_[i].liveness_slot(), reqs_[i].member().incarnation(), round, ++seq_[i],
        *LivenessKeyFromBytes(as_[i].liveness_key()), LivenessKind::kTaken);
    std::vector<LivenessAck> acks;
    return core_->NoteLivenessBatch({*ParseAgentDatagram(b.data(), b.size())}, &acks);
  }
};

TEST_F(ReleasedStreamTest, ARoundThisLarge_ReleasesEveryStreamAfterTheSecondAck) {
  StartReleased();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(Released(*sinks_[i])) << i;
    EXPECT_EQ(sinks_[i]->directives.size(), 1u) << "the Release is the stream's only directive";
  }
  const Coordinator::Snapshot s = core_->GetSnapshot();
  EXPECT_EQ(s.released, 3);
  EXPECT_EQ(s.watching, 0);
  EXPECT_EQ(s.phase, Phase::kRunning);
}

TEST_F(ReleasedStreamTest, AHangDeclared_ReleasedMembersAreAskedByDatagram) {
  StartReleased();
  v1::ReportRequest rep;
  *rep.mutable_member() = reqs_[0].member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::RUNNING);
  rep.mutable_hang()->set_declared(true);
  rep.mutable_hang()->set_silence_ms(5000);
  ASSERT_TRUE(core_->Report(rep).ok());
  EXPECT_TRUE(DirectivesTo(0).empty()) << "the declaring member is not asked";
  for (size_t i : {1, 2}) {
    const std::vector<v1::Directive> d = DirectivesTo(i);
    ASSERT_EQ(d.size(), 1u) << i;
    ASSERT_TRUE(d[0].has_collect_evidence()) << i;
    EXPECT_EQ(d[0].collect_evidence().declared_by_node(), "a");
    EXPECT_EQ(d[0].round(), 1u);
  }
}

// docs/slow-nodes.md says every node logs a slow node once. A released
// member (rounds of --release-streams-from nodes, 2000 by default) has no
// stream for Directive.slow_nodes: its next Report's answer (a slow-signals
// Report every interval) carries the lines (found by the review30 pass).
TEST_F(ReleasedStreamTest, ASlowNodeNamed_ReleasedMembersHearItInTheirReportAnswers) {
  StartReleased();
  for (uint64_t seq = 1; seq <= 5; ++seq) {  // 1: the start-up summaries
    clock_.Advance(absl::Seconds(10));
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(SlowReport(reqs_[i], 1, seq, i == 2 ? 500 : 10).ok());
    }
    core_->Tick();
  }
  ASSERT_EQ(core_->GetSnapshot().slow_nodes.size(), 1u) << "c is named";
  for (size_t i : {0, 1}) {
    v1::ReportResponse answer;
    ASSERT_TRUE(SlowReport(reqs_[i], 1, 6, 10, &answer).ok());
    ASSERT_EQ(answer.slow_nodes_size(), 1) << i;
    EXPECT_THAT(answer.slow_nodes(0), HasSubstr("node c is slow (cpu)"));
  }
}

TEST_F(ReleasedStreamTest, NotBelowTheSize_NorWithoutAcceptsRelease_NorBeforeASecondAck) {
  StartReleased(/*from=*/4);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(sinks_[i]->closed) << "a round of 3 < 4: " << i;
  EXPECT_EQ(core_->GetSnapshot().released, 0);

  sinks_.clear();
  as_.clear();
  watch_ids_.clear();
  for (uint64_t& s : seq_) s = 0;
  StartReleased(/*from=*/3, {true, false, true});
  EXPECT_TRUE(Released(*sinks_[0]));
  EXPECT_FALSE(sinks_[1]->closed) << "its Watch did not accept a release";
  EXPECT_TRUE(Released(*sinks_[2]));
}

TEST_F(ReleasedStreamTest, FirstAckAlone_NoRelease_TheAgentMayNotHaveSeenAnAckYet) {
  release_streams_from_ = 3;
  StartTrio({true, true, true}, {true, true, true});  // one ack each (StartTrio's Alive)
  EXPECT_EQ(core_->GetSnapshot().released, 0);
}

TEST_F(ReleasedStreamTest, AReleasedMembersStreamClosing_IsNoLoss_ItsSilenceIs) {
  StartReleased();
  // The stream ends (the Release was its last write): the reactor says so.
  for (size_t i = 0; i < 3; ++i) core_->WatchClosed(watch_ids_[i]);
  const absl::Duration interval = HeartbeatInterval(absl::Seconds(5));
  for (int k = 0; k < 20; ++k) {  // 2 s of datagrams: no stream, no loss
    clock_.Advance(interval);
    for (size_t i = 0; i < 3; ++i) Alive(i);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_EQ(core_->GetSnapshot().restart_count, 0);
  // c falls silent: lost at the heartbeat timeout, as any member.
  for (int k = 0; k < 9; ++k) {
    clock_.Advance(interval);
    Alive(0);
    Alive(1);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().restart_count, 0) << "0.9 T: not yet";
  for (int k = 0; k < 3; ++k) {
    clock_.Advance(interval);
    Alive(0);
    Alive(1);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().restart_count, 1) << "lost at about T";
}

TEST_F(ReleasedStreamTest, Restart_RejoinByDatagram_AssignmentByDatagram_AgainForALateReady) {
  StartReleased();
  for (size_t i = 0; i < 3; ++i) Alive(i);  // heard lately: each may re-join by datagram
  const size_t before = sender_.sent().size();
  FailB();
  // Each released member is told by a REJOIN datagram.
  std::vector<OutgoingDatagram> sent = sender_.sent();
  ASSERT_EQ(sent.size(), before + 3);
  for (size_t i = 0; i < 3; ++i) ExpectRejoinOf(i, sent[before + i].bytes, 2);
  // With no stream to fall back on, the REJOIN goes again for every alive
  // datagram of the old round, past kRejoinDatagramTries.
  for (int k = 0; k < kRejoinDatagramTries + 2; ++k) {
    std::vector<LivenessAck> acks;
    EXPECT_EQ(AliveFrom(0, &acks).rejoins, 1) << k;
    ASSERT_EQ(acks.size(), 1u);
    ExpectRejoinOf(0, acks[0].bytes, 2);
  }
  // READYs: held (acked), no stream needed.
  bool acked = false;
  Ready(0, 2, &acked);
  EXPECT_TRUE(acked);
  Ready(1, 2, &acked);
  EXPECT_TRUE(acked);
  Ready(2, 2, &acked);
  EXPECT_TRUE(acked);
  ASSERT_EQ(core_->GetSnapshot().round, 2u);
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  // Each got its assignment of round 2 as a DIRECTIVE datagram, without the
  // liveness key (a datagram is not encrypted), and nothing on a stream.
  for (size_t i = 0; i < 3; ++i) {
    std::vector<v1::Directive> d = DirectivesTo(i);
    ASSERT_EQ(d.size(), 1u) << i << ": " << (d.empty() ? "" : d[0].DebugString())
                            << (d.size() > 1 ? d[1].DebugString() : "");
    ASSERT_TRUE(d[0].has_assignment()) << i;
    EXPECT_EQ(d[0].round(), 2u);
    EXPECT_EQ(d[0].coordinator_incarnation(), 0xC0u);
    EXPECT_EQ(d[0].assignment().round(), 2u);
    EXPECT_EQ(d[0].assignment().nnodes(), 3);
    EXPECT_TRUE(d[0].assignment().liveness_key().empty());
    EXPECT_EQ(d[0].assignment().liveness_slot(), as_[i].liveness_slot());
    EXPECT_TRUE(Pushed(i).empty());
  }
  EXPECT_EQ(core_->GetSnapshot().released, 3) << "still released in round 2";
  // A READY of round 2 after the close: that datagram was lost; again.
  const LivenessBatchStats st = Ready(1, 2, &acked);
  EXPECT_TRUE(acked);
  EXPECT_EQ(st.directives, 1);
  EXPECT_EQ(DirectivesTo(1).size(), 2u);
}

TEST_F(ReleasedStreamTest, TheVerdict_ByDatagram_AgainUntilTaken_DrainedThen) {
  StartReleased();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(Report(reqs_[i], 1, v1::ReportRequest::SUCCEEDED).ok());
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kSucceeded);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<v1::Directive> d = DirectivesTo(i);
    ASSERT_EQ(d.size(), 1u) << i;
    EXPECT_TRUE(d[0].has_job_finished()) << i;
  }
  EXPECT_FALSE(core_->Drained()) << "until each says TAKEN";
  // a says TAKEN; b is alive without it (lost datagram): told again.
  EXPECT_EQ(Taken(0, 1).taken, 1);
  std::vector<LivenessAck> acks;
  EXPECT_EQ(AliveFrom(1, &acks).directives, 1);
  EXPECT_EQ(DirectivesTo(1).size(), 2u);
  EXPECT_TRUE(DirectivesTo(1).back().has_job_finished());
  EXPECT_EQ(AliveFrom(0, &acks).directives, 0) << "a took it";
  EXPECT_EQ(Taken(1, 1).taken, 1);
  EXPECT_FALSE(core_->Drained()) << "c has not said it";
  // c went silent: gone; nothing more to wait for.
  clock_.Advance(SilenceLimit(absl::Seconds(5)));
  core_->Tick();
  EXPECT_TRUE(core_->Drained());
}

TEST_F(ReleasedStreamTest, WatchAgain_ServedOnTheStream_TheVerdictGoesDownIt) {
  StartReleased();
  // b's acks stopped: it opens its Watch again, refusing a release.
  uint64_t id = 0;
  auto sink = Watch(reqs_[1], 1, &id, {true, true, false});
  ASSERT_NE(id, 0u);
  EXPECT_EQ(core_->GetSnapshot().released, 2);
  EXPECT_EQ(core_->GetSnapshot().watching, 1);
  clock_.Advance(AckInterval(absl::Seconds(5)));
  core_->Tick();
  Alive(1);
  EXPECT_FALSE(sink->closed) << "not released again";
  // The verdict: down b's stream, by datagram to a and c; Drained once a and
  // c say TAKEN and b's stream ends.
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(Report(reqs_[i], 1, v1::ReportRequest::SUCCEEDED).ok());
  }
  ASSERT_FALSE(sink->directives.empty());
  EXPECT_TRUE(sink->directives.back().has_job_finished());
  EXPECT_TRUE(sink->closed);
  EXPECT_TRUE(DirectivesTo(1).empty()) << "b is told on its stream only";
  EXPECT_EQ(DirectivesTo(0).size(), 1u);
  Taken(0, 1);
  Taken(2, 1);
  EXPECT_FALSE(core_->Drained()) << "b's stream has not ended yet";
  core_->WatchClosed(id);
  EXPECT_TRUE(core_->Drained());
}

TEST_F(ReleasedStreamTest, ASilentReleasedReJoiner_IsWithdrawn_ItsNewIncarnationJoins) {
  // All three needed (MIN 3): the round waits for b while a and c hold.
  StartReleased(3, {true, true, true}, /*min_nodes=*/3);
  for (size_t i = 0; i < 3; ++i) Alive(i);
  FailB();
  bool acked = false;
  Ready(0, 2, &acked);
  ASSERT_TRUE(acked);
  Ready(2, 2, &acked);
  ASSERT_TRUE(acked);
  EXPECT_EQ(core_->GetSnapshot().gathering, 2);
  // c dies while it waits for its assignment (no stream to close): its
  // re-join is withdrawn once it has been silent for the silence limit.
  const absl::Duration interval = HeartbeatInterval(absl::Seconds(5));
  for (int k = 0; k < 12; ++k) {
    clock_.Advance(interval);
    Ready(0, 2);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().gathering, 1) << "c's dead re-join no longer counts";
  // Its pod restarted: the new incarnation is let in at once.
  v1::JoinRequest again = UdpReq("c", 33, -1);
  auto r = Join(again);
  EXPECT_TRUE(!r->done() || r->status().ok()) << r->status();
  EXPECT_EQ(core_->GetSnapshot().gathering, 2);
}

TEST_F(ReleasedStreamTest, AVerdictDatagramLost_ARepeatForAReady) {
  StartReleased();
  for (size_t i = 0; i < 3; ++i) Alive(i);
  FailB();
  // a re-joins by READY (one every interval); nobody else comes back:
  // --min-nodes-timeout (60 s) with 1 of 2 back fails the job.
  for (int k = 0; k < 140 && core_->GetSnapshot().phase != Phase::kFailed; ++k) {
    clock_.Advance(HeartbeatInterval(absl::Seconds(5)));
    Ready(0, 2);
    core_->Tick();
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  ASSERT_EQ(DirectivesTo(0).size(), 1u);
  // a re-joins by READY still (the verdict was lost): told again.
  const LivenessBatchStats st = Ready(0, 2);
  EXPECT_EQ(st.directives, 1);
  ASSERT_EQ(DirectivesTo(0).size(), 2u);
  EXPECT_TRUE(DirectivesTo(0).back().has_job_failed());
}

TEST_F(ReleasedStreamTest, AVerdictTooLongForADatagram_GoesWithItsReasonCut) {
  // A static job of two released members; b leaves with the longest reason
  // a Leave may carry, all of it escaped (4 KiB in the verdict's reason).
  StartReleasedJob({UdpReq("a", 1, 0), UdpReq("b", 2, 1)}, /*min_nodes=*/2, /*max_restarts=*/0,
                   /*from=*/2, {true, true});
  ASSERT_EQ(core_->GetSnapshot().released, 2);
  v1::LeaveRequest leave;
  *leave.mutable_member() = reqs_[1].member();
  leave.set_job_id("job");
  leave.set_reason(std::string(kMaxMessageLength, '\x01'));
  ASSERT_TRUE(core_->Leave(leave).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  ASSERT_GT(core_->GetSnapshot().verdict.size(), kMaxDirectivePayloadBytes);
  std::vector<v1::Directive> d = DirectivesTo(0);
  ASSERT_EQ(d.size(), 1u) << "sent, though the whole verdict would not fit";
  ASSERT_TRUE(d[0].has_job_failed());
  EXPECT_THAT(d[0].job_failed().reason(),
              ::testing::EndsWith("...(cut: see the coordinator's log)"));
  EXPECT_THAT(d[0].job_failed().reason(), ::testing::StartsWith("node b (ranks 2-3) left: "));
}

TEST_F(ReleasedStreamTest, InALaterRound_TheFirstAckOfThatRound_IsNotASecondAck) {
  // Round 1 without releases (its watches refuse them), two acks each.
  StartReleased(/*from=*/3, {false, false, false});
  ASSERT_EQ(core_->GetSnapshot().released, 0);
  for (size_t i = 0; i < 3; ++i) Alive(i);
  FailB();
  for (size_t i = 0; i < 3; ++i) Ready(i, 2);
  ASSERT_EQ(core_->GetSnapshot().round, 2u);
  for (size_t i = 0; i < 3; ++i) as_[i] = Pushed(i).back();
  // a opens a new Watch for round 2, accepting a release.
  uint64_t id = 0;
  auto sink = Watch(reqs_[0], 2, &id, {true, true, true});
  ASSERT_NE(id, 0u);
  clock_.Advance(AckInterval(absl::Seconds(5)));  // past round 1's last ack
  core_->Tick();
  std::vector<LivenessAck> acks;
  ASSERT_EQ(AliveFrom(0, &acks).acks, 1);  // the first ack of round 2
  EXPECT_FALSE(sink->closed) << "released on its first ack of the round: the agent had none yet";
  clock_.Advance(AckInterval(absl::Seconds(5)));
  core_->Tick();
  Alive(0);
  EXPECT_TRUE(Released(*sink)) << "the second";
}

TEST_F(UdpLivenessTest, Assignment_CarriesTheReportIntervalAndFirstReportDelay) {
  StartUdpPair();
  EXPECT_EQ(a_.report_interval_ms(), 4530);  // T - interval: a small round
  EXPECT_EQ(a_.first_report_delay_ms(), 470);
  EXPECT_EQ(b_.first_report_delay_ms(), 470);
}

TEST_F(UdpLivenessTest, SilentMember_LostWithinFivePercentOfTheTimeoutAfterFallingSilent) {
  StartUdpPair();
  const absl::Duration timeout = absl::Seconds(5);
  const absl::Duration interval = HeartbeatInterval(timeout);
  uint64_t a_seq = 0, b_seq = 0;
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(interval);
    Send(Datagram(a_, 1, ++a_seq));
    Send(Datagram(b_, 2, ++b_seq));
    core_->Tick();
  }
  // b's last datagram is now. It fell silent between now (its next one
  // was due `interval` later) and `interval` from now; either way the loss
  // must come 0.95 to 1.05 timeouts after it fell silent, with the liveness
  // thread's coalescing wait on top of the simulated delivery.
  clock_.Advance(kLivenessCoalesce);
  const absl::Duration took = TickUntilLost(2 * timeout, &a_seq) + kLivenessCoalesce;
  ASSERT_EQ(sa_->directives.size(), 1u);
  EXPECT_THAT(sa_->directives[0].job_failed().reason(), HasSubstr("no heartbeat"));
  EXPECT_EQ(sa_->directives[0].job_failed().failed_node_id(), "b");
  EXPECT_LE(took, timeout * 1.05) << "fell silent right after its last datagram";
  EXPECT_GE(took - interval, timeout * 0.95) << "fell silent just before its next one";
}

TEST_F(UdpLivenessTest, BadDatagrams_AreIgnored_AndTheMemberIsLostAsIfSilent) {
  StartUdpPair();
  uint64_t a_seq = 0;
  ASSERT_EQ(Send(Datagram(b_, 2, 10)).accepted, 1);
  LivenessKey wrong_key = *LivenessKeyFromBytes(b_.liveness_key());
  wrong_key[0] ^= 1;
  const absl::Time start = clock_.Now();
  // Every interval, one of each kind of bad datagram for b's slot.
  LivenessBatchStats total;
  while (core_->GetSnapshot().phase == Phase::kRunning && clock_.Now() - start < absl::Seconds(8)) {
    Send(Datagram(a_, 1, ++a_seq));
    std::vector<LivenessDatagram> bad = {
        Datagram(b_, 2, 100 + a_seq, std::nullopt, wrong_key),  // forged: wrong MAC
        Datagram(b_, 2, 10),                                    // replayed: old seq
        Datagram(b_, 2, 5),                                     // reordered: lower seq
        Datagram(b_, 99, 200 + a_seq),                          // another incarnation
        Datagram(b_, 2, 300 + a_seq, 1000),                     // no such slot
    };
    LivenessBatchStats s = core_->NoteLivenessBatch(bad);
    EXPECT_EQ(s.accepted, 0);
    total.bad_mac += s.bad_mac;
    total.stale_seq += s.stale_seq;
    total.wrong_incarnation += s.wrong_incarnation;
    total.unknown_slot += s.unknown_slot;
    clock_.Advance(HeartbeatInterval(absl::Seconds(5)));
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  EXPECT_EQ(sa_->directives.size(), 1u);
  EXPECT_LE(clock_.Now() - start,
            SilenceLimit(absl::Seconds(5)) + HeartbeatInterval(absl::Seconds(5)));
  EXPECT_GT(total.bad_mac, 5);
  EXPECT_EQ(total.stale_seq, 2 * total.bad_mac);
  EXPECT_EQ(total.wrong_incarnation, total.bad_mac) << "signed with b's key, another incarnation";
  EXPECT_EQ(total.unknown_slot, total.bad_mac);
}

TEST_F(UdpLivenessTest, WithoutUdpOrWithoutTheOffer_DatagramsCountForNothing) {
  Make(1, 1);  // UDP liveness not enabled
  auto j = Join(UdpReq("a", 1, 0));
  ASSERT_TRUE(j->done());
  v1::Assignment fake = j->assignment();
  fake.set_liveness_key(std::string(16, 'k'));
  EXPECT_EQ(Send(Datagram(fake, 1, 1)).unknown_slot, 1);
}

TEST_F(UdpLivenessTest, ReportsStillCount_AndSayWhetherDatagramsAreHeard) {
  StartUdpPair();
  auto report = [&](const v1::JoinRequest& r) {
    v1::ReportRequest rep;
    *rep.mutable_member() = r.member();
    rep.set_job_id("job");
    rep.set_round(1);
    rep.set_state(v1::ReportRequest::RUNNING);
    v1::ReportResponse resp;
    EXPECT_TRUE(core_->Report(rep, &resp).ok());
    return resp.udp_heard();
  };
  EXPECT_FALSE(report(rb_)) << "no datagram yet";
  Send(Datagram(b_, 2, 1));
  clock_.Advance(absl::Milliseconds(300));
  EXPECT_TRUE(report(rb_));
  clock_.Advance(UdpHeardWithin(absl::Seconds(5)));
  EXPECT_FALSE(report(rb_)) << "datagrams stopped: the agent goes back to frequent Reports";
  // Fallback: Reports every interval keep b alive with no datagram at all.
  uint64_t a_seq = 0;
  for (int i = 0; i < 40; ++i) {
    clock_.Advance(HeartbeatInterval(absl::Seconds(5)));
    Send(Datagram(a_, 1, ++a_seq));
    report(rb_);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  // ... and b is lost at the silence limit after its last Report.
  const absl::Duration took = TickUntilLost(absl::Seconds(10), &a_seq);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  EXPECT_GE(took, SilenceLimit(absl::Seconds(5)));
  EXPECT_LE(took, SilenceLimit(absl::Seconds(5)) + kMaxTickDelay);
}

TEST_F(UdpLivenessTest, SlotOfAGoneMember_IsReusedWithANewKey) {
  Make(2, 2, /*max_restarts=*/1);
  core_->EnableUdpLiveness(29400);
  auto ra = UdpReq("a", 1, 0), rb = UdpReq("b", 2, 1);
  auto ja = Join(ra);
  auto jb = Join(rb);
  ASSERT_TRUE(ja->done() && jb->done());
  const v1::Assignment a = ja->assignment();
  v1::LeaveRequest leave;
  *leave.mutable_member() = ra.member();
  leave.set_job_id("job");
  leave.set_reason("test");
  ASSERT_TRUE(core_->Leave(leave).ok());  // a is gone: round 2 opens
  auto rc = UdpReq("c", 3, 0);
  auto jc = Join(rc);
  auto jb2 = Join(rb);
  ASSERT_TRUE(jc->done() && jb2->done()) << jc->status();
  const v1::Assignment c = jc->assignment();
  EXPECT_EQ(c.liveness_slot(), a.liveness_slot()) << "the freed slot is taken again";
  EXPECT_NE(c.liveness_key(), a.liveness_key());
  EXPECT_EQ(jb2->assignment().liveness_slot(), jb->assignment().liveness_slot())
      << "a member keeps its slot and key across rounds";
  EXPECT_EQ(jb2->assignment().liveness_key(), jb->assignment().liveness_key());
  // a's datagrams (its old key, its incarnation) do not keep c alive.
  LivenessDatagram from_a = Datagram(a, 1, 50);
  from_a.header[24] = static_cast<uint8_t>(c.round());  // even for the new round
  EXPECT_EQ(Send(from_a).accepted, 0);
  EXPECT_EQ(Send(Datagram(c, 3, 1)).accepted, 1);
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
  LoseStream(ids[1]);  // n-1 dies.
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

// After a loss at scale the survivors come back over seconds, not all within
// one last call; a round cut in two would make the rest a scale-up restart.
class SurvivorsWaveTest : public CoordinatorTest {
 protected:
  // A running elastic job of `n` nodes (min 2, last call 500 ms) that lost
  // its last node: every other node was told to re-join round 2.
  void StartAndLoseLast(int n) {
    Make(2, n, /*max_restarts=*/3);
    for (int i = 0; i < n; ++i) reqs_.push_back(Req(absl::StrCat("n-", i), 10 + i, i));
    for (auto& r : reqs_) Join(r);
    std::vector<uint64_t> ids(n);
    for (int i = 0; i < n; ++i) Watch(reqs_[i], 1, &ids[i]);
    LoseStream(ids[n - 1]);
  }
  std::shared_ptr<JoinResult> Rejoin(int i) {
    auto r = reqs_[i];
    r.set_last_round(1);
    return Join(r);
  }
  // Advances `d` in 20 ms ticks.
  void Pass(absl::Duration d) {
    for (absl::Duration t; t < d; t += absl::Milliseconds(20)) {
      clock_.Advance(absl::Milliseconds(20));
      core_->Tick();
    }
  }
  std::vector<v1::JoinRequest> reqs_;
};

TEST_F(SurvivorsWaveTest, EachReturningSurvivorReArmsTheLastCall) {
  StartAndLoseLast(6);                  // survivors n-0..n-4
  auto r0 = Rejoin(0), r1 = Rejoin(1);  // the minimum: the last call starts
  Pass(absl::Milliseconds(400));
  auto r2 = Rejoin(2);
  Pass(absl::Milliseconds(400));
  auto r3 = Rejoin(3);  // 800 ms after the minimum: one last call would be over
  Pass(absl::Milliseconds(400));
  EXPECT_FALSE(r0->done()) << "closed while survivors were still coming back";
  Pass(absl::Milliseconds(200));  // 500 ms after the last survivor (n-4 never comes)
  ASSERT_TRUE(r3->done());
  EXPECT_EQ(r3->assignment().nnodes(), 4);
  EXPECT_EQ(core_->GetSnapshot().round, 2u);
}

TEST_F(SurvivorsWaveTest, AtMostTenLastCallsInAll) {
  StartAndLoseLast(40);  // 39 survivors, one every 300 ms
  std::vector<std::shared_ptr<JoinResult>> back = {Rejoin(0), Rejoin(1)};
  for (int i = 2; i < 39 && !back[0]->done(); ++i) {
    Pass(absl::Milliseconds(300));
    if (!back[0]->done()) back.push_back(Rejoin(i));
  }
  ASSERT_TRUE(back[0]->done());
  // 10 x 500 ms after the minimum: 2 + 5 s / 300 ms survivors.
  EXPECT_EQ(back[0]->assignment().nnodes(), 18);
}

// --- GetSnapshot's lost nodes and restarts (the controller's CoordinatorView) ---

TEST_F(CoordinatorTest, Snapshot_NamesTheLostNodeAndTheRestart_UntilTheNodeJoinsAgain) {
  Make(2, 3, /*max_restarts=*/3);
  std::vector<v1::JoinRequest> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(Req(absl::StrCat("n-", i), 10 + i, i));
  for (auto& r : reqs) Join(r);
  std::vector<uint64_t> ids(3);
  for (int i = 0; i < 3; ++i) Watch(reqs[i], 1, &ids[i]);
  Coordinator::Snapshot s = core_->GetSnapshot();
  EXPECT_TRUE(s.lost_nodes.empty());
  EXPECT_TRUE(s.restarts.empty());

  LoseStream(ids[1]);  // n-1 dies: round 2 opens without it.
  s = core_->GetSnapshot();
  EXPECT_THAT(s.lost_nodes, ::testing::ElementsAre("n-1"));
  ASSERT_EQ(s.restarts.size(), 1u);
  EXPECT_EQ(s.restarts[0].round, 2u);
  EXPECT_THAT(s.restarts[0].reason, HasSubstr("n-1"));
  EXPECT_THAT(s.restarts[0].reason, HasSubstr("restart 1 of 3"));

  // A worker failure on a survivor restarts too, and loses no node.
  for (int i : {0, 2}) {
    auto r = reqs[i];
    r.set_last_round(1);
    Join(r);
  }
  clock_.Advance(absl::Milliseconds(500));
  core_->Tick();
  ASSERT_EQ(core_->GetSnapshot().round, 2u);
  ASSERT_TRUE(Report(reqs[2], 2, v1::ReportRequest::FAILED, 3).ok());
  s = core_->GetSnapshot();
  EXPECT_THAT(s.lost_nodes, ::testing::ElementsAre("n-1"));
  ASSERT_EQ(s.restarts.size(), 2u);
  EXPECT_EQ(s.restarts[1].round, 3u);
  EXPECT_THAT(s.restarts[1].reason, HasSubstr("restart 2 of 3"));

  // n-1 comes back as a new incarnation: no longer lost; the restarts stay.
  auto back = Req("n-1", 99, 1);
  back.set_last_round(2);
  Join(back);
  s = core_->GetSnapshot();
  EXPECT_TRUE(s.lost_nodes.empty());
  EXPECT_EQ(s.restarts.size(), 2u);
}

TEST_F(CoordinatorTest, Snapshot_KeepsTheLatest64LostNodesAndTheLatest16Restarts) {
  // Elastic 1..2 nodes: "keep" runs throughout; each x-i joins (a scale-up
  // restart), then is lost (a second restart).
  Make(1, 2, /*max_restarts=*/1000);
  auto keep = Req("keep", 1);
  Join(keep);
  clock_.Advance(absl::Milliseconds(500));
  core_->Tick();
  uint64_t round = 1;
  ASSERT_EQ(core_->GetSnapshot().round, round);
  Watch(keep, round);
  constexpr int kLosses = 70;
  for (int i = 0; i < kLosses; ++i) {
    auto x = Req(absl::StrCat("x-", i), 100 + i);
    Join(x);  // scale-up: keep is told to re-join.
    keep.set_last_round(round);
    Join(keep);  // 2 of 2: the round closes at once.
    ASSERT_EQ(core_->GetSnapshot().round, ++round) << "x-" << i;
    uint64_t x_watch = 0;
    Watch(x, round, &x_watch);
    Watch(keep, round);
    LoseStream(x_watch);
    keep.set_last_round(round);
    Join(keep);
    clock_.Advance(absl::Milliseconds(500));
    core_->Tick();
    ASSERT_EQ(core_->GetSnapshot().round, ++round) << "x-" << i;
    Watch(keep, round);
  }
  const Coordinator::Snapshot s = core_->GetSnapshot();
  ASSERT_EQ(s.lost_nodes.size(), static_cast<size_t>(kSnapshotLostNodes));
  EXPECT_EQ(s.lost_nodes.front(), absl::StrCat("x-", kLosses - kSnapshotLostNodes));
  EXPECT_EQ(s.lost_nodes.back(), absl::StrCat("x-", kLosses - 1));
  ASSERT_EQ(s.restarts.size(), static_cast<size_t>(kSnapshotRestarts));
  EXPECT_EQ(s.restarts.back().round, round);
  EXPECT_THAT(s.restarts.back().reason, HasSubstr(absl::StrCat("x-", kLosses - 1)));
  EXPECT_EQ(s.restarts.front().round, round - kSnapshotRestarts + 1);
  EXPECT_THAT(s.restarts[kSnapshotRestarts - 2].reason, HasSubstr("scale-up"));
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

// A node whose workers succeeded reports just after another node's failure
// restarted the round: its Report crossed the Rejoin. It is told why, with
// ROUND_RESTARTED, so that its agent logs the restart's cause once (as the
// Rejoin would) instead of "the current round is 1".
TEST_F(CoordinatorTest, AReportThatCrossesItsRoundsRestart_IsToldWhy) {
  Make(2, 2, /*max_restarts=*/1);
  auto ra = Req("a", 1, 0);
  auto rb = Req("b", 1, 1);
  Join(ra);
  Join(rb);
  ASSERT_TRUE(Report(rb, 1, v1::ReportRequest::FAILED, 3).ok());
  absl::Status late = Report(ra, 1, v1::ReportRequest::SUCCEEDED, 0);
  EXPECT_TRUE(absl::IsAborted(late)) << late;
  EXPECT_EQ(ReasonOf(late), v1::ErrorInfo::ROUND_RESTARTED);
  EXPECT_THAT(late.message(), HasSubstr("on node b exited with code 3"));
  // So is a Watch that crossed it (a worker that failed at once).
  auto watch = std::make_shared<RecordingSink>();
  v1::WatchRequest w;
  *w.mutable_member() = rb.member();
  w.set_job_id("job");
  w.set_round(1);
  absl::StatusOr<uint64_t> watched = core_->Watch(w, watch);
  ASSERT_FALSE(watched.ok());
  EXPECT_EQ(ReasonOf(watched.status()), v1::ErrorInfo::ROUND_RESTARTED);
  // A report for an older round is still only stale.
  absl::Status older = Report(ra, 0, v1::ReportRequest::RUNNING, 0);
  EXPECT_EQ(ReasonOf(older), v1::ErrorInfo::REASON_UNSPECIFIED);
}

// --- Preflight (docs/preflight.md, "The policy").

v1::JoinRequest WithPreflight(v1::JoinRequest r, bool pass) {
  v1::PreflightReport* p = r.mutable_preflight();
  p->set_node_id(r.member().node_id());
  v1::CheckResult* c = p->add_results();
  c->set_check("shm_size");
  c->set_outcome(v1::CheckResult::PASS);
  c = p->add_results();
  c->set_check("dns");
  c->set_outcome(pass ? v1::CheckResult::PASS : v1::CheckResult::FAIL);
  c->set_reason(pass ? "" : "1 of 2 names do not resolve (pod-9.job)");
  return r;
}

TEST_F(CoordinatorTest, Preflight_Warn_TheNodeRunsAndEveryAssignmentNamesIt) {
  Make(3, 3);
  auto a = Join(WithPreflight(Req("a", 1, 0), true));
  auto b = Join(WithPreflight(Req("b", 2, 1), false));
  auto c = Join(Req("c", 3, 2));  // not checked: never a warning
  ASSERT_TRUE(a->done() && b->done() && c->done());
  ASSERT_TRUE(b->result->ok()) << b->status();
  for (const auto& j : {a, b, c}) {
    EXPECT_EQ(j->assignment().preflight_policy(), v1::PREFLIGHT_WARN);
    ASSERT_EQ(j->assignment().preflight_warnings_size(), 1);
    EXPECT_THAT(j->assignment().preflight_warnings(0),
                HasSubstr("node b: dns: 1 of 2 names do not resolve"));
  }
}

TEST_F(CoordinatorTest, Preflight_Fail_FailsTheJobNamingTheNodeAndTheCheck) {
  preflight_ = v1::PREFLIGHT_FAIL;
  Make(2, 2);
  auto a = Join(WithPreflight(Req("a", 1, 0), true));
  auto b = Join(WithPreflight(Req("b", 2, 1), false));
  ASSERT_TRUE(a->done() && b->done());
  for (const auto& j : {a, b}) {
    ASSERT_FALSE(j->result->ok());
    EXPECT_EQ(ReasonOf(j->status()), v1::ErrorInfo::PREFLIGHT_FAILED) << j->status();
    EXPECT_THAT(j->status().message(), HasSubstr("preflight: node b failed dns: 1 of 2"));
  }
}

TEST_F(CoordinatorTest, Preflight_Exclude_TheElasticRoundClosesWithoutTheBadNode) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 3, /*max_restarts=*/3);
  auto bad = Join(WithPreflight(Req("bad", 1), false));
  auto a = Join(WithPreflight(Req("a", 2), true));
  auto b = Join(WithPreflight(Req("b", 3), true));
  // Three joined (the maximum): the round closes at once, without "bad".
  ASSERT_TRUE(a->done() && b->done() && bad->done());
  ASSERT_TRUE(a->result->ok()) << a->status();
  EXPECT_EQ(a->assignment().nnodes(), 2);
  EXPECT_EQ(a->assignment().preflight_warnings_size(), 0);
  ASSERT_FALSE(bad->result->ok());
  EXPECT_EQ(ReasonOf(bad->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_EQ(ErrorInfoOf(bad->status()).retry_after_ms(), 300000);
  EXPECT_THAT(bad->status().message(), HasSubstr("node bad left out of the round"));
  // While the round runs, a failing newcomer is answered at once: no
  // scale-up restarts the others for it.
  auto again = Join(WithPreflight(Req("bad", 4), false));
  ASSERT_TRUE(again->done());
  EXPECT_EQ(ReasonOf(again->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_TRUE(core_->GetSnapshot().restarts.empty());
  // Once it passes, it joins as a scale-up.
  auto passed = Join(WithPreflight(Req("bad", 5), true));
  EXPECT_FALSE(passed->done()) << "parked for the scale-up round";
  ASSERT_EQ(core_->GetSnapshot().restarts.size(), 1u);
  EXPECT_THAT(core_->GetSnapshot().restarts[0].reason, HasSubstr("scale-up: node bad joined"));
}

TEST_F(CoordinatorTest, Preflight_Exclude_TooFewPassing_TheBadNodeRunsWithAWarning) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 3, /*max_restarts=*/3);
  auto bad = Join(WithPreflight(Req("bad", 1), false));
  auto a = Join(WithPreflight(Req("a", 2), true));
  EXPECT_FALSE(a->done());
  clock_.Advance(absl::Milliseconds(600));  // the last call
  core_->Tick();
  ASSERT_TRUE(a->done() && bad->done());
  ASSERT_TRUE(bad->result->ok()) << bad->status();
  EXPECT_EQ(bad->assignment().nnodes(), 2);
  ASSERT_EQ(a->assignment().preflight_warnings_size(), 1);
  EXPECT_THAT(a->assignment().preflight_warnings(0), HasSubstr("node bad: dns"));
}

// MIN leaves room for one of two failing nodes: one stays out (in node-id
// order) and the other runs with a warning, rather than both running.
TEST_F(CoordinatorTest, Preflight_Exclude_RoomForSome_AsManyAsMinAllowsStayOut) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(3, 4, /*max_restarts=*/3);
  auto a = Join(WithPreflight(Req("a", 1), true));
  auto b = Join(WithPreflight(Req("b", 2), true));
  auto c = Join(WithPreflight(Req("c", 3), false));
  auto d = Join(WithPreflight(Req("d", 4), false));
  ASSERT_TRUE(a->done() && b->done() && c->done() && d->done());
  ASSERT_FALSE(c->result->ok());
  EXPECT_EQ(ReasonOf(c->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  ASSERT_TRUE(d->result->ok()) << d->status();
  EXPECT_EQ(d->assignment().nnodes(), 3);
  ASSERT_EQ(a->assignment().preflight_warnings_size(), 1);
  EXPECT_THAT(a->assignment().preflight_warnings(0), HasSubstr("node d: dns"));
}

TEST_F(CoordinatorTest, Preflight_Exclude_InAStaticJobOnlyWarns) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 2);
  auto a = Join(WithPreflight(Req("a", 1, 0), true));
  auto b = Join(WithPreflight(Req("b", 2, 1), false));
  ASSERT_TRUE(a->done() && b->done());
  ASSERT_TRUE(b->result->ok()) << b->status();
  EXPECT_EQ(a->assignment().preflight_warnings_size(), 1);
}

TEST_F(CoordinatorTest, Preflight_AReportAfterTheStart_WarnsInTheAnswers) {
  Make(2, 2);
  auto ra = Req("a", 1, 0);
  auto rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  auto a_sink = Watch(ra, 1);
  v1::ReportRequest rep;
  *rep.mutable_member() = rb.member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::RUNNING);
  *rep.mutable_preflight() = WithPreflight(rb, false).preflight();
  v1::ReportResponse answer;
  ASSERT_TRUE(core_->Report(rep, &answer).ok());
  ASSERT_EQ(answer.preflight_warnings_size(), 1);
  EXPECT_THAT(answer.preflight_warnings(0), HasSubstr("node b: dns"));
  // Every watching member is told at once.
  ASSERT_EQ(a_sink->directives.size(), 1u);
  ASSERT_TRUE(a_sink->directives[0].has_preflight_warnings());
  EXPECT_THAT(a_sink->directives[0].preflight_warnings().lines(0), HasSubstr("node b: dns"));
  // The same report again tells nobody again.
  ASSERT_TRUE(core_->Report(rep, &answer).ok());
  EXPECT_EQ(a_sink->directives.size(), 1u);
  // Every member's answers say it.
  v1::ReportRequest from_a = rep;
  *from_a.mutable_member() = ra.member();
  from_a.clear_preflight();
  v1::ReportResponse a_answer;
  ASSERT_TRUE(core_->Report(from_a, &a_answer).ok());
  EXPECT_EQ(a_answer.preflight_warnings_size(), 1);
}

// --- The network measurement (docs/preflight.md, "The network").

// A join that offers a measurer and whose links are due.
v1::JoinRequest Measurable(v1::JoinRequest r, bool due = true) {
  r.set_link_port(7000 + static_cast<int>(r.member().incarnation()));
  r.set_network_due(due);
  return WithPreflight(std::move(r), true);
}

// The links `from` measured by `plan`: 1 GB/s, or 10 MB/s where either
// end is in `slow`.
google::protobuf::RepeatedPtrField<v1::LinkResult> LinksOf(const std::string& from,
                                                           const v1::NetworkPlan& plan,
                                                           const std::set<std::string>& slow) {
  google::protobuf::RepeatedPtrField<v1::LinkResult> out;
  for (const v1::LinkTarget& t : plan.targets()) {
    v1::LinkResult* l = out.Add();
    l->set_from_node(from);
    l->set_to_node(t.node_id());
    const bool bad = slow.count(from) > 0 || slow.count(t.node_id()) > 0;
    l->set_bytes(bad ? 1000000 : 100000000);
    l->set_seconds(0.1);
    l->set_bandwidth_bytes_per_second(bad ? 1e7 : 1e9);
    l->set_samples(3);
  }
  return out;
}

struct Measured {
  std::map<std::string, v1::NetworkPlan> plans;
  std::map<std::string, std::shared_ptr<JoinResult>> rejoins;
};

TEST_F(CoordinatorTest, Network_ALinkPortOutOfRangeIsRefused) {
  Make(1, 1);
  for (int port : {-1, 65536}) {
    v1::JoinRequest r = Req("a", 1);
    r.set_link_port(port);
    auto j = Join(r);
    ASSERT_TRUE(j->done());
    EXPECT_TRUE(absl::IsInvalidArgument(j->status())) << j->status();
    EXPECT_THAT(j->status().message(), HasSubstr("link_port"));
  }
}

TEST_F(CoordinatorTest, Network_EveryAnswerCarriesTheClockTimestamps) {
  Make(2, 2);
  auto a = Join(Req("a", 1, 0));
  clock_.Advance(absl::Milliseconds(30));
  auto b = Join(Req("b", 2, 1));
  ASSERT_TRUE(a->done() && b->done());
  const int64_t answered = absl::ToUnixMicros(clock_.Now());
  EXPECT_EQ(a->assignment().answered_unix_micros(), answered);
  EXPECT_EQ(a->assignment().join_received_unix_micros(), answered - 30000);
  EXPECT_EQ(b->assignment().join_received_unix_micros(), answered);
  EXPECT_NE(a->assignment().link_key(), 0u);
  EXPECT_EQ(a->assignment().link_key(), b->assignment().link_key());
}

TEST_F(CoordinatorTest, Network_Exclude_MeasuresBeforeTheCloseAndLeavesOutTheSlowNode) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(4, 5, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c", "d", "e"}) {
    reqs[n] = Measurable(Req(n, inc++));
    first[n] = Join(reqs[n]);
  }
  // The fifth join would close the round: the measurers are told to measure.
  std::map<std::string, v1::NetworkPlan> plans;
  uint64_t key = 0;
  for (auto& [n, j] : first) {
    ASSERT_TRUE(j->done()) << n;
    ASSERT_TRUE(j->result->ok()) << j->status();
    ASSERT_TRUE(j->assignment().has_measure_first()) << n;
    EXPECT_EQ(j->assignment().node_rank(), 0);
    EXPECT_EQ(j->assignment().round(), 0u) << "not an assignment yet";
    EXPECT_GT(j->assignment().answered_unix_micros(), 0);
    const v1::NetworkPlan& plan = j->assignment().measure_first();
    EXPECT_EQ(plan.round(), 1u);
    EXPECT_EQ(plan.targets_size(), 2);
    for (const v1::LinkTarget& t : plan.targets()) {
      EXPECT_NE(t.node_id(), n);
      EXPECT_EQ(t.port(), reqs[t.node_id()].link_port());
      EXPECT_EQ(t.host(), absl::StrCat("10.0.0.", reqs[t.node_id()].member().incarnation()));
    }
    if (key == 0) key = plan.nonce();
    EXPECT_EQ(plan.nonce(), key);
    EXPECT_EQ(j->assignment().link_key(), key);
    plans[n] = plan;
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  // Each joins again with its links; e's are all slow.
  std::map<std::string, std::shared_ptr<JoinResult>> second;
  for (auto& [n, plan] : plans) {
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() = LinksOf(n, plan, {"e"});
    second[n] = Join(again);
  }
  for (auto& [n, j] : second) ASSERT_TRUE(j->done()) << n;
  ASSERT_FALSE(second["e"]->result->ok());
  EXPECT_EQ(ReasonOf(second["e"]->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_THAT(second["e"]->status().message(), HasSubstr("network: 4 of its 4 measured links"));
  for (const char* n : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(second[n]->result->ok()) << second[n]->status();
    EXPECT_FALSE(second[n]->assignment().has_measure_first());
    EXPECT_EQ(second[n]->assignment().nnodes(), 4);
    EXPECT_EQ(second[n]->assignment().link_key(), key);
    EXPECT_FALSE(second[n]->assignment().has_network_plan()) << "measured already";
    EXPECT_EQ(second[n]->assignment().preflight_warnings_size(), 0);
  }
  // A restart of the survivors measures nothing: their links are not due.
  ASSERT_TRUE(Report(reqs["a"], 1, v1::ReportRequest::FAILED, 1).ok());
  std::vector<std::shared_ptr<JoinResult>> back;
  for (const char* n : {"a", "b", "c", "d"}) {
    v1::JoinRequest r = Measurable(Req(n, reqs[n].member().incarnation()), /*due=*/false);
    r.set_last_round(1);
    back.push_back(Join(r));
  }
  for (const auto& j : back) {
    ASSERT_TRUE(j->done());
    ASSERT_TRUE(j->result->ok()) << j->status();
    EXPECT_FALSE(j->assignment().has_measure_first());
    EXPECT_EQ(j->assignment().round(), 2u);
  }
}

// Room for one of two: the node that failed a node check stays out before
// the one the network measurement blamed (whose verdict a loaded peer can
// skew), although node-id order would pick the latter.
TEST_F(CoordinatorTest, Network_Exclude_RoomForOne_TheFailedNodeCheckStaysOutFirst) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(4, 5, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c", "d", "e"}) {
    reqs[n] = Measurable(Req(n, inc++));
    if (std::string(n) == "d") {
      reqs[n].clear_preflight();
      reqs[n] = WithPreflight(reqs[n], false);
    }
    first[n] = Join(reqs[n]);
  }
  std::map<std::string, std::shared_ptr<JoinResult>> second;
  for (auto& [n, j] : first) {
    ASSERT_TRUE(j->done()) << n;
    if (!j->result->ok() || !j->assignment().has_measure_first()) continue;
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() =
        LinksOf(n, j->assignment().measure_first(), {"b"});
    second[n] = Join(again);
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  std::shared_ptr<JoinResult> d = second.count("d") ? second["d"] : first["d"];
  ASSERT_TRUE(d->done());
  ASSERT_FALSE(d->result->ok());
  EXPECT_EQ(ReasonOf(d->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_THAT(d->status().message(), HasSubstr("dns"));
  ASSERT_TRUE(second.count("b"));
  ASSERT_TRUE(second["b"]->result->ok()) << second["b"]->status();
  EXPECT_EQ(second["b"]->assignment().nnodes(), 4);
  EXPECT_THAT(absl::StrJoin(second["a"]->assignment().preflight_warnings(), "|"),
              HasSubstr("node b: network"));
}

TEST_F(CoordinatorTest, Network_Exclude_ANewcomerMeasuresBeforeItMayRestartTheRound) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(3, 4, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c", "d"}) {
    reqs[n] = Measurable(Req(n, inc++));
    first[n] = Join(reqs[n]);
  }
  for (auto& [n, j] : first) {
    ASSERT_TRUE(j->done() && j->result->ok() && j->assignment().has_measure_first()) << n;
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() =
        LinksOf(n, j->assignment().measure_first(), {"d"});
    Join(again);
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  ASSERT_EQ(core_->GetSnapshot().members, 3);
  const int restarts = core_->GetSnapshot().restart_count;
  // d comes back after each quarantine, its network still bad: it is told
  // to measure at once, to two of the running members, and is turned away
  // when its links come back; the running round never restarts for it.
  for (int cycle = 0; cycle < 3; ++cycle) {
    clock_.Advance(absl::Minutes(5));
    auto d = Join(Measurable(Req("d", 10 + cycle)));
    ASSERT_TRUE(d->done()) << "cycle " << cycle;
    ASSERT_TRUE(d->result->ok() && d->assignment().has_measure_first()) << d->status();
    EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning) << "cycle " << cycle;
    const v1::NetworkPlan plan = d->assignment().measure_first();
    EXPECT_EQ(plan.round(), 2u);
    ASSERT_EQ(plan.targets_size(), 2);
    for (const v1::LinkTarget& t : plan.targets()) EXPECT_NE(t.node_id(), "d");
    v1::JoinRequest again = Measurable(Req("d", 10 + cycle));
    *again.mutable_preflight()->mutable_links() = LinksOf("d", plan, {"d"});
    auto d2 = Join(again);
    ASSERT_TRUE(d2->done());
    EXPECT_EQ(ReasonOf(d2->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED) << d2->status();
    EXPECT_THAT(d2->status().message(), HasSubstr("2 of its 2 measured links are bad"));
    EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning) << "cycle " << cycle;
    EXPECT_EQ(core_->GetSnapshot().restart_count, restarts) << "cycle " << cycle;
  }
  // Its network mended, it measures once, and its join scales the job up:
  // the round it opens does not measure it again.
  clock_.Advance(absl::Minutes(5));
  auto d = Join(Measurable(Req("d", 20)));
  ASSERT_TRUE(d->done() && d->result->ok() && d->assignment().has_measure_first());
  v1::JoinRequest again = Measurable(Req("d", 20));
  *again.mutable_preflight()->mutable_links() = LinksOf("d", d->assignment().measure_first(), {});
  auto d2 = Join(again);
  EXPECT_FALSE(d2->done()) << d2->status();
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering) << "the scale-up";
  std::vector<std::shared_ptr<JoinResult>> back;
  for (const char* n : {"a", "b", "c"}) {
    v1::JoinRequest r = Measurable(Req(n, reqs[n].member().incarnation()), /*due=*/false);
    r.set_last_round(1);
    back.push_back(Join(r));
  }
  ASSERT_TRUE(d2->done());
  ASSERT_TRUE(d2->result->ok()) << d2->status();
  EXPECT_FALSE(d2->assignment().has_measure_first()) << "measured twice";
  EXPECT_EQ(d2->assignment().nnodes(), 4);
  for (const auto& j : back) {
    ASSERT_TRUE(j->done() && j->result->ok()) << j->status();
    EXPECT_EQ(j->assignment().nnodes(), 4);
  }
}

// A due node that joins while the others measure is measured too, and the
// round waits for it.
TEST_F(CoordinatorTest, Network_Exclude_ADueJoinerWhileTheOthersMeasureMeasuresToo) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 4, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c"}) {
    reqs[n] = Measurable(Req(n, inc++));
    first[n] = Join(reqs[n]);
  }
  clock_.Advance(absl::Milliseconds(600));  // the last call
  core_->Tick();
  for (auto& [n, j] : first) ASSERT_TRUE(j->done() && j->assignment().has_measure_first()) << n;
  reqs["d"] = Measurable(Req("d", inc++));
  first["d"] = Join(reqs["d"]);
  ASSERT_TRUE(first["d"]->done());
  ASSERT_TRUE(first["d"]->assignment().has_measure_first()) << "d joins the measurement";
  EXPECT_EQ(first["d"]->assignment().measure_first().round(), 1u);
  EXPECT_EQ(first["d"]->assignment().measure_first().targets_size(), 2);
  std::map<std::string, std::shared_ptr<JoinResult>> second;
  for (const char* n : {"a", "b", "c"}) {
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() =
        LinksOf(n, first[n]->assignment().measure_first(), {"d"});
    second[n] = Join(again);
  }
  for (auto& [n, j] : second) EXPECT_FALSE(j->done()) << n << ": the round waits for d";
  v1::JoinRequest again = reqs["d"];
  *again.mutable_preflight()->mutable_links() =
      LinksOf("d", first["d"]->assignment().measure_first(), {"d"});
  second["d"] = Join(again);
  for (auto& [n, j] : second) ASSERT_TRUE(j->done()) << n;
  EXPECT_EQ(ReasonOf(second["d"]->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED)
      << second["d"]->status();
  for (const char* n : {"a", "b", "c"}) {
    ASSERT_TRUE(second[n]->result->ok()) << second[n]->status();
    EXPECT_EQ(second[n]->assignment().nnodes(), 3);
  }
}

// A restart whose survivors measure: their re-joins with the links do not
// re-arm the last call (the round closes once they are back).
TEST_F(CoordinatorTest, Network_AMeasuredRejoinDoesNotRearmTheLastCall) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 4, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c"}) {
    reqs[n] = Measurable(Req(n, inc++), /*due=*/false);
    Join(reqs[n]);
  }
  clock_.Advance(absl::Milliseconds(600));
  core_->Tick();
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  ASSERT_TRUE(Report(reqs["c"], 1, v1::ReportRequest::FAILED, 1).ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  for (const char* n : {"a", "b"}) {  // c's agent died
    v1::JoinRequest r = Measurable(Req(n, reqs[n].member().incarnation()), /*due=*/true);
    r.set_last_round(1);
    reqs[n] = r;
    first[n] = Join(r);
  }
  clock_.Advance(absl::Milliseconds(600));
  core_->Tick();
  std::map<std::string, std::shared_ptr<JoinResult>> second;
  for (auto& [n, j] : first) {
    ASSERT_TRUE(j->done() && j->assignment().has_measure_first()) << n;
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() = LinksOf(n, j->assignment().measure_first(), {});
    second[n] = Join(again);
  }
  for (auto& [n, j] : second) {
    ASSERT_TRUE(j->done()) << n << " waits another last call";
    EXPECT_TRUE(j->result->ok()) << j->status();
  }
}

// A measurer away measuring holds its place: a spare pod cannot take it,
// and a second pod with its node id cannot replace it.
TEST_F(CoordinatorTest, Network_AMeasurerAwayHoldsItsPlace) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 4, /*max_restarts=*/3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c", "d"}) {
    reqs[n] = Measurable(Req(n, inc++));
    first[n] = Join(reqs[n]);
  }
  for (auto& [n, j] : first) ASSERT_TRUE(j->done() && j->assignment().has_measure_first()) << n;
  auto spare = Join(Measurable(Req("e", inc++)));
  ASSERT_TRUE(spare->done());
  EXPECT_TRUE(absl::IsResourceExhausted(spare->status())) << spare->status();
  auto impostor = Join(Measurable(Req("d", 99)));
  ASSERT_TRUE(impostor->done());
  EXPECT_FALSE(impostor->result->ok());
  std::map<std::string, std::shared_ptr<JoinResult>> second;
  for (auto& [n, j] : first) {
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() = LinksOf(n, j->assignment().measure_first(), {});
    second[n] = Join(again);
  }
  for (auto& [n, j] : second) {
    ASSERT_TRUE(j->done()) << n;
    ASSERT_TRUE(j->result->ok()) << n << ": " << j->status();
    EXPECT_EQ(j->assignment().nnodes(), 4);
  }
}

TEST_F(CoordinatorTest, Network_Fail_EndsTheJobNamingTheNode) {
  preflight_ = v1::PREFLIGHT_FAIL;
  Make(3, 3);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first, second;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c"}) {
    reqs[n] = Measurable(Req(n, inc, static_cast<int>(inc - 1)));
    ++inc;
    first[n] = Join(reqs[n]);
  }
  for (auto& [n, j] : first) {
    ASSERT_TRUE(j->done() && j->result->ok() && j->assignment().has_measure_first()) << n;
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() =
        LinksOf(n, j->assignment().measure_first(), {"b"});
    second[n] = Join(again);
  }
  for (auto& [n, j] : second) {
    ASSERT_TRUE(j->done()) << n;
    EXPECT_EQ(ReasonOf(j->status()), v1::ErrorInfo::PREFLIGHT_FAILED) << j->status();
    EXPECT_THAT(j->status().message(), HasSubstr("preflight: node b failed network"));
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
}

TEST_F(CoordinatorTest, Network_AMeasurerThatNeverComesBack_TheRoundClosesAtTheDeadline) {
  preflight_ = v1::PREFLIGHT_EXCLUDE;
  Make(2, 3, /*max_restarts=*/1);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> first;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c"}) {
    reqs[n] = Measurable(Req(n, inc++));
    first[n] = Join(reqs[n]);
  }
  std::vector<std::shared_ptr<JoinResult>> back;
  for (const char* n : {"a", "b"}) {  // c never comes back
    ASSERT_TRUE(first[n]->done() && first[n]->assignment().has_measure_first());
    v1::JoinRequest again = reqs[n];
    *again.mutable_preflight()->mutable_links() =
        LinksOf(n, first[n]->assignment().measure_first(), {});
    back.push_back(Join(again));
  }
  for (const auto& j : back) EXPECT_FALSE(j->done());
  clock_.Advance(NetworkCheckBudget(2, absl::Milliseconds(250)));
  core_->Tick();
  for (const auto& j : back) {
    ASSERT_TRUE(j->done());
    ASSERT_TRUE(j->result->ok()) << j->status();
    EXPECT_EQ(j->assignment().nnodes(), 2);
  }
}

TEST_F(CoordinatorTest, Network_Warn_PlansBesideTheWorkersAndNamesTheSlowNodeToEveryone) {
  Make(4, 4);
  std::map<std::string, v1::JoinRequest> reqs;
  std::map<std::string, std::shared_ptr<JoinResult>> joins;
  uint64_t inc = 1;
  for (const char* n : {"a", "b", "c", "d"}) {
    reqs[n] = Measurable(Req(n, inc, static_cast<int>(inc - 1)));
    ++inc;
    joins[n] = Join(reqs[n]);
  }
  std::map<std::string, std::shared_ptr<RecordingSink>> sinks;
  for (auto& [n, j] : joins) {
    ASSERT_TRUE(j->done() && j->result->ok()) << n;
    EXPECT_EQ(j->assignment().round(), 1u) << "warn never delays the round";
    ASSERT_TRUE(j->assignment().has_network_plan()) << n;
    EXPECT_EQ(j->assignment().network_plan().targets_size(), 2);
    EXPECT_EQ(j->assignment().network_plan().nonce(), j->assignment().link_key());
    sinks[n] = Watch(reqs[n], 1);
  }
  v1::ReportResponse answer;
  for (auto& [n, j] : joins) {
    v1::ReportRequest rep;
    *rep.mutable_member() = reqs[n].member();
    rep.set_job_id("job");
    rep.set_round(1);
    rep.set_state(v1::ReportRequest::RUNNING);
    rep.mutable_preflight()->set_node_id(n);
    *rep.mutable_preflight()->mutable_links() = LinksOf(n, j->assignment().network_plan(), {"c"});
    answer.Clear();
    ASSERT_TRUE(core_->Report(rep, &answer).ok());
  }
  // The last report completed the measurement: c is named, in the answer
  // and down every stream; it runs on.
  ASSERT_EQ(answer.preflight_warnings_size(), 1);
  EXPECT_THAT(answer.preflight_warnings(0), HasSubstr("node c: network: 4 of its 4"));
  for (auto& [n, sink] : sinks) {
    ASSERT_EQ(sink->directives.size(), 1u) << n;
    EXPECT_THAT(sink->directives[0].preflight_warnings().lines(0), HasSubstr("node c: network"));
  }
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_EQ(core_->GetSnapshot().members, 4);
}

TEST_F(CoordinatorTest, Preflight_AReportBeyondItsCaps_IsRefused) {
  Make(1, 1);
  v1::JoinRequest r = WithPreflight(Req("a", 1, 0), true);
  r.mutable_preflight()->mutable_results(0)->set_check("No Spaces Allowed!");
  auto a = Join(r);
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a->status().message(), HasSubstr("preflight"));
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

// --- D3: a pod that died while stopping its workers for a restart round ---

TEST_F(CoordinatorTest, RestartedPod_OldIncarnationDiedWhileStopping_IsReplacedAndFenced) {
  Make(2, 2, /*max_restarts=*/3);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  auto sa = Watch(ra, 1);
  auto sb = Watch(rb, 1);
  ASSERT_TRUE(Report(rb, 1, v1::ReportRequest::FAILED, 3).ok());  // restart round 2 opens.
  ASSERT_TRUE(sa->closed && sb->closed);
  // a's agent dies while stopping its workers: no Join parked, no Watch open.
  // Its pod restarts at once, well within the heartbeat timeout.
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  auto ra2 = Req("a", 11, 0);
  ra2.set_last_round(0);
  auto a2 = Join(ra2);
  EXPECT_FALSE(a2->done()) << a2->status();
  rb.set_last_round(1);
  auto b = Join(rb);
  ASSERT_TRUE(a2->done() && b->done());
  ASSERT_TRUE(a2->status().ok()) << a2->status();
  EXPECT_EQ(a2->assignment().round(), 2u);
  // The old incarnation is fenced.
  absl::Status stale = Report(ra, 1, v1::ReportRequest::RUNNING);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(stale), v1::ErrorInfo::FENCED);
}

TEST_F(CoordinatorTest, RestartedPod_OldIncarnationStillWatching_IsRejectedAsLive) {
  Make(2, 2);
  auto ra = Req("a", 1, 0), rb = Req("b", 2, 1);
  Join(ra);
  Join(rb);
  Watch(ra, 1);
  clock_.Advance(absl::Minutes(5));  // silence alone does not make it dead here.
  auto dup = Join(Req("a", 3, 0));
  ASSERT_TRUE(dup->done());
  EXPECT_EQ(dup->status().code(), absl::StatusCode::kAlreadyExists);
}

// --- D5: replies never echo the job id or another member's incarnation ---

TEST_F(CoordinatorTest, Replies_NeverEchoTheJobIdOrAnotherIncarnation) {
  CoordinatorOptions o;
  o.job_id = "secret-job-4711";
  o.min_nodes = o.max_nodes = 2;
  o.max_restarts = 1;
  o.last_call = absl::Milliseconds(500);
  o.heartbeat_timeout = absl::Seconds(5);
  o.min_nodes_timeout = absl::Seconds(60);
  o.incarnation = 0xC0;
  o.clock = &clock_;
  core_ = std::make_unique<Coordinator>(o);
  auto req = [](const std::string& node, uint64_t inc, int hint, const std::string& job) {
    v1::JoinRequest r = Req(node, inc, hint);
    r.set_job_id(job);
    return r;
  };
  std::vector<std::string> replies;
  auto record = [&](const absl::Status& s) {
    if (!s.ok()) replies.push_back(std::string(s.message()));
  };
  // Wrong job id on every RPC.
  record(Join(req("x", 0x7777777777777777, -1, "guess"))->status());
  v1::WatchRequest w;
  w.mutable_member()->set_node_id("x");
  w.mutable_member()->set_incarnation(5);
  w.set_job_id("guess");
  record(core_->Watch(w, std::make_shared<RecordingSink>()).status());
  v1::ReportRequest rep;
  *rep.mutable_member() = w.member();
  rep.set_job_id("guess");
  record(core_->Report(rep));
  v1::LeaveRequest leave;
  *leave.mutable_member() = w.member();
  leave.set_job_id("guess");
  record(core_->Leave(leave));
  // A live member's node id claimed by another incarnation.
  const uint64_t kLive = 0x1122334455667788;
  auto ra = req("a", kLive, 0, "secret-job-4711");
  Join(ra);
  record(Join(req("a", 0x99, 0, "secret-job-4711"))->status());
  // A fenced incarnation (replaced while dead) asking with the right job id.
  auto rb = req("b", 0x2233445566778899, 1, "secret-job-4711");
  Join(rb);
  auto sb = std::make_shared<RecordingSink>();
  v1::WatchRequest wb;
  *wb.mutable_member() = rb.member();
  wb.set_job_id("secret-job-4711");
  wb.set_round(1);
  absl::StatusOr<uint64_t> idb = core_->Watch(wb, sb);
  ASSERT_TRUE(idb.ok());
  core_->WatchClosed(*idb);  // b lost: restart round.
  auto rb2 = req("b", 0x3344556677889900, 1, "secret-job-4711");
  rb2.set_last_round(1);
  Join(rb2);
  v1::ReportRequest stale;
  *stale.mutable_member() = req("b", 0x2233445566778899, 1, "").member();
  stale.set_job_id("secret-job-4711");
  stale.set_round(1);
  record(core_->Report(stale));
  v1::ReportRequest other;
  *other.mutable_member() = req("a", 0x4455, 0, "").member();
  other.set_job_id("secret-job-4711");
  record(core_->Report(other));
  ASSERT_GE(replies.size(), 7u);
  for (const std::string& m : replies) {
    EXPECT_THAT(m, Not(HasSubstr("secret-job-4711"))) << m;
    for (uint64_t inc : {kLive, uint64_t{0x3344556677889900}, uint64_t{0x2233445566778899}}) {
      EXPECT_THAT(m, Not(HasSubstr(absl::StrFormat("%016x", inc)))) << m;
      EXPECT_THAT(m, Not(HasSubstr(absl::StrFormat("%x", inc)))) << m;
      EXPECT_THAT(m, Not(HasSubstr(absl::StrCat(inc)))) << m;
    }
  }
}

// --- D7: every field bounded and validated ---

TEST_F(CoordinatorTest, Join_OutOfRangeFields_AreRejectedNamingTheField) {
  Make(2, 2);
  struct Case {
    std::function<void(v1::JoinRequest*)> mutate;
    std::string field;
  };
  const std::string big(200 * 1024, 'u');
  std::vector<Case> cases = {
      {[](v1::JoinRequest* r) { r->set_last_round(~uint64_t{0}); }, "last_round"},
      {[](v1::JoinRequest* r) { r->set_restart_count(-1); }, "restart_count"},
      {[](v1::JoinRequest* r) { r->set_restart_count(INT32_MAX); }, "restart_count"},
      {[](v1::JoinRequest* r) { r->set_advertise_addr(std::string("\xc3\xa4\n\0evil", 8)); },
       "advertise_addr"},
      {[](v1::JoinRequest* r) { r->set_advertise_addr("10.0.0.1:29400"); }, "advertise_addr"},
      {[](v1::JoinRequest* r) { r->set_rank_hint(-2); }, "rank_hint"},
      {[&](v1::JoinRequest* r) { r->mutable_topology()->add_gpu_uuids(big); }, "JoinRequest"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->add_gpu_uuids(std::string(200, 'g')); },
       "topology.gpu_uuids"},
      {[](v1::JoinRequest* r) {
         for (int i = 0; i < 65; ++i) r->mutable_topology()->add_gpu_uuids("GPU-1");
       },
       "topology.gpu_uuids"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->add_gpu_uuids("GPU\n1"); },
       "topology.gpu_uuids"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_gpu_count(-1); }, "topology.gpu_count"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_nccl_version(std::string(100, 'v')); },
       "topology.nccl_version"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_boot_id(std::string(65, 'b')); },
       "topology.boot_id"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_boot_id("boot\x1b[31m"); },
       "topology.boot_id"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_ipc_namespace("ipc: [1]"); },
       "topology.ipc_namespace"},
      {[](v1::JoinRequest* r) { r->mutable_topology()->set_numa_nodes(-1); },
       "topology.numa_nodes"},
      {[](v1::JoinRequest* r) { r->mutable_ssh()->set_host_public_key(std::string(9000, 'k')); },
       "ssh.host_public_key"},
      {[](v1::JoinRequest* r) { r->mutable_ssh()->set_host_public_key("ssh-ed25519 A\nB"); },
       "ssh.host_public_key"},
      {[](v1::JoinRequest* r) { r->mutable_ssh()->set_port(70000); }, "ssh.port"},
  };
  for (const Case& c : cases) {
    auto r = Req("a", 1);
    c.mutate(&r);
    auto res = Join(r);
    ASSERT_TRUE(res->done()) << c.field;
    EXPECT_EQ(res->status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(res->status().message(), HasSubstr(c.field));
    EXPECT_LT(res->status().message().size(), 400u) << "a reply never echoes big input";
  }
  EXPECT_EQ(core_->GetSnapshot().gathering, 0);
  // Valid topology and SSH material pass.
  auto ok = Req("a", 1);
  ok.mutable_topology()->set_gpu_count(8);
  for (int i = 0; i < 8; ++i) {
    ok.mutable_topology()->add_gpu_uuids("GPU-8f6c2a4e-1b2c-4d5e-8f90-123456789abc");
  }
  ok.mutable_topology()->set_nccl_version("2.18.3");
  ok.mutable_topology()->set_boot_id("3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  ok.mutable_topology()->set_ipc_namespace("ipc:[4026531839]");
  ok.mutable_topology()->set_numa_nodes(2);
  ok.mutable_ssh()->set_host_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG root@node-0");
  ok.mutable_ssh()->set_port(2222);
  ok.set_advertise_addr("node-0.job.default.svc");
  EXPECT_FALSE(Join(ok)->done());
}

TEST_F(CoordinatorTest, Join_HugeIds_AreRejectedShortly) {
  Make(2, 2);
  auto r = Req(std::string(900 * 1024, 'n'), 1);
  auto res = Join(r);
  EXPECT_EQ(res->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(res->status().message().size(), 200u);
  r = Req("a", 1);
  r.set_job_id(std::string(900 * 1024, 'j'));
  res = Join(r);
  EXPECT_EQ(res->status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_LT(res->status().message().size(), 200u);
}

TEST_F(CoordinatorTest, Report_OutOfRangeFields_AreRejectedNamingTheField) {
  Make(1, 1);
  auto ra = Req("a", 1, 0, 2);
  Join(ra);
  v1::ReportRequest rep;
  *rep.mutable_member() = ra.member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::FAILED);
  rep.set_exit_code(1);
  rep.set_failed_local_rank(2);  // the node has local ranks 0 and 1.
  absl::Status s = core_->Report(rep);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("failed_local_rank"));
  rep.set_failed_local_rank(0);
  rep.set_exit_code(-5);
  s = core_->Report(rep);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exit_code"));
  rep.set_state(static_cast<v1::ReportRequest::State>(42));
  EXPECT_EQ(core_->Report(rep).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
}

TEST_F(CoordinatorTest, RejectedJoins_LogEscapedBoundedAndRateLimited) {
  Make(2, 2);
  ::testing::internal::CaptureStderr();
  auto forged = Req("a\n2026-11-21T10:00:00.000Z I trainlet forged", 1);
  Join(forged);
  for (int i = 0; i < 200; ++i) {
    auto r = Req("a", 1);
    r.set_job_id(std::string(100 * 1024, 'j'));
    Join(r);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(log.size(), 8000u) << "200 rejections with 100 KB ids";
  EXPECT_THAT(log, Not(HasSubstr("\n2026-11-21T10:00:00.000Z I trainlet forged")));
  clock_.Advance(absl::Seconds(11));
  ::testing::internal::CaptureStderr();
  Join(Req("", 1));
  const std::string later = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(later, HasSubstr("similar lines suppressed"));
}

// --- D8: every failure names the node (and the global rank when known) ---

TEST_F(CoordinatorTest, FailureReasons_NameTheLostNodeAndTheGlobalRank) {
  Make(3, 3, /*max_restarts=*/3);
  auto ra = Req("pod-a", 1, 0, 2), rb = Req("pod-b", 2, 1, 2), rc = Req("pod-c", 3, 2, 2);
  for (auto* r : {&ra, &rb, &rc}) Join(*r);
  uint64_t idb = 0;
  auto sa = Watch(ra, 1);
  Watch(rb, 1, &idb);
  Watch(rc, 1);
  LoseStream(idb);  // pod-b's agent disconnects.
  ASSERT_EQ(sa->directives.size(), 1u);
  EXPECT_THAT(sa->directives[0].rejoin().reason(), HasSubstr("node pod-b"));
  EXPECT_THAT(sa->directives[0].rejoin().reason(), HasSubstr("disconnected"));

  // Round 2: a worker of pod-c (node rank 2, global ranks 4-5) fails.
  rb = Req("pod-b", 12, 1, 2);
  for (auto* r : {&ra, &rb, &rc}) {
    r->set_last_round(1);
    Join(*r);
  }
  sa = Watch(ra, 2);
  Watch(rb, 2);
  Watch(rc, 2);
  v1::ReportRequest rep;
  *rep.mutable_member() = rc.member();
  rep.set_job_id("job");
  rep.set_round(2);
  rep.set_state(v1::ReportRequest::FAILED);
  rep.set_exit_code(7);
  rep.set_failed_local_rank(1);
  ASSERT_TRUE(core_->Report(rep).ok());
  ASSERT_EQ(sa->directives.size(), 1u);
  EXPECT_THAT(sa->directives[0].rejoin().reason(),
              HasSubstr("local rank 1 (global rank 5) on node pod-c exited with code 7"));

  // Round 3: pod-a goes silent.
  for (auto* r : {&ra, &rb, &rc}) {
    r->set_last_round(2);
    Join(*r);
  }
  Watch(ra, 3);
  auto sb = Watch(rb, 3);
  Watch(rc, 3);
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(Report(rb, 3, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(rc, 3, v1::ReportRequest::RUNNING).ok());
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  ASSERT_EQ(sb->directives.size(), 1u);
  EXPECT_THAT(sb->directives[0].rejoin().reason(), HasSubstr("node pod-a"));
  EXPECT_THAT(sb->directives[0].rejoin().reason(), HasSubstr("no heartbeat"));
}

// --- Join progress (issue 6) ---

TEST_F(CoordinatorTest, Gathering_LogsProgressAtMostEvery10s_NamingMissingRanks) {
  Make(3, 3);
  Join(Req("a", 1, 0));
  Join(Req("c", 3, 1));
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(9));
  core_->Tick();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "quiet before 10 s";
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("round 1: 2/3 joined; waiting for rank 2\n"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("waiting for rank 2"));
}

TEST_F(CoordinatorTest, Gathering_Progress_WithoutHintsAndElastic) {
  Make(4, 4);
  Join(Req("a", 1));
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(10));
  core_->Tick();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("round 1: 1/4 joined; waiting for 3 more nodes"));
  Make(3, 5);
  Join(Req("a", 1));
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(10));
  core_->Tick();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("round 1: 1 joined (min 3, max 5); waiting for 2 more nodes to reach the "
                        "minimum"));
}

TEST_F(CoordinatorTest, Gathering_AfterRestart_NamesTheSurvivorsNotBack) {
  Make(2, 2, /*max_restarts=*/1);
  auto ra = Req("pod-a", 1, 0), rb = Req("pod-b", 2, 1);
  Join(ra);
  Join(rb);
  Watch(ra, 1);
  Watch(rb, 1);
  ASSERT_TRUE(Report(ra, 1, v1::ReportRequest::FAILED, 1).ok());
  ra.set_last_round(1);
  Join(ra);
  ::testing::internal::CaptureStderr();
  clock_.Advance(absl::Seconds(10));
  core_->Tick();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("round 2: 1/2 joined; waiting for rank 1 (not back yet: node pod-b)"));
}

TEST_F(CoordinatorTest, ParkedJoin_AnsweredBeforeItsDeadline_NamingTheMissingRanks) {
  Make(3, 3);
  const absl::Time deadline = clock_.Now() + absl::Seconds(30);
  auto a = Join(Req("a", 1, 0), "", deadline);
  auto c = Join(Req("c", 3, 2), "", absl::InfiniteFuture());
  clock_.Advance(absl::Seconds(29) + absl::Milliseconds(740));
  core_->Tick();
  EXPECT_FALSE(a->done()) << "260 ms before the deadline";
  clock_.Advance(absl::Milliseconds(20));
  core_->Tick();
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a->status().message(),
              HasSubstr("round 1 did not close before the join's deadline: 2/3 joined; waiting "
                        "for rank 1"));
  EXPECT_FALSE(c->done());
  EXPECT_EQ(core_->GetSnapshot().gathering, 1) << "withdrawn from the round";
  // It may come back (a retried join of the same incarnation).
  auto again = Join(Req("a", 1, 0));
  auto b = Join(Req("b", 2, 1));
  ASSERT_TRUE(again->done() && b->done() && c->done());
  EXPECT_TRUE(again->status().ok());
}

TEST_F(CoordinatorTest, ParkedJoin_ShortDeadline_AnsweredAQuarterOfItsTimeEarly) {
  Make(2, 2);
  auto a = Join(Req("a", 1), "", clock_.Now() + absl::Milliseconds(400));
  clock_.Advance(absl::Milliseconds(290));
  core_->Tick();
  EXPECT_FALSE(a->done());
  clock_.Advance(absl::Milliseconds(10));
  core_->Tick();
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a->status().message(), HasSubstr("waiting for 1 more node"));
}

TEST_F(CoordinatorTest, ParkedJoins_EachAnsweredAtItsOwnDeadline_AfterAnEarlierOneWentAway) {
  // The ticker looks for expired joins only from the earliest deadline on:
  // a join withdrawn before its deadline must not hide the later ones, and
  // one that arrives with an earlier deadline than those parked is seen.
  Make(4, 4);
  const absl::Time t0 = clock_.Now();
  auto a = Join(Req("a", 1, 0), "", t0 + absl::Seconds(10));
  auto b = Join(Req("b", 2, 1), "", t0 + absl::Seconds(60));
  auto c = Join(Req("c", 3, 2), "", t0 + absl::Seconds(30));
  core_->CancelJoin(a->ticket);  // its caller went away
  clock_.Advance(absl::Seconds(20));
  core_->Tick();
  EXPECT_FALSE(b->done());
  EXPECT_FALSE(c->done());
  auto d = Join(Req("d", 4, 3), "", clock_.Now() + absl::Seconds(4));
  ASSERT_FALSE(d->done()) << "the round does not close: a withdrew";
  clock_.Advance(absl::Seconds(4));
  core_->Tick();
  EXPECT_TRUE(d->done()) << "a later join with the earliest deadline";
  EXPECT_FALSE(c->done());
  clock_.Advance(absl::Seconds(6));  // t0 + 30 s: c's
  core_->Tick();
  EXPECT_TRUE(c->done());
  EXPECT_FALSE(b->done());
  clock_.Advance(absl::Seconds(30));
  core_->Tick();
  ASSERT_TRUE(b->done());
  EXPECT_EQ(b->status().code(), absl::StatusCode::kDeadlineExceeded);
}

// ---- MPI jobs: one launcher (COMMAND = mpirun) and workers that host ranks
// through their sshd.

namespace mpi {

class MpiCoordinatorTest : public CoordinatorTest {
 protected:
  // A launcher (0 slots) and two workers joined and watching round 1.
  void StartMpiJob(int max_restarts = 0) {
    Make(3, 3, max_restarts);
    launcher_ = Req("launcher", 1, -1, 0);
    launcher_.set_role(v1::ROLE_MPI_LAUNCHER);
    launcher_.mutable_ssh()->set_client_public_key("ssh-ed25519 AAAAjobkey");
    w0_ = Req("w0", 2, 0, 2);
    w0_.set_role(v1::ROLE_MPI_WORKER);
    w0_.mutable_ssh()->set_host_public_key("ssh-ed25519 AAAAhost0");
    w0_.mutable_ssh()->set_port(2222);
    w1_ = Req("w1", 3, 1, 2);
    w1_.set_role(v1::ROLE_MPI_WORKER);
    for (v1::JoinRequest* r : {&launcher_, &w0_, &w1_}) r->set_want_nodes(true);
    auto jl = Join(launcher_), j0 = Join(w0_), j1 = Join(w1_);
    clock_.Advance(absl::Seconds(1));
    core_->Tick();
    ASSERT_TRUE(jl->done() && jl->status().ok()) << jl->status();
    assignment_ = jl->assignment();
    launcher_sink_ = Watch(launcher_, 1);
    w0_sink_ = Watch(w0_, 1);
    w1_sink_ = Watch(w1_, 1);
  }
  absl::Status Sessions(const v1::JoinRequest& r, int sessions,
                        v1::ReportResponse* response = nullptr) {
    v1::ReportRequest rep;
    *rep.mutable_member() = r.member();
    rep.set_job_id("job");
    rep.set_round(1);
    rep.set_state(v1::ReportRequest::RUNNING);
    rep.set_mpi_sessions(sessions);
    return core_->Report(rep, response);
  }
  v1::JoinRequest launcher_, w0_, w1_;
  v1::Assignment assignment_;
  std::shared_ptr<RecordingSink> launcher_sink_, w0_sink_, w1_sink_;
};

TEST_F(MpiCoordinatorTest, RoundWithoutItsLauncherDoesNotClose) {
  Make(2, 2);
  v1::JoinRequest w0 = Req("w0", 1, 0, 2), w1 = Req("w1", 2, 1, 2);
  w0.set_role(v1::ROLE_MPI_WORKER);
  w1.set_role(v1::ROLE_MPI_WORKER);
  auto j0 = Join(w0), j1 = Join(w1);
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  EXPECT_FALSE(j0->done());
  EXPECT_FALSE(j1->done());
}

TEST_F(MpiCoordinatorTest, LauncherWithoutSlotsJoins_EveryNodeSeesRolesAndKeys) {
  StartMpiJob();
  EXPECT_EQ(assignment_.world_size(), 4);  // the workers' slots only.
  ASSERT_EQ(assignment_.nodes_size(), 3);
  int launchers = 0;
  for (const auto& n : assignment_.nodes()) {
    if (n.role() == v1::ROLE_MPI_LAUNCHER) {
      ++launchers;
      EXPECT_EQ(n.ssh().client_public_key(), "ssh-ed25519 AAAAjobkey");
      EXPECT_EQ(n.local_world_size(), 0);
    }
    if (n.member().node_id() == "w0") {
      EXPECT_EQ(n.ssh().host_public_key(), "ssh-ed25519 AAAAhost0");
    }
  }
  EXPECT_EQ(launchers, 1);
}

// A worker asks for no member list: the launcher's job key comes in its own
// assignment, so an MPI round sends the list once, not once per worker.
TEST_F(MpiCoordinatorTest, WorkersGetTheLauncherKeyWithoutTheMemberList) {
  Make(3, 3);
  v1::JoinRequest l = Req("launcher", 1, -1, 0);
  l.set_role(v1::ROLE_MPI_LAUNCHER);
  l.set_want_nodes(true);
  l.mutable_ssh()->set_client_public_key("ssh-ed25519 AAAAjobkey");
  v1::JoinRequest w0 = Req("w0", 2, 0, 2), w1 = Req("w1", 3, 1, 2);
  w0.set_role(v1::ROLE_MPI_WORKER);
  w1.set_role(v1::ROLE_MPI_WORKER);
  auto jl = Join(l), j0 = Join(w0), j1 = Join(w1);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  for (const auto& j : {j0, j1}) {
    ASSERT_TRUE(j->done() && j->status().ok()) << j->status();
    EXPECT_EQ(j->assignment().mpi_launcher_client_key(), "ssh-ed25519 AAAAjobkey");
    EXPECT_EQ(j->assignment().nodes_size(), 0);
  }
  ASSERT_TRUE(jl->done() && jl->status().ok()) << jl->status();
  EXPECT_EQ(jl->assignment().nodes_size(), 3);
  EXPECT_EQ(jl->assignment().mpi_launcher_client_key(), "");
}

TEST_F(MpiCoordinatorTest, ZeroSlotsOnlyForTheLauncher) {
  Make(2, 2);
  auto plain = Join(Req("a", 1, -1, 0));
  ASSERT_TRUE(plain->done());
  EXPECT_EQ(plain->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plain->status().message(), HasSubstr("local_world_size: expected 1..1024"));
  v1::JoinRequest bad_role = Req("b", 2);
  bad_role.set_role(static_cast<v1::Role>(7));
  auto r = Join(bad_role);
  ASSERT_TRUE(r->done());
  EXPECT_THAT(r->status().message(), HasSubstr("role: expected"));
}

TEST_F(MpiCoordinatorTest, SecondLauncherRefused) {
  Make(3, 3);
  v1::JoinRequest l1 = Req("l1", 1, -1, 0), l2 = Req("l2", 2, -1, 0);
  l1.set_role(v1::ROLE_MPI_LAUNCHER);
  l2.set_role(v1::ROLE_MPI_LAUNCHER);
  auto j1 = Join(l1);
  auto j2 = Join(l2);
  EXPECT_FALSE(j1->done());
  ASSERT_TRUE(j2->done());
  EXPECT_EQ(j2->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(j2->status().message(), HasSubstr("already is the job's launcher"));
}

TEST_F(MpiCoordinatorTest, LauncherSuccessFinishesTheJob_WorkersNeedNotReport) {
  StartMpiJob();
  ASSERT_TRUE(Report(w0_, 1, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(launcher_, 1, v1::ReportRequest::SUCCEEDED).ok());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kSucceeded);
  ASSERT_FALSE(w1_sink_->directives.empty());
  EXPECT_TRUE(w1_sink_->directives.back().has_job_finished());
}

TEST_F(MpiCoordinatorTest, LauncherFailureFailsTheJobNamingCommand) {
  StartMpiJob();
  ASSERT_TRUE(Report(launcher_, 1, v1::ReportRequest::FAILED, 3).ok());
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  EXPECT_THAT(core_->GetSnapshot().verdict, HasSubstr("MPI launcher's COMMAND on node launcher"));
  ASSERT_FALSE(w0_sink_->directives.empty());
  EXPECT_EQ(w0_sink_->directives.back().job_failed().exit_code(), 3);
}

TEST_F(MpiCoordinatorTest, LostWorkerFailsTheJob) {
  StartMpiJob();
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(Report(launcher_, 1, v1::ReportRequest::RUNNING).ok());
  ASSERT_TRUE(Report(w0_, 1, v1::ReportRequest::RUNNING).ok());
  clock_.Advance(absl::Seconds(4));  // w1 silent for 7 s > 5 s + half an interval.
  core_->Tick();
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kFailed);
  ASSERT_FALSE(launcher_sink_->directives.empty());
  EXPECT_EQ(launcher_sink_->directives.back().job_failed().failed_node_id(), "w1");
}

TEST_F(MpiCoordinatorTest, LostWorkerWithRestartsLeft_RejoinsEveryone) {
  StartMpiJob(/*max_restarts=*/1);
  uint64_t id = 0;
  auto s = Watch(w1_, 1, &id);
  core_->WatchClosed(id);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  ASSERT_FALSE(launcher_sink_->directives.empty());
  EXPECT_TRUE(launcher_sink_->directives.back().has_rejoin());
}

TEST_F(MpiCoordinatorTest, LauncherHearsWhichWorkersSawNoSession) {
  StartMpiJob();
  v1::ReportResponse response;
  ASSERT_TRUE(Sessions(launcher_, 0, &response).ok());
  EXPECT_THAT(std::vector<std::string>(response.mpi_unplaced_nodes().begin(),
                                       response.mpi_unplaced_nodes().end()),
              ::testing::ElementsAre("w0", "w1"));
  ASSERT_TRUE(Sessions(w1_, 2).ok());
  ASSERT_TRUE(Sessions(w1_, 0).ok());  // a smaller count later does not undo it.
  response.Clear();
  ASSERT_TRUE(Sessions(launcher_, 0, &response).ok());
  EXPECT_THAT(std::vector<std::string>(response.mpi_unplaced_nodes().begin(),
                                       response.mpi_unplaced_nodes().end()),
              ::testing::ElementsAre("w0"));
  // Only the launcher is told.
  response.Clear();
  ASSERT_TRUE(Sessions(w0_, 0, &response).ok());
  EXPECT_EQ(response.mpi_unplaced_nodes_size(), 0);
}

TEST_F(MpiCoordinatorTest, NegativeSessionCountRefused) {
  StartMpiJob();
  absl::Status s = Sessions(w0_, -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("mpi_sessions"));
}

TEST_F(MpiCoordinatorTest, LauncherFailureReportNamesLocalRankZero) {
  StartMpiJob();
  v1::ReportRequest rep;
  *rep.mutable_member() = launcher_.member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::FAILED);
  rep.set_exit_code(1);
  rep.set_failed_local_rank(1);  // the launcher has one process: COMMAND.
  EXPECT_EQ(core_->Report(rep).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace mpi

// --slow-nodes (docs/slow-nodes.md): the members' SlowSignals, judged.
class SlowNodeTest : public CoordinatorTest {
 protected:
  // `n` nodes n0..n<n-1> (one worker each) running round 1 of a job of
  // min..max nodes, each watching.
  void StartRound(int min, int max, int n, int max_restarts = 0) {
    Make(min, max, max_restarts);
    reqs_.clear();
    sinks_.clear();
    std::vector<std::shared_ptr<JoinResult>> joins;
    for (int i = 0; i < n; ++i) {
      reqs_.push_back(Req(absl::StrCat("n", i), 100 + i, min == max ? i : -1, /*lws=*/1));
      joins.push_back(Join(reqs_.back()));
    }
    if (!joins[0]->done()) {
      clock_.Advance(absl::Seconds(1));  // the last call
      core_->Tick();
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(joins[i]->done() && joins[i]->result->ok()) << i;
      assignments_.push_back(joins[i]->assignment());
      sinks_.push_back(Watch(reqs_[i], 1));
    }
    ReportAll(-1);  // the start-up summaries, never judged
  }
  // One interval (10 s) later every node reports; node `slow` (-1: none)
  // waits for a CPU 40% of it, the others 2% (+ `noise(node)` per mille).
  void Interval(int slow, const std::function<int(int)>& noise = nullptr) {
    clock_.Advance(absl::Seconds(10));
    ReportAll(slow, noise);
    core_->Tick();
  }
  // Every node reports its next summary now (see Interval).
  void ReportAll(int slow, const std::function<int(int)>& noise = nullptr) {
    ++seq_;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const int node = static_cast<int>(i);
      const int waited = node == slow ? 400 : 20 + (noise ? noise(node) : 0);
      const absl::Status s = SlowReport(reqs_[i], round_, seq_, waited);
      // (Once the round re-opened, the reports are refused as stale.)
      if (core_->GetSnapshot().phase == Phase::kRunning) {
        ASSERT_TRUE(s.ok()) << s;
      }
    }
  }
  // The slow_nodes directives down member i's stream.
  std::vector<v1::SlowNodes> SlowLines(size_t i) const {
    std::vector<v1::SlowNodes> out;
    for (const v1::Directive& d : sinks_[i]->directives) {
      if (d.has_slow_nodes()) out.push_back(d.slow_nodes());
    }
    return out;
  }
  std::vector<v1::JoinRequest> reqs_;
  std::vector<v1::Assignment> assignments_;
  std::vector<std::shared_ptr<RecordingSink>> sinks_;
  uint64_t round_ = 1;
  uint64_t seq_ = 0;
};

TEST_F(SlowNodeTest, Warn_NamesTheSlowNodeOnceToEveryone_AndNobodyElse) {
  StartRound(4, 4, 4);
  EXPECT_EQ(assignments_[0].slow_signals_interval_ms(), 10000);  // a third of 30 s
  // The first judgement with every window full: the fourth interval (the
  // first report of each interval judges, before the others' came).
  for (int i = 0; i < 3; ++i) Interval(2);
  EXPECT_TRUE(SlowLines(0).empty());
  EXPECT_TRUE(core_->GetSnapshot().slow_nodes.empty());
  Interval(2);
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<v1::SlowNodes> lines = SlowLines(i);
    ASSERT_EQ(lines.size(), 1u) << i;
    ASSERT_EQ(lines[0].lines_size(), 1);
    EXPECT_THAT(lines[0].lines(0),
                HasSubstr("node n2 is slow (cpu): its workers waited for a CPU 40% of the last "
                          "30s, the job's median 2%; the job runs about 63% slower for it"));
  }
  const Coordinator::Snapshot snap = core_->GetSnapshot();
  ASSERT_EQ(snap.slow_nodes.size(), 1u);
  EXPECT_EQ(snap.slow_nodes[0].node_id, "n2");
  EXPECT_EQ(snap.slow_nodes[0].cause, "cpu");
  EXPECT_EQ(snap.slow_nodes[0].slowdown_percent, 63);
  EXPECT_EQ(snap.phase, Phase::kRunning);
  // Still slow: told once only.
  for (int i = 0; i < 4; ++i) Interval(2);
  EXPECT_EQ(SlowLines(0).size(), 1u);
  EXPECT_EQ(core_->GetSnapshot().slow_nodes.size(), 1u);
}

TEST_F(SlowNodeTest, JudgedOnTheTick_WhenNoReportCameDue) {
  StartRound(4, 4, 4);
  Interval(2);  // the first report judges (nothing yet); the next is due 10 s later
  for (int i = 0; i < 2; ++i) {
    // Every summary comes just before the judgement is due: the ticker judges.
    clock_.Advance(absl::Milliseconds(9500));
    ReportAll(2);
    EXPECT_TRUE(SlowLines(0).empty()) << i;
    clock_.Advance(absl::Milliseconds(500));
    core_->Tick();
  }
  ASSERT_EQ(SlowLines(0).size(), 1u);
  EXPECT_THAT(SlowLines(0)[0].lines(0), HasSubstr("node n2 is slow (cpu)"));
}

TEST_F(SlowNodeTest, Off_NoSamplingAndNoJudgement) {
  slow_nodes_ = v1::SLOW_NODES_OFF;
  StartRound(4, 4, 4);
  EXPECT_EQ(assignments_[0].slow_signals_interval_ms(), 0);
  for (int i = 0; i < 6; ++i) Interval(2);
  EXPECT_TRUE(SlowLines(0).empty());
  EXPECT_TRUE(core_->GetSnapshot().slow_nodes.empty());
}

TEST_F(SlowNodeTest, FewerThanThreeNodes_NamesNobody) {
  StartRound(2, 2, 2);
  for (int i = 0; i < 8; ++i) Interval(1);
  EXPECT_TRUE(SlowLines(0).empty());
  EXPECT_TRUE(core_->GetSnapshot().slow_nodes.empty());
}

TEST_F(SlowNodeTest, NoisyButHealthy_NamesNobody) {
  StartRound(4, 4, 4);
  int turn = 0;
  for (int i = 0; i < 20; ++i) {
    // Every node waits 2..8%, a different one the most each interval, and
    // one spike of 40% on a node that changes every interval.
    Interval(i % 4, [&](int node) { return ((node + turn) % 4) * 20; });
    ++turn;
  }
  EXPECT_TRUE(SlowLines(0).empty());
  EXPECT_TRUE(core_->GetSnapshot().slow_nodes.empty());
}

TEST_F(SlowNodeTest, InvalidSignals_AreRefusedNamingTheField) {
  StartRound(4, 4, 4);
  v1::ReportRequest rep;
  *rep.mutable_member() = reqs_[0].member();
  rep.set_job_id("job");
  rep.set_round(1);
  rep.set_state(v1::ReportRequest::RUNNING);
  rep.mutable_slow()->set_seq(1);
  rep.mutable_slow()->set_interval_ms(10000);
  rep.mutable_slow()->set_cpu_waited_permille(1001);
  const absl::Status s = core_->Report(rep);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("slow.cpu_waited_permille: expected 0..1000, got 1001"));
  rep.mutable_slow()->set_cpu_waited_permille(10);
  rep.mutable_slow()->set_seq(0);
  EXPECT_THAT(core_->Report(rep).message(), HasSubstr("slow.seq"));
}

TEST_F(SlowNodeTest, Exclude_StaticJob_Warns) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(4, 4, 4);
  for (int i = 0; i < 4; ++i) Interval(3);
  EXPECT_EQ(SlowLines(0).size(), 1u);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_TRUE(core_->GetSnapshot().restarts.empty());
}

TEST_F(SlowNodeTest, Exclude_AtMin_Warns) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(3, 4, 3);
  for (int i = 0; i < 4; ++i) Interval(0);
  EXPECT_EQ(SlowLines(1).size(), 1u);
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
}

TEST_F(SlowNodeTest, Exclude_RestartsWithoutIt_AndRefusesItUntilTheQuarantine) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(3, 4, 4, /*max_restarts=*/0);
  for (int i = 0; i < 4; ++i) Interval(1);
  Coordinator::Snapshot snap = core_->GetSnapshot();
  ASSERT_EQ(snap.phase, Phase::kGathering);
  ASSERT_EQ(snap.restarts.size(), 1u);
  EXPECT_THAT(snap.restarts[0].reason,
              HasSubstr("node n1 (rank 1) left out as a slow node (--slow-nodes=exclude, for "
                        "5m): node n1 is slow (cpu)"));
  EXPECT_TRUE(snap.slow_nodes.empty()) << "a new round judges afresh";
  // Everyone, n1 too, is told why.
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_FALSE(sinks_[i]->directives.empty());
    EXPECT_THAT(sinks_[i]->directives.back().rejoin().reason(), HasSubstr("n1 is slow (cpu)"));
  }
  // n1's re-join is refused for the quarantine; the others' close round 2
  // at once (nobody waits for n1), and no restart of --max-restarts was
  // spent (0 of them: the job would have failed).
  auto refused = Join(reqs_[1]);
  ASSERT_TRUE(refused->done());
  EXPECT_EQ(ReasonOf(refused->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED) << refused->status();
  // It asks again a quarter of --min-nodes-timeout (60 s here) later, in
  // case a round needs it; the quarantine is 5m.
  EXPECT_EQ(ErrorInfoOf(refused->status()).retry_after_ms(), 15000);
  EXPECT_THAT(refused->status().message(), HasSubstr("slow node: node n1 is left out"));
  EXPECT_THAT(refused->status().message(), HasSubstr("may join again in 5m"));
  std::vector<std::shared_ptr<JoinResult>> back;
  for (size_t i : {0, 2, 3}) back.push_back(Join(reqs_[i]));
  for (const auto& j : back) {
    ASSERT_TRUE(j->done());
    ASSERT_TRUE(j->result->ok()) << j->status();
    EXPECT_EQ(j->assignment().round(), 2u);
    EXPECT_EQ(j->assignment().nnodes(), 3);
  }
  // A new incarnation of the node is refused too (the node is, not its agent).
  clock_.Advance(absl::Minutes(4));
  auto still = Join(Req("n1", 999, -1, 1));
  ASSERT_TRUE(still->done());
  EXPECT_EQ(ReasonOf(still->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_EQ(ErrorInfoOf(still->status()).retry_after_ms(), 15000);
  EXPECT_THAT(still->status().message(), HasSubstr("may join again in 1m"));
  // After the quarantine it comes back as a scale-up.
  clock_.Advance(absl::Minutes(1));
  auto after = Join(reqs_[1]);
  EXPECT_FALSE(after->done()) << "parked for the scale-up round";
  snap = core_->GetSnapshot();
  ASSERT_EQ(snap.restarts.size(), 2u);
  EXPECT_THAT(snap.restarts[1].reason, HasSubstr("scale-up: node n1 joined"));
}

TEST_F(SlowNodeTest, Exclude_LeftOutAgain_WaitsTwiceAsLong) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(3, 4, 4);
  for (int i = 0; i < 4; ++i) Interval(1);
  ASSERT_EQ(core_->GetSnapshot().restarts.size(), 1u);
  std::vector<std::shared_ptr<JoinResult>> second;
  for (size_t i : {0, 2, 3}) second.push_back(Join(reqs_[i]));
  for (const auto& j : second) ASSERT_TRUE(j->done());  // round 2, without n1
  clock_.Advance(absl::Minutes(5));
  ASSERT_FALSE(Join(reqs_[1])->done());  // the scale-up: round 3 gathers
  std::vector<std::shared_ptr<JoinResult>> back;
  for (size_t i : {0, 2, 3}) back.push_back(Join(reqs_[i]));
  for (const auto& j : back) ASSERT_TRUE(j->done() && j->result->ok());
  ASSERT_EQ(back[0]->assignment().round(), 3u);
  ASSERT_EQ(back[0]->assignment().nnodes(), 4);
  round_ = 3;
  for (size_t i = 0; i < 4; ++i) sinks_[i] = Watch(reqs_[i], 3);
  ReportAll(-1);  // round 3's start-up summaries
  // Still slow: left out again, for twice the quarantine.
  for (int i = 0; i < 4; ++i) Interval(1);
  const Coordinator::Snapshot snap = core_->GetSnapshot();
  ASSERT_EQ(snap.restarts.size(), 3u);
  EXPECT_THAT(snap.restarts[2].reason,
              HasSubstr("node n1 (rank 3) left out as a slow node (--slow-nodes=exclude, for 10m: "
                        "left out 2 times within an hour)"));
  auto refused = Join(reqs_[1]);
  ASSERT_TRUE(refused->done());
  EXPECT_EQ(ReasonOf(refused->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_EQ(ErrorInfoOf(refused->status()).retry_after_ms(), 15000);
  EXPECT_THAT(refused->status().message(), HasSubstr("may join again in 10m"));
}

// With re-joins by datagram: the slow node's READY is refused, so that its
// agent makes a Join call and hears of its quarantine.
TEST_F(ReadyRejoinTest, SlowNodeExcluded_ItsReadyIsRefused) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartTrio();
  for (uint64_t seq = 1; seq <= 5; ++seq) {  // 1: the start-up summaries, not judged
    clock_.Advance(absl::Seconds(10));
    for (size_t i = 0; i < 3; ++i) Alive(i);  // heard over UDP: may re-join by READY
    for (size_t i = 0; i < 3; ++i) {
      if (core_->GetSnapshot().phase != Phase::kRunning) break;  // c was left out
      ASSERT_TRUE(SlowReport(reqs_[i], 1, seq, i == 2 ? 500 : 10).ok());
    }
  }
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);
  bool acked = true;
  Ready(2, 2, &acked);
  EXPECT_FALSE(acked) << "c is quarantined";
  Ready(0, 2, &acked);
  EXPECT_TRUE(acked);
  Ready(1, 2, &acked);
  EXPECT_TRUE(acked);
  // a and b were all it waited for.
  EXPECT_EQ(core_->GetSnapshot().phase, Phase::kRunning);
  EXPECT_EQ(core_->GetSnapshot().members, 2);
  // Its stream ends with the close: its agent makes a Join call.
  EXPECT_TRUE(sinks_[2]->closed);
  auto c = Join(reqs_[2]);
  ASSERT_TRUE(c->done());
  EXPECT_EQ(ReasonOf(c->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
}

// review30: at scale a member heard over UDP sends a Report only every
// HeardReportInterval (n / 500 s), so the coordinator takes at most
// kMaxHeardReportsPerSecond of them (protocol.h). Each agent also sends one
// RUNNING Report per slow-signals interval (agent.cc's ReportDue), all in
// phase (every agent starts sampling when the round's workers start): on
// top of the heartbeats, at 6,000 nodes, 600 more a second. Now the interval
// stretches to the heartbeat Reports' and each one stands for a heartbeat.
TEST_F(SlowNodeTest, Review30_AtScale_SlowSignalReportsStayWithinTheReportCap) {
  constexpr int kNodes = 6000;
  Make(kNodes, kNodes);
  core_->EnableUdpLiveness(29400);
  std::vector<std::shared_ptr<JoinResult>> joins;
  for (int i = 0; i < kNodes; ++i) {
    v1::JoinRequest r = Req(absl::StrCat("n", i), 1000 + i, i, /*lws=*/1);
    r.set_udp_liveness(true);
    joins.push_back(Join(r));
  }
  ASSERT_TRUE(joins[0]->done() && joins[0]->result->ok()) << joins[0]->status();
  const v1::Assignment& a = joins[0]->assignment();
  ASSERT_GT(a.slow_signals_interval_ms(), 0);
  // A slow-signals Report stands for the heartbeat Report (the agent's next
  // one waits a whole interval: RoundMachine.ReportDue_StandsForTheHeartbeat),
  // so an agent reports at the slower of the two intervals.
  EXPECT_GE(a.slow_signals_interval_ms(), a.report_interval_ms());
  const double per_second =
      kNodes * 1000.0 / std::max<int64_t>(a.report_interval_ms(), a.slow_signals_interval_ms());
  EXPECT_LE(per_second, kMaxHeardReportsPerSecond)
      << "report_interval_ms " << a.report_interval_ms() << ", slow_signals_interval_ms "
      << a.slow_signals_interval_ms();
}

// review30: --slow-node-window is accepted up to 1h (config/options.cc),
// and the agents are told to sample a third of it apart: 20 minutes. But an
// agent samples at most 10 minutes apart (agent.cc's kMaxSlowInterval) and
// a summary covers at most kMaxSlowIntervalMs (rendezvous.proto): a window
// over 30m is silently judged over 30m, the evidence says "the last 30m".
TEST_F(SlowNodeTest, Review30_LongestWindow_AskedIntervalIsOneAnAgentSamples) {
  CoordinatorOptions o;
  o.job_id = "job";
  o.min_nodes = o.max_nodes = 1;
  o.clock = &clock_;
  o.heartbeat_timeout = absl::Seconds(5);
  o.last_call = absl::Milliseconds(500);
  o.slow_node_window = absl::Hours(1);  // the flag's largest
  core_ = std::make_unique<Coordinator>(o);
  auto j = Join(Req("n0", 1, 0, 1));
  ASSERT_TRUE(j->done() && j->result->ok()) << j->status();
  EXPECT_LE(j->assignment().slow_signals_interval_ms(), kMaxSlowIntervalMs);
}

// review30: a node left out as slow is still the job's: when a later failure
// leaves fewer than MIN nodes, the job must not fail while that node (slow
// but working) is turned away by its quarantine. (--preflight=exclude lets a
// failed node run when the round needs it for MIN; docs/preflight.md.)
TEST_F(SlowNodeTest, Exclude_QuarantinedNodeNeededForMin_JobDoesNotFail) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(3, 4, 4, /*max_restarts=*/3);
  for (int i = 0; i < 4; ++i) Interval(1);
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);  // n1 left out
  std::vector<std::shared_ptr<JoinResult>> second;
  for (size_t i : {0, 2, 3}) second.push_back(Join(reqs_[i]));
  for (const auto& j : second) ASSERT_TRUE(j->done() && j->result->ok());
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kRunning);  // round 2: n0, n2, n3
  // n3 goes away: round 3 needs MIN = 3, and only n0, n2 and n1 are left.
  v1::LeaveRequest leave;
  *leave.mutable_member() = reqs_[3].member();
  leave.set_job_id("job");
  leave.set_reason("node drained");
  ASSERT_TRUE(core_->Leave(leave).ok());
  auto j0 = Join(reqs_[0]);
  auto j2 = Join(reqs_[2]);
  clock_.Advance(absl::Seconds(30));
  auto j1 = Join(reqs_[1]);  // slow, but the only way to reach MIN
  const Coordinator::Snapshot snap = core_->GetSnapshot();
  ASSERT_EQ(snap.phase, Phase::kRunning) << snap.verdict;
  for (const auto& j : {j0, j1, j2}) {
    ASSERT_TRUE(j->done() && j->result->ok()) << j->status();
    EXPECT_EQ(j->assignment().nnodes(), 3);
  }
}

// While the round can reach MIN without it, the quarantined node is still
// refused, and told to ask again within a quarter of --min-nodes-timeout.
TEST_F(SlowNodeTest, Exclude_QuarantinedNodeNotNeeded_StillRefused) {
  slow_nodes_ = v1::SLOW_NODES_EXCLUDE;
  StartRound(2, 4, 4, /*max_restarts=*/3);
  for (int i = 0; i < 4; ++i) Interval(1);
  ASSERT_EQ(core_->GetSnapshot().phase, Phase::kGathering);  // n1 left out
  auto j1 = Join(reqs_[1]);
  ASSERT_TRUE(j1->done());
  EXPECT_EQ(ReasonOf(j1->status()), v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  EXPECT_EQ(ErrorInfoOf(j1->status()).retry_after_ms(), 15000);
}

}  // namespace
}  // namespace trainlet::rendezvous

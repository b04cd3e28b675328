// The elastic failure suite with real agents over real gRPC: a coordinator
// on 127.0.0.1 and N real agents (the round machine and its executor, each
// on a thread, each with its own GrpcRendezvousClient and a FakeWorkerGroup;
// agent/testing/grpc_job.h), the coordinator and the agents on one
// SimulatedClock, so that heartbeat, last-call and min-nodes timeouts are
// exercised by advancing time, never by sleeping. Waits on real events (a
// directive arriving, a join answered) poll with a deadline.
//
// It lives in agent/ (it was rendezvous/elastic_grpc_test.cc with a test
// copy of the agent's protocol): rendezvous/ must not depend on agent/.
//
// The cases: peer vanishes, peer goes silent, worker fails, late joiner,
// member never shows up, scale-up, coordinator dies and returns, stale
// incarnation, restart budget exhausted. (1,000 agents stay in
// rendezvous/elastic_grpc_test.cc: a coordinator figure, async stubs.)
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/testing/grpc_job.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::agent {
namespace {

using rendezvous::CoordinatorOptions;
using rendezvous::ReasonOf;
using testing::GrpcJob;
using ::testing::HasSubstr;
using testing::JobAgent;
using testing::JobAgentOptions;
using testing::kJobToken;
using testing::WaitFor;

class ElasticAgentsTest : public ::testing::Test {
 protected:
  void StartCoordinator(int min_nodes, int max_nodes, int max_restarts, int port = 0) {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.max_restarts = max_restarts;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Seconds(60);
    o.incarnation = rendezvous::NewIncarnation();
    absl::Status started = job_.StartCoordinator(o, port);
    ASSERT_TRUE(started.ok()) << started;
    min_nodes_ = min_nodes;
    max_nodes_ = max_nodes;
    max_restarts_ = max_restarts;
  }
  // A real agent, started: its Join goes out at once.
  JobAgent* AddAgent(const std::string& node, uint64_t incarnation, int hint,
                     absl::Duration join_timeout = absl::Minutes(10)) {
    JobAgentOptions o;
    o.node = node;
    o.incarnation = incarnation;
    o.rank_hint = hint;
    o.min_nodes = min_nodes_;
    o.max_nodes = max_nodes_;
    o.max_restarts = max_restarts_;
    o.join_timeout = join_timeout;
    return job_.AddAgent(o);
  }
  // Waits until `n` joiners are parked at the coordinator.
  void AwaitGathering(int n) {
    ASSERT_TRUE(job_.AwaitGathering(n))
        << "gathering " << job_.core()->GetSnapshot().gathering << ", want " << n;
  }
  // Waits until `n` members have their directive stream attached.
  void AwaitWatching(int n) {
    ASSERT_TRUE(job_.AwaitWatching(n))
        << "watching " << job_.core()->GetSnapshot().watching << ", want " << n;
  }
  void AdvanceAndTick(absl::Duration d) { job_.AdvanceAndTick(d); }
  // `a` vanishes (kill -9): once the coordinator saw its stream close, the
  // stream-loss grace passes without a re-opened stream.
  void VanishAndAwaitLoss(JobAgent* a) {
    const int watching = job_.core()->GetSnapshot().watching;
    a->Vanish();
    ASSERT_TRUE(WaitFor([&] { return job_.core()->GetSnapshot().watching < watching; }));
    AdvanceAndTick(rendezvous::kStreamLossGrace);
  }
  // The started `agents` make the first round (closed by MAX, or by last
  // call).
  void JoinRound(const std::vector<JobAgent*>& agents, bool last_call) {
    if (last_call) {
      AwaitGathering(static_cast<int>(agents.size()));
      AdvanceAndTick(absl::Milliseconds(500));
    }
    for (JobAgent* a : agents) {
      absl::StatusOr<v1::Assignment> r = a->AwaitJoin();
      ASSERT_TRUE(r.ok()) << a->node() << ": " << r.status();
    }
    AwaitWatching(static_cast<int>(agents.size()));
    // Silence counts from when each answer left the server.
    ASSERT_TRUE(job_.AwaitRoundAnswersSent());
  }
  // Every agent must get a Rejoin for `next_round`, its reason with
  // `reason_part`.
  void ExpectRejoin(const std::vector<JobAgent*>& agents, uint64_t next_round,
                    const std::string& reason_part) {
    for (JobAgent* a : agents) {
      std::optional<v1::Directive> d = a->AwaitDirective();
      ASSERT_TRUE(d.has_value()) << a->node() << " got no directive";
      ASSERT_TRUE(d->has_rejoin()) << a->node() << ": " << d->DebugString();
      EXPECT_EQ(d->rejoin().next_round(), next_round);
      EXPECT_THAT(d->rejoin().reason(), HasSubstr(reason_part));
    }
  }
  // A plain client, for what no live agent says any more (a fenced or
  // stale incarnation's calls).
  std::unique_ptr<rendezvous::CoordinatorClient> Client() {
    return std::make_unique<rendezvous::CoordinatorClient>(
        rendezvous::ClientOptions{job_.target(), kJobToken});
  }
  static v1::JoinRequest JoinOf(const v1::Member& member, uint64_t last_round) {
    v1::JoinRequest r;
    *r.mutable_member() = member;
    r.set_job_id("job");
    r.set_protocol_version(rendezvous::kProtocolVersion);
    r.set_local_world_size(2);
    r.set_master_port(29500);
    r.set_last_round(last_round);
    return r;
  }
  static v1::ReportRequest ReportOf(const v1::Member& member, uint64_t round) {
    v1::ReportRequest r;
    *r.mutable_member() = member;
    r.set_job_id("job");
    r.set_round(round);
    r.set_state(v1::ReportRequest::RUNNING);
    return r;
  }

  GrpcJob job_;
  int min_nodes_ = 1;
  int max_nodes_ = 1;
  int max_restarts_ = 0;
};

TEST_F(ElasticAgentsTest, PeerVanishes_SurvivorsRejoinAtOnceWithStableContiguousRanks) {
  StartCoordinator(2, 4, 3);
  std::vector<JobAgent*> all;
  for (int i = 0; i < 4; ++i) all.push_back(AddAgent(absl::StrCat("n", i), 100 + i, i));
  JoinRound(all, /*last_call=*/false);  // MAX joined: no last call.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(all[i]->assignment().node_rank(), i);

  VanishAndAwaitLoss(all[1]);  // kill -9: its stream breaks.
  std::vector<JobAgent*> survivors = {all[0], all[2], all[3]};
  ExpectRejoin(survivors, 2, "disconnected");
  // Every survivor is back: the round closes without waiting for last call
  // (the simulated clock does not move).
  for (JobAgent* a : survivors) {
    absl::StatusOr<v1::Assignment> r = a->AwaitJoin();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->round(), 2u);
    EXPECT_EQ(r->nnodes(), 3);
    EXPECT_EQ(r->world_size(), 6);
    EXPECT_EQ(r->restart_count(), 1);
  }
  EXPECT_EQ(all[0]->assignment().node_rank(), 0);
  EXPECT_EQ(all[2]->assignment().node_rank(), 1);
  EXPECT_EQ(all[3]->assignment().node_rank(), 2);
  EXPECT_EQ(all[3]->assignment().self().first_global_rank(), 4);
  // And each survivor's workers run the new round.
  for (JobAgent* a : survivors) {
    EXPECT_TRUE(WaitFor([&] {
      return a->status().round == 2 && a->status().state == RoundState::kRunning;
    })) << a->node();
  }
}

TEST_F(ElasticAgentsTest, PeerGoesSilent_LostAtHeartbeatTimeout_ThenFencedWhenItReturns) {
  StartCoordinator(2, 3, 3);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JobAgent* c = AddAgent("c", 3, 2);
  JoinRound({a, b, c}, false);
  EXPECT_EQ(a->assignment().heartbeat_interval_ms(), 470)
      << "timeout / 10 less the tick and the coalescing wait";
  // c is frozen (SIGSTOP): its stream stays open, only heartbeats stop. a
  // and b report every interval (each step: their Reports answered, then
  // the coordinator's tick).
  c->Freeze();
  for (int i = 0; i < 9; ++i) AdvanceAndTick(absl::Milliseconds(500));
  EXPECT_FALSE(a->HasDirective()) << "c silent for 4.5 s of 5 s: not lost yet";
  AdvanceAndTick(absl::Milliseconds(500));
  EXPECT_FALSE(a->HasDirective()) << "lost at 1.05 timeouts - 30 ms (5.22 s), not 5 s";
  AdvanceAndTick(absl::Milliseconds(250));
  ExpectRejoin({a, b}, 2, "no heartbeat");

  // c thaws: its stream was ended, and everything it says is fenced.
  std::optional<absl::Status> end = c->AwaitStreamEnd();
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(ReasonOf(*end), v1::ErrorInfo::FENCED);
  c->Thaw();
  EXPECT_EQ(c->AwaitExit(), kExitUnavailable);
  EXPECT_THAT(c->status().exit_reason, HasSubstr("declared lost by the coordinator"));
  std::unique_ptr<rendezvous::CoordinatorClient> client = Client();
  absl::Status rep = client->Report(ReportOf(c->member(), 1), testing::kJobWait);
  EXPECT_EQ(rep.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(rep), v1::ErrorInfo::FENCED);
  absl::StatusOr<v1::Assignment> cj =
      client->Join(JoinOf(c->member(), 1), absl::Now() + testing::kJobWait);
  EXPECT_EQ(cj.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cj.status().message(), HasSubstr("restart the agent"));

  for (JobAgent* s : {a, b}) ASSERT_TRUE(s->AwaitJoin().ok());
  EXPECT_EQ(a->assignment().nnodes(), 2);
  EXPECT_EQ(b->assignment().node_rank(), 1);
}

TEST_F(ElasticAgentsTest, WorkerFails_EveryNodeRestartsWithTheSameWorldAndCountPlusOne) {
  StartCoordinator(2, 3, 3);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JobAgent* c = AddAgent("c", 3, 2);
  JoinRound({a, b, c}, false);
  b->ExitWorker(0, 3);  // b reports FAILED with its worker's code.
  ExpectRejoin({a, b, c}, 2, "exited with code 3");
  for (JobAgent* s : {a, b, c}) {
    absl::StatusOr<v1::Assignment> r = s->AwaitJoin();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->world_size(), 6);
    EXPECT_EQ(r->restart_count(), 1);
  }
  EXPECT_EQ(b->assignment().node_rank(), 1);
}

TEST_F(ElasticAgentsTest, LateJoiner_WhileGathering_IsInTheRound_AfterClose_ScalesUp) {
  StartCoordinator(2, 4, 3);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  AwaitGathering(2);
  AdvanceAndTick(absl::Milliseconds(300));
  JobAgent* c = AddAgent("c", 3, 2);  // late, but within last call.
  AwaitGathering(3);
  AdvanceAndTick(absl::Milliseconds(200));
  for (JobAgent* s : {a, b, c}) ASSERT_TRUE(s->AwaitJoin().ok());
  EXPECT_EQ(c->assignment().nnodes(), 3);
  AwaitWatching(3);

  // A survivor that re-joins after the restarted round closed without it:
  // c is frozen (it takes its Rejoin only later).
  c->Freeze();
  VanishAndAwaitLoss(b);
  ExpectRejoin({a, c}, 2, "disconnected");
  AwaitGathering(1);                 // a is back...
  AdvanceAndTick(absl::Seconds(1));  // ...alone, below MIN: last call does not close it.
  EXPECT_FALSE(a->JoinDone());
  JobAgent* d = AddAgent("d", 4, 3);  // a replacement pod.
  AwaitGathering(2);
  AdvanceAndTick(absl::Milliseconds(500));
  for (JobAgent* s : {a, d}) ASSERT_TRUE(s->AwaitJoin().ok());
  EXPECT_EQ(a->assignment().round(), 2u);
  AwaitWatching(2);
  c->Thaw();  // it re-joins, too late for round 2: scale-up (2 < MAX 4).
  ExpectRejoin({a, d}, 3, "scale-up: node c joined");
  for (JobAgent* s : {a, c, d}) ASSERT_TRUE(s->AwaitJoin().ok());
  EXPECT_EQ(c->assignment().round(), 3u);
  EXPECT_EQ(c->assignment().nnodes(), 3);
  // Survivors of round 2 keep their relative order; the newcomer goes last.
  EXPECT_EQ(a->assignment().node_rank(), 0);
  EXPECT_EQ(d->assignment().node_rank(), 1);
  EXPECT_EQ(c->assignment().node_rank(), 2);
}

TEST_F(ElasticAgentsTest, MemberNeverShowsUp_FirstRound_JoinTimesOutAndIsWithdrawn) {
  StartCoordinator(2, 2, 0);
  JobAgent* a = AddAgent("a", 1, 0, /*join_timeout=*/absl::Milliseconds(300));  // b never comes.
  absl::StatusOr<v1::Assignment> r = a->AwaitJoin();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr(job_.target()));
  AwaitGathering(0);
  EXPECT_EQ(a->AwaitExit(), kExitUnavailable);
}

TEST_F(ElasticAgentsTest, MemberNeverShowsUp_BelowMinAfterLoss_FailsAtMinNodesTimeout) {
  StartCoordinator(2, 3, 3);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JoinRound({a, b}, true);
  VanishAndAwaitLoss(b);
  ExpectRejoin({a}, 2, "disconnected");
  AwaitGathering(1);
  AdvanceAndTick(absl::Seconds(59));
  EXPECT_FALSE(a->JoinDone()) << "still waiting for a replacement";
  AdvanceAndTick(absl::Seconds(1));
  absl::StatusOr<v1::Assignment> r = a->AwaitJoin();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("only 1 of the 2 nodes needed"));
  EXPECT_THAT(r.status().message(), HasSubstr("--min-nodes-timeout"));
  EXPECT_EQ(ReasonOf(r.status()), v1::ErrorInfo::RESTARTS_EXHAUSTED);
  EXPECT_EQ(job_.core()->GetSnapshot().phase, rendezvous::Phase::kFailed);
  EXPECT_EQ(a->AwaitExit(), kExitRestartsExhausted);
}

TEST_F(ElasticAgentsTest, ScaleUp_NewAgentBelowMax_OpensRoundWithoutSpendingRestarts) {
  StartCoordinator(2, 3, /*max_restarts=*/0);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JoinRound({a, b}, true);
  JobAgent* c = AddAgent("c", 3, -1);
  ExpectRejoin({a, b}, 2, "scale-up");
  for (JobAgent* s : {a, b, c}) ASSERT_TRUE(s->AwaitJoin().ok());
  EXPECT_EQ(c->assignment().nnodes(), 3);
  EXPECT_EQ(c->assignment().node_rank(), 2);
  EXPECT_EQ(c->assignment().restart_count(), 1);
  // At MAX a fourth is refused.
  JobAgent* d = AddAgent("d", 4, -1);
  EXPECT_EQ(d->AwaitJoin().status().code(), absl::StatusCode::kResourceExhausted);
  // Scale-up did not use the (zero) restart budget: a failure now fails the job.
  AwaitWatching(3);
  b->ExitWorker(0, 1);
  std::optional<v1::Directive> verdict = a->AwaitDirective();
  ASSERT_TRUE(verdict && verdict->has_job_failed());
  EXPECT_EQ(a->AwaitExit(), kExitPeerFailed);
  EXPECT_EQ(b->AwaitExit(), 1);
}

TEST_F(ElasticAgentsTest, CoordinatorDiesAndReturns_JobContinuesAboveTheCarriedRound) {
  StartCoordinator(2, 4, 3);
  JobAgent* n0 = AddAgent("n0", 1, 0);
  JobAgent* n1 = AddAgent("n1", 2, 1);
  JobAgent* n2 = AddAgent("n2", 3, 2);
  JoinRound({n0, n1, n2}, true);
  // A failure first, so the job is at round 2, restart 1.
  n2->ExitWorker(0, 1);
  ExpectRejoin({n0, n1, n2}, 2, "exited");
  for (JobAgent* s : {n0, n1, n2}) ASSERT_TRUE(s->AwaitJoin().ok());
  AwaitWatching(3);
  const uint64_t old_incarnation = n1->assignment().coordinator_incarnation();

  // Node 0's pod dies, its agent and the coordinator it hosts.
  n0->Vanish();
  job_.KillCoordinator();
  for (JobAgent* s : {n1, n2}) {
    std::optional<absl::Status> end = s->AwaitStreamEnd();
    ASSERT_TRUE(end.has_value());
    // CANCELLED from a server shut down in-process, UNAVAILABLE when the
    // process dies; the agent treats every end without a directive alike.
    EXPECT_FALSE(end->ok());
  }
  // The survivors re-open their streams and report in vain; once nothing
  // answered for the silence limit (1.05 x 5 s) they re-join, with backoff
  // while nothing listens...
  AdvanceAndTick(absl::Seconds(6));
  absl::SleepFor(absl::Milliseconds(100));  // let them hit a closed port (not for correctness).
  // ...node 0's pod restarts: a new agent incarnation hosts a new coordinator.
  StartCoordinator(2, 4, 3, job_.port());
  JobAgent* n0b = AddAgent("n0", 11, 0);
  AwaitGathering(3);
  // A fresh coordinator knows no survivors: its first round uses last call.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(n0b->JoinDone());
  AdvanceAndTick(absl::Milliseconds(500));
  for (JobAgent* s : {n0b, n1, n2}) {
    absl::StatusOr<v1::Assignment> r = s->AwaitJoin();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->round(), 3u) << "never backwards: above the carried round 2";
    EXPECT_EQ(r->restart_count(), 2);
    EXPECT_EQ(r->nnodes(), 3);
    EXPECT_NE(r->coordinator_incarnation(), old_incarnation);
  }
  EXPECT_EQ(n0b->assignment().node_rank(), 0);
  EXPECT_EQ(n1->assignment().node_rank(), 1);
  EXPECT_EQ(n2->assignment().node_rank(), 2);
}

TEST_F(ElasticAgentsTest, StaleIncarnation_IsFenced_StaleRoundIsAborted) {
  StartCoordinator(2, 3, 3);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JoinRound({a, b}, true);
  // Two live incarnations of one node: the second is refused.
  JobAgent* b_twin = AddAgent("b", 22, 1);
  EXPECT_EQ(b_twin->AwaitJoin().status().code(), absl::StatusCode::kAlreadyExists);

  // b's container restarts: the old incarnation dies, a new one joins.
  VanishAndAwaitLoss(b);
  ExpectRejoin({a}, 2, "disconnected");
  JobAgent* b2 = AddAgent("b", 23, 1);
  // MIN joined and the only survivor (a) is back: closes without last call.
  ASSERT_TRUE(a->AwaitJoin().ok());
  ASSERT_TRUE(b2->AwaitJoin().ok());
  EXPECT_EQ(b2->assignment().round(), 2u);

  // The old incarnation of b, and a report for round 1, are both rejected.
  std::unique_ptr<rendezvous::CoordinatorClient> client = Client();
  absl::Status old = client->Report(ReportOf(b->member(), 1), testing::kJobWait);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(old), v1::ErrorInfo::FENCED);
  EXPECT_EQ(client->Join(JoinOf(b->member(), 1), absl::Now() + testing::kJobWait).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->Report(ReportOf(a->member(), 1), testing::kJobWait).code(),
            absl::StatusCode::kAborted);
}

TEST_F(ElasticAgentsTest, RestartBudgetExhausted_EveryNodeGetsJobFailed) {
  StartCoordinator(2, 3, /*max_restarts=*/1);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  JobAgent* c = AddAgent("c", 3, 2);
  JoinRound({a, b, c}, false);
  b->ExitWorker(0, 3);  // restart 1 of 1.
  ExpectRejoin({a, b, c}, 2, "restart 1 of 1");
  for (JobAgent* s : {a, b, c}) ASSERT_TRUE(s->AwaitJoin().ok());
  AwaitWatching(3);
  c->ExitWorker(0, 4);
  for (JobAgent* s : {a, b, c}) {
    std::optional<v1::Directive> d = s->AwaitDirective();
    ASSERT_TRUE(d && d->has_job_failed()) << s->node();
    EXPECT_TRUE(d->job_failed().restarts_exhausted());
    EXPECT_EQ(d->job_failed().failed_node_id(), "c");
    EXPECT_EQ(d->job_failed().exit_code(), 4);
    EXPECT_THAT(d->job_failed().reason(), HasSubstr("restart budget exhausted"));
  }
  // Every node, the failing one too, exits 79.
  for (JobAgent* s : {a, b, c}) EXPECT_EQ(s->AwaitExit(), kExitRestartsExhausted) << s->node();
  // A late re-join learns the verdict, marked so the agent exits 79.
  std::unique_ptr<rendezvous::CoordinatorClient> client = Client();
  absl::StatusOr<v1::Assignment> late =
      client->Join(JoinOf(a->member(), 2), absl::Now() + testing::kJobWait);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(late.status()), v1::ErrorInfo::RESTARTS_EXHAUSTED);
  EXPECT_THAT(late.status().message(), HasSubstr("restarts exhausted"));
}

}  // namespace
}  // namespace trainlet::agent

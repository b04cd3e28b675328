// The controller core tells one truth per job (issue 26, scope 1 and the
// data of scope 3): lost nodes, verdicts, root causes, waiting, rounds,
// times, the command and the progress series, on a SimulatedClock.
#include <cmath>
#include <memory>
#include <string>

#include "common/clock.h"
#include "controller/controller_core.h"
#include "controller/testing/core_reports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using testing::AddWorker;
using ::testing::HasSubstr;
using testing::MakeReport;
using testing::RecordingSink;
using testing::SetProgress;

class CoreTruthTest : public ::testing::Test {
 protected:
  CoreTruthTest() : core_(std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_)) {}

  // A report of node `index` (node-a, node-b, node-c) of an elastic job
  // 2:3, two workers each, ranks by node rank.
  v1::HealthReport Node(int index, uint64_t round, int node_rank, int nnodes) {
    const std::string id = std::string("node-") + static_cast<char>('a' + index);
    v1::HealthReport r = MakeReport("job", id, 100 + index, ++seq_[index], round);
    r.set_node_rank(node_rank);
    r.set_nnodes(nnodes);
    r.set_world_size(2 * nnodes);
    r.set_min_nodes(2);
    r.set_max_nodes(3);
    r.set_report_interval_ms(1000);
    return r;
  }
  static void Running(v1::HealthReport* r) {
    AddWorker(r, 0, 2 * r->node_rank(), v1::WorkerHealth::RUNNING);
    AddWorker(r, 1, 2 * r->node_rank() + 1, v1::WorkerHealth::RUNNING);
  }
  // The coordinator's view, as node-a (it hosts the coordinator) sends it.
  static v1::CoordinatorView* View(v1::HealthReport* r, uint64_t rounds, int members) {
    v1::CoordinatorView* v = r->mutable_coordinator();
    v->set_rounds(rounds);
    v->set_members(members);
    v->set_min_nodes(2);
    v->set_max_nodes(3);
    v->set_phase(v1::CoordinatorView::RUNNING);
    return v;
  }
  // Round 1: three nodes running, node-c ahead at step 900.
  void StartThreeNodes() {
    for (int i = 0; i < 3; ++i) {
      v1::HealthReport r = Node(i, 1, i, 3);
      Running(&r);
      SetProgress(&r, i == 2 ? 900 : 850);
      if (i == 0) View(&r, 1, 3);
      ASSERT_TRUE(core_->Report(r).ok()) << i;
    }
  }
  // node-a (it hosts the coordinator) is dead: for 20 s the others wait
  // for a coordinator, still reporting.
  void SurvivorsWaitForNode0() {
    for (int t = 0; t < 4; ++t) {
      clock_.Advance(absl::Seconds(5));
      for (int i = 1; i < 3; ++i) {
        v1::HealthReport r = Node(i, 1, i, 3);
        r.set_state(v1::HealthReport::JOINING);
        ASSERT_TRUE(core_->Report(r).ok());
      }
      core_->Sweep();
    }
  }
  v1::GetStatusResponse Status() {
    auto s = core_->GetStatus("job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::GetStatusResponse();
  }

  SimulatedClock clock_;
  RecordingSink sink_;
  std::unique_ptr<ControllerCore> core_;
  uint64_t seq_[3] = {0, 0, 0};
};

TEST_F(CoreTruthTest, LostNode_ListedByTheCoordinator_IsLostAtOnceAndCountsNowhere) {
  StartThreeNodes();
  clock_.Advance(absl::Seconds(2));
  // node-c is killed: the coordinator lists it lost and restarts the two
  // others in round 2 (node-b now rank 1, the rank node-c had is free).
  v1::HealthReport a = Node(0, 1, 0, 3);
  Running(&a);
  View(&a, 1, 3)->add_lost_nodes("node-c");
  a.mutable_coordinator()->set_phase(v1::CoordinatorView::GATHERING);
  ASSERT_TRUE(core_->Report(a).ok());

  v1::GetStatusResponse s = Status();
  ASSERT_EQ(s.nodes_size(), 3);
  EXPECT_EQ(s.nodes(2).report().node_id(), "node-c");  // lost nodes last.
  EXPECT_TRUE(s.nodes(2).lost());
  EXPECT_TRUE(s.nodes(2).stale());  // not up.
  EXPECT_EQ(s.nodes(2).lost_at_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  EXPECT_THAT(s.nodes(2).lost_reason(), HasSubstr("lost"));
  // Its last state is kept ...
  EXPECT_EQ(s.nodes(2).report().progress().step(), 900);
  EXPECT_EQ(s.nodes(2).report().workers_size(), 2);
  // ... but it is in no count, and its step is not the job's.
  EXPECT_EQ(s.summary().nodes(), 3);
  EXPECT_EQ(s.summary().nodes_lost(), 1);
  EXPECT_EQ(s.summary().nodes_fresh(), 2);
  EXPECT_EQ(s.summary().workers(), 4);
  EXPECT_EQ(s.summary().workers_running(), 4);
  EXPECT_EQ(s.summary().progress_step(), 850);
  EXPECT_FALSE(s.nodes(0).lost());
  EXPECT_FALSE(s.nodes(1).lost());
  // The loss ended round 1.
  EXPECT_EQ(s.summary().root_cause().kind(), v1::RootCause::NODE_LOST);
  EXPECT_EQ(s.summary().root_cause().node_id(), "node-c");
  EXPECT_EQ(s.summary().root_cause().round(), 1u);
  EXPECT_EQ(s.summary().failures(), 1);
}

TEST_F(CoreTruthTest, ElasticJob_SurvivorsSucceed_JobSucceedsThoughTheLostNodeNeverSaidGoodbye) {
  StartThreeNodes();
  clock_.Advance(absl::Seconds(2));
  v1::HealthReport a = Node(0, 2, 0, 2);
  Running(&a);
  View(&a, 2, 2)->add_lost_nodes("node-c");
  ASSERT_TRUE(core_->Report(a).ok());
  v1::HealthReport b = Node(1, 2, 1, 2);
  Running(&b);
  ASSERT_TRUE(core_->Report(b).ok());
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::ACTIVE);
  EXPECT_EQ(Status().summary().round(), 2u);

  clock_.Advance(absl::Seconds(10));
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 2, i, 2);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    AddWorker(&r, 0, 2 * i, v1::WorkerHealth::SUCCEEDED);
    AddWorker(&r, 1, 2 * i + 1, v1::WorkerHealth::SUCCEEDED);
    if (i == 0) View(&r, 2, 2)->set_phase(v1::CoordinatorView::SUCCEEDED);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().state(), v1::JobSummary::SUCCEEDED);
  EXPECT_EQ(s.summary().ended_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  EXPECT_EQ(s.summary().nodes_lost(), 1);
  // Sticky: the lost node going silent and the others leaving change nothing.
  clock_.Advance(absl::Hours(2));
  core_->Sweep();
  core_->Sweep();
  s = Status();
  EXPECT_EQ(s.summary().state(), v1::JobSummary::SUCCEEDED);
  EXPECT_EQ(s.summary().nodes(), 3);
  EXPECT_TRUE(s.nodes(2).lost());
}

TEST_F(CoreTruthTest, WithoutCoordinatorView_SilentNodeOfAnOlderRoundIsLost_JobSucceeds) {
  for (int i = 0; i < 3; ++i) {
    v1::HealthReport r = Node(i, 1, i, 3);
    Running(&r);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  // node-c dies; the others go on in round 2 and finish.
  for (int t = 0; t < 20; ++t) {
    clock_.Advance(absl::Seconds(1));
    for (int i = 0; i < 2; ++i) {
      v1::HealthReport r = Node(i, 2, i, 2);
      Running(&r);
      ASSERT_TRUE(core_->Report(r).ok());
    }
    core_->Sweep();
  }
  v1::GetStatusResponse s = Status();
  ASSERT_EQ(s.nodes_size(), 3);
  EXPECT_TRUE(s.nodes(2).lost()) << s.DebugString();
  EXPECT_THAT(s.nodes(2).lost_reason(), HasSubstr("round 2"));
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 2, i, 2);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::SUCCEEDED);
}

// Node 0's pod restarts: its new agent hosts a new coordinator, which opens
// the round after the survivors' (rounds continue above what joiners
// carry). The new incarnation of node 0 was refused for good (its round
// was ahead of the job's, which only node 0's own view moves), so the job
// stayed in round 1 with node 0 as it was before it died.
TEST_F(CoreTruthTest, CoordinatorRestarts_TheNewNode0IsTakenAndTheJobFollowsIt) {
  StartThreeNodes();
  SurvivorsWaitForNode0();
  // Its restarted agent: a new incarnation, a new coordinator in round 2.
  v1::HealthReport a = MakeReport("job", "node-a", 0xa2a2a2a2'00000001, 1, 2);
  a.set_nnodes(3);
  a.set_world_size(6);
  Running(&a);
  View(&a, 2, 3);
  absl::Status st = core_->Report(a);
  ASSERT_TRUE(st.ok()) << st;
  for (int i = 1; i < 3; ++i) {
    v1::HealthReport r = Node(i, 2, i, 3);
    Running(&r);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().round(), 2u);
  EXPECT_EQ(s.summary().nodes_fresh(), 3);
  EXPECT_EQ(s.summary().workers_running(), 6);
  EXPECT_EQ(s.nodes(0).report().incarnation(), 0xa2a2a2a2'00000000u);
  EXPECT_EQ(s.rounds_size(), 2);
  // The old incarnation is fenced.
  v1::HealthReport old = Node(0, 1, 0, 3);
  EXPECT_EQ(core_->Report(old).code(), absl::StatusCode::kFailedPrecondition);
  // They finish: succeeded, no node lost.
  clock_.Advance(absl::Seconds(5));
  for (int i = 0; i < 3; ++i) {
    v1::HealthReport r = i == 0 ? a : Node(i, 2, i, 3);
    if (i == 0) {
      r.set_sequence(2);
      r.clear_workers();
      r.mutable_coordinator()->set_phase(v1::CoordinatorView::SUCCEEDED);
    }
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    ASSERT_TRUE(core_->Report(r).ok()) << i;
  }
  s = Status();
  EXPECT_EQ(s.summary().state(), v1::JobSummary::SUCCEEDED);
  EXPECT_EQ(s.summary().nodes_lost(), 0);
}

// Node 0 dies for good (no pod comes back): the survivors cannot join a
// coordinator and give up. The job fails, node 0 lost (its view, the last
// it sent, said running), and the loss is its root cause.
TEST_F(CoreTruthTest, Node0LostForGood_JobFailsWithItsLossAsTheCause) {
  StartThreeNodes();
  SurvivorsWaitForNode0();
  for (int i = 1; i < 3; ++i) {
    v1::HealthReport r = Node(i, 1, i, 3);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(69);
    r.set_last_failure("the coordinator at node-a:29400 is unreachable");
    ASSERT_TRUE(core_->Report(r).ok());
  }
  core_->Sweep();
  v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().state(), v1::JobSummary::FAILED);
  EXPECT_EQ(s.summary().nodes_lost(), 1);
  EXPECT_TRUE(s.nodes(2).lost());
  EXPECT_EQ(s.nodes(2).report().node_id(), "node-a");
  EXPECT_EQ(s.summary().root_cause().kind(), v1::RootCause::NODE_LOST);
  EXPECT_EQ(s.summary().root_cause().node_id(), "node-a");
}

// A job faster than its reports (1 a second): the agents' first reports
// say joining, their next say done in round 2. Their FINISHED events were
// dropped as "ahead of the job's round" (the view that opened round 2 came
// with one of those reports, after its events were checked), so the
// history had no FINISHED entry (e2e_controller failed one run in three).
TEST_F(CoreTruthTest, JobFasterThanItsReports_FinishedEventsAreKept) {
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 0, -1, 0);
    if (i == 0) View(&r, 0, 0)->set_phase(v1::CoordinatorView::GATHERING);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  clock_.Advance(absl::Milliseconds(100));
  for (int i : {1, 0}) {
    v1::HealthReport r = Node(i, 2, i, 2);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    r.set_restart_count(1);
    testing::AddEvent(&r, v1::ReportEvent::RESTART, 1, 2, "rank 1 exited with code 3");
    testing::AddEvent(&r, v1::ReportEvent::FINISHED, 2, 2, "exit code 0");
    if (i == 0) View(&r, 2, 2)->set_phase(v1::CoordinatorView::SUCCEEDED);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().state(), v1::JobSummary::SUCCEEDED);
  int finished = 0;
  for (const v1::HistoryEntry& e : s.history()) {
    if (e.kind() == v1::HistoryEntry::FINISHED) {
      ++finished;
      EXPECT_EQ(e.round(), 2u);
    }
  }
  EXPECT_EQ(finished, 2) << s.DebugString();
  EXPECT_EQ(s.summary().restarts(), 1);
  ASSERT_EQ(s.rounds_size(), 1);
  EXPECT_EQ(s.rounds(0).restart_cause(), "rank 1 exited with code 3");
}

TEST_F(CoreTruthTest, WithoutCoordinatorView_NodeSilentWhileTheOthersFinish_IsLost) {
  for (int i = 0; i < 3; ++i) {
    v1::HealthReport r = Node(i, 1, i, 3);
    Running(&r);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  clock_.Advance(absl::Seconds(5));
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 1, i, 3);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::ACTIVE);
  clock_.Advance(absl::Seconds(15));
  core_->Sweep();
  v1::GetStatusResponse s = Status();
  EXPECT_TRUE(s.nodes(2).lost());
  EXPECT_EQ(s.summary().state(), v1::JobSummary::SUCCEEDED);
}

TEST_F(CoreTruthTest, RootCause_IsTheFailedWorker_NotTheOnesTheAgentsStopped) {
  StartThreeNodes();
  clock_.Advance(absl::Seconds(10));
  const absl::Time failed_at = clock_.Now() - absl::Milliseconds(300);
  // node-a's workers were stopped (exit 143) after node-b's rank 2 exited 3;
  // node-a's report comes first.
  v1::HealthReport a = Node(0, 1, 0, 3);
  a.set_state(v1::HealthReport::STOPPING);
  AddWorker(&a, 0, 0, v1::WorkerHealth::STOPPED, 143)
      ->set_exited_unix_ms(absl::ToUnixMillis(clock_.Now()));
  AddWorker(&a, 1, 1, v1::WorkerHealth::STOPPED, 143)
      ->set_exited_unix_ms(absl::ToUnixMillis(clock_.Now()));
  View(&a, 1, 3);
  ASSERT_TRUE(core_->Report(a).ok());
  EXPECT_FALSE(Status().summary().has_root_cause());
  v1::HealthReport b = Node(1, 1, 1, 3);
  b.set_state(v1::HealthReport::STOPPING);
  AddWorker(&b, 0, 2, v1::WorkerHealth::FAILED, 3)
      ->set_exited_unix_ms(absl::ToUnixMillis(failed_at));
  AddWorker(&b, 1, 3, v1::WorkerHealth::STOPPED, 143);
  ASSERT_TRUE(core_->Report(b).ok());
  // An older agent that reports its stopped workers as failed, later: the
  // earliest failure stays the cause.
  v1::HealthReport c = Node(2, 1, 2, 3);
  c.set_state(v1::HealthReport::STOPPING);
  AddWorker(&c, 0, 4, v1::WorkerHealth::FAILED, 143)
      ->set_exited_unix_ms(absl::ToUnixMillis(clock_.Now()));
  ASSERT_TRUE(core_->Report(c).ok());

  const v1::RootCause cause = Status().summary().root_cause();
  EXPECT_EQ(cause.kind(), v1::RootCause::WORKER_FAILED);
  EXPECT_EQ(cause.node_id(), "node-b");
  EXPECT_EQ(cause.rank(), 2);
  EXPECT_EQ(cause.local_rank(), 0);
  EXPECT_EQ(cause.exit_code(), 3);
  EXPECT_EQ(cause.at_unix_ms(), absl::ToUnixMillis(failed_at));
  EXPECT_EQ(cause.round(), 1u);
  EXPECT_EQ(cause.text(), "rank 2 on node-b exited with code 3");
}

TEST_F(CoreTruthTest, FailedJob_HasItsRootCauseEndTimeAndFailure) {
  StartThreeNodes();
  clock_.Advance(absl::Minutes(4));
  for (int i = 0; i < 3; ++i) {
    v1::HealthReport r = Node(i, 1, i, 3);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(i == 1 ? 3 : 75);
    if (i == 1) AddWorker(&r, 0, 2, v1::WorkerHealth::FAILED, 3);
    if (i == 0) View(&r, 1, 3)->set_phase(v1::CoordinatorView::FAILED);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  v1::JobSummary s = Status().summary();
  EXPECT_EQ(s.state(), v1::JobSummary::FAILED);
  EXPECT_EQ(s.root_cause().kind(), v1::RootCause::WORKER_FAILED);
  EXPECT_EQ(s.root_cause().node_id(), "node-b");
  EXPECT_EQ(s.failures(), 1);
  EXPECT_EQ(s.started_unix_ms() + absl::ToInt64Milliseconds(absl::Minutes(4)), s.ended_unix_ms());
  v1::GetStatusResponse st = Status();
  ASSERT_EQ(st.rounds_size(), 1);
  EXPECT_EQ(st.rounds(0).ended_unix_ms(), s.ended_unix_ms());
  EXPECT_EQ(st.rounds(0).ended_by().node_id(), "node-b");
}

TEST_F(CoreTruthTest, AgentFailureWithoutWorkerFailure_IsTheCause) {
  v1::HealthReport r = Node(0, 1, 0, 1);
  ASSERT_TRUE(core_->Report(r).ok());
  r = Node(0, 1, 0, 1);
  r.set_state(v1::HealthReport::DONE);
  r.set_exit_code(70);
  r.set_last_failure("the coordinator went silent");
  ASSERT_TRUE(core_->Report(r).ok());
  v1::JobSummary s = Status().summary();
  EXPECT_EQ(s.state(), v1::JobSummary::FAILED);
  EXPECT_EQ(s.root_cause().kind(), v1::RootCause::AGENT_FAILED);
  EXPECT_EQ(s.root_cause().exit_code(), 70);
  EXPECT_THAT(s.root_cause().text(), HasSubstr("the coordinator went silent"));
}

TEST_F(CoreTruthTest, Waiting_FromTheCoordinatorsView) {
  StartThreeNodes();
  clock_.Advance(absl::Seconds(3));
  v1::HealthReport a = Node(0, 1, 0, 3);
  a.set_state(v1::HealthReport::JOINING);
  v1::CoordinatorView* v = View(&a, 1, 3);
  v->add_lost_nodes("node-c");
  v->add_lost_nodes("node-b");
  v->set_phase(v1::CoordinatorView::GATHERING);
  v->set_gathering(1);
  const int64_t gives_up = absl::ToUnixMillis(clock_.Now() + absl::Seconds(290));
  v->set_gives_up_unix_ms(gives_up);
  ASSERT_TRUE(core_->Report(a).ok());
  v1::JobSummary s = Status().summary();
  ASSERT_TRUE(s.has_waiting());
  EXPECT_EQ(s.waiting().nodes(), 1);
  EXPECT_EQ(s.waiting().min_nodes(), 2);
  EXPECT_EQ(s.waiting().max_nodes(), 3);
  EXPECT_EQ(s.waiting().gives_up_unix_ms(), gives_up);
  EXPECT_EQ(s.waiting().round(), 2u);
}

TEST_F(CoreTruthTest, Waiting_FromJoiningAgentsWithoutAView) {
  v1::HealthReport r = Node(0, 0, -1, 0);
  r.set_join_deadline_unix_ms(absl::ToUnixMillis(clock_.Now() + absl::Minutes(10)));
  ASSERT_TRUE(core_->Report(r).ok());
  v1::JobSummary s = Status().summary();
  ASSERT_TRUE(s.has_waiting());
  EXPECT_EQ(s.waiting().nodes(), 1);
  EXPECT_EQ(s.waiting().min_nodes(), 2);
  EXPECT_EQ(s.waiting().gives_up_unix_ms(), r.join_deadline_unix_ms());
  // Running: no longer waiting.
  r = Node(0, 1, 0, 2);
  Running(&r);
  ASSERT_TRUE(core_->Report(r).ok());
  EXPECT_FALSE(Status().summary().has_waiting());
}

// A quick job: its agents report round 2's restart and finish before the
// job has heard of round 1 (the coordinator's last view said round 0). The
// events are the agents' own round's: they are recorded, not dropped as
// "ahead of the job's" (e2e_controller lost its FINISHED rows so).
TEST_F(CoreTruthTest, QuickJob_EventsOfTheReportsOwnRound_AreRecordedBeforeTheViewCatchesUp) {
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 0, -1, 2);
    if (i == 0) View(&r, 0, 0)->set_phase(v1::CoordinatorView::GATHERING);
    ASSERT_TRUE(core_->Report(r).ok()) << i;
  }
  clock_.Advance(absl::Seconds(1));
  for (int i : {1, 0}) {  // node-b first: the view still says round 0.
    v1::HealthReport r = Node(i, 2, i, 2);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    AddWorker(&r, 0, 2 * i, v1::WorkerHealth::SUCCEEDED);
    testing::AddEvent(&r, v1::ReportEvent::RESTART, 1, 2, "rank 1 exited with code 3");
    testing::AddEvent(&r, v1::ReportEvent::FINISHED, 2, 2, "exit code 0");
    if (i == 0) View(&r, 2, 2);
    ASSERT_TRUE(core_->Report(r).ok()) << i;
  }
  int finished = 0, restarts = 0;
  for (const HistoryRecord& h : sink_.records) {
    finished += h.entry.kind() == v1::HistoryEntry::FINISHED;
    restarts += h.entry.kind() == v1::HistoryEntry::RESTART;
  }
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::SUCCEEDED);
}

TEST_F(CoreTruthTest, Rounds_AreATimelineWithRestartCauses) {
  StartThreeNodes();
  const int64_t t1 = absl::ToUnixMillis(clock_.Now());
  clock_.Advance(absl::Seconds(60));
  v1::HealthReport b = Node(1, 1, 1, 3);
  b.set_state(v1::HealthReport::STOPPING);
  AddWorker(&b, 0, 2, v1::WorkerHealth::FAILED, 3);
  ASSERT_TRUE(core_->Report(b).ok());
  clock_.Advance(absl::Seconds(1));
  const int64_t t2 = absl::ToUnixMillis(clock_.Now());
  v1::HealthReport a = Node(0, 2, 0, 3);
  Running(&a);
  View(&a, 2, 3);
  v1::RestartReason* rr = a.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("worker rank 2 on node-b exited with code 3 (restart 1 of 3)");
  ASSERT_TRUE(core_->Report(a).ok());

  v1::GetStatusResponse s = Status();
  ASSERT_EQ(s.rounds_size(), 2);
  EXPECT_EQ(s.rounds(0).round(), 1u);
  EXPECT_EQ(s.rounds(0).started_unix_ms(), t1);
  EXPECT_EQ(s.rounds(0).ended_unix_ms(), t2);
  EXPECT_EQ(s.rounds(0).nodes(), 3);
  EXPECT_EQ(s.rounds(0).ended_by().kind(), v1::RootCause::WORKER_FAILED);
  EXPECT_EQ(s.rounds(1).round(), 2u);
  EXPECT_EQ(s.rounds(1).started_unix_ms(), t2);
  EXPECT_EQ(s.rounds(1).ended_unix_ms(), 0);
  EXPECT_THAT(s.rounds(1).restart_cause(), HasSubstr("restart 1 of 3"));
  EXPECT_EQ(s.summary().restarts(), 1);
  EXPECT_EQ(s.summary().failures(), 1);
}

TEST_F(CoreTruthTest, ScaleUp_IsARestartButNotAFailure) {
  v1::HealthReport a = Node(0, 1, 0, 2);
  View(&a, 1, 2);
  ASSERT_TRUE(core_->Report(a).ok());
  clock_.Advance(absl::Seconds(5));
  a = Node(0, 2, 0, 3);
  View(&a, 2, 3);
  v1::RestartReason* rr = a.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("scale-up: node node-c joined");
  ASSERT_TRUE(core_->Report(a).ok());
  v1::JobSummary s = Status().summary();
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_EQ(s.failures(), 0);
}

TEST_F(CoreTruthTest, CommandStartAndCounts_AreTheJobs) {
  v1::HealthReport r = Node(0, 1, 0, 1);
  r.set_command("python train.py --epochs=3");
  Running(&r);
  const int64_t started = absl::ToUnixMillis(clock_.Now());
  ASSERT_TRUE(core_->Report(r).ok());
  clock_.Advance(absl::Seconds(5));
  r = Node(0, 1, 0, 1);  // later reports carry no command.
  Running(&r);
  ASSERT_TRUE(core_->Report(r).ok());
  v1::JobSummary s = Status().summary();
  EXPECT_EQ(s.command(), "python train.py --epochs=3");
  EXPECT_EQ(s.started_unix_ms(), started);
  EXPECT_EQ(s.ended_unix_ms(), 0);
  EXPECT_EQ(s.nnodes(), 1);
  EXPECT_EQ(s.world_size(), 2);
  EXPECT_EQ(s.min_nodes(), 2);
  EXPECT_EQ(s.max_nodes(), 3);
  // The node's stored report does not repeat it.
  EXPECT_TRUE(Status().nodes(0).report().command().empty());
}

TEST_F(CoreTruthTest, Series_StepRateAndLossOverTime) {
  for (int t = 0; t <= 6; ++t) {
    v1::HealthReport r = Node(0, 1, 0, 1);
    SetProgress(&r, 100 * t, t == 3 ? "nan" : std::to_string(2.0 - 0.25 * t));
    ASSERT_TRUE(core_->Report(r).ok());
    clock_.Advance(absl::Seconds(2));  // reports every 2 s, points every 5 s.
  }
  v1::ProgressSeries series = Status().series();
  ASSERT_EQ(series.keys_size(), 1);
  EXPECT_EQ(series.keys(0), "loss");
  EXPECT_EQ(series.every_ms(), 5000);
  ASSERT_EQ(series.points_size(), 3);  // at 0 s, 6 s, 12 s.
  EXPECT_EQ(series.points(0).step(), 0);
  EXPECT_EQ(series.points(0).steps_per_second(), -1);
  EXPECT_DOUBLE_EQ(series.points(0).values(0), 2.0);
  EXPECT_EQ(series.points(1).step(), 300);
  EXPECT_DOUBLE_EQ(series.points(1).steps_per_second(), 50.0);
  EXPECT_TRUE(std::isnan(series.points(1).values(0)));  // "nan" is no number.
  EXPECT_EQ(series.points(2).step(), 600);
  EXPECT_DOUBLE_EQ(series.points(2).values(0), 0.5);
}

TEST_F(CoreTruthTest, Series_IsBoundedAndSpansTheWholeRun) {
  for (int t = 0; t < 3 * kSeriesPoints; ++t) {
    v1::HealthReport r = Node(0, 1, 0, 1);
    SetProgress(&r, t, "1.0");
    ASSERT_TRUE(core_->Report(r).ok());
    clock_.Advance(kSeriesEvery);
  }
  v1::ProgressSeries series = Status().series();
  EXPECT_LE(series.points_size(), kSeriesPoints);
  EXPECT_GE(series.points_size(), kSeriesPoints / 2);
  EXPECT_EQ(series.points(0).step(), 0);  // the start is still there.
  EXPECT_EQ(series.every_ms(), 4 * absl::ToInt64Milliseconds(kSeriesEvery));
}

TEST_F(CoreTruthTest, FinishedJob_NewIncarnationsStartingOver_AreANewRun) {
  v1::HealthReport r = Node(0, 1, 0, 1);
  ASSERT_TRUE(core_->Report(r).ok());
  r = Node(0, 1, 0, 1);
  r.set_state(v1::HealthReport::DONE);
  r.set_exit_code(0);
  ASSERT_TRUE(core_->Report(r).ok());
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::SUCCEEDED);
  clock_.Advance(absl::Minutes(10));
  // Joining, it could still be a restarted agent of this run: refused.
  EXPECT_EQ(core_->Report(MakeReport("job", "node-a", 0x555'00000000, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Status().summary().state(), v1::JobSummary::SUCCEEDED);
  // Running round 1: only a new coordinator opens it.
  v1::HealthReport again = MakeReport("job", "node-a", 0x555'00000000, 2, 1);
  ASSERT_TRUE(core_->Report(again).ok());
  v1::JobSummary s = Status().summary();
  EXPECT_EQ(s.state(), v1::JobSummary::ACTIVE);
  EXPECT_EQ(s.ended_unix_ms(), 0);
  EXPECT_EQ(s.started_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  EXPECT_EQ(Status().nodes(0).report().incarnation(), 0x555'00000000u);
}

TEST_F(CoreTruthTest, RestoredJob_AnAgentRestartedMeanwhile_IsNoNewRun) {
  StartThreeNodes();
  core_->Flush();
  RecordingSink sink2;
  ControllerCore restarted({}, &clock_, &sink2);
  restarted.Restore(sink_.Stored());
  clock_.Advance(absl::Minutes(1));
  // node-c's agent restarted while the controller was down: it joins ...
  EXPECT_EQ(restarted.Report(MakeReport("job", "node-c", 777, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  // ... round 2, which node-a (the coordinator's host) reports first.
  v1::HealthReport a = Node(0, 2, 0, 3);
  View(&a, 2, 3);
  ASSERT_TRUE(restarted.Report(a).ok());
  v1::HealthReport c = MakeReport("job", "node-c", 777, 2, 2);
  ASSERT_TRUE(restarted.Report(c).ok());
  auto s = restarted.GetStatus("job");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->summary().round(), 2u);
  EXPECT_EQ(s->summary().nodes(), 3);
  EXPECT_EQ(s->rounds_size(), 2);  // the restored round 1 is still there.
  EXPECT_EQ(s->summary().started_unix_ms(), sink_.jobs.at("job").summary().started_unix_ms());
}

}  // namespace
}  // namespace trainlet::controller

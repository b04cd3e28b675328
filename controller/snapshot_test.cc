#include "controller/snapshot.h"

#include <string>

#include "common/clock.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;

v1::HealthReport Report(const std::string& node, uint64_t seq, uint64_t round, int64_t sent_ms) {
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id(node);
  r.set_incarnation(node == "pod-0" ? 0xa1 : 0xb2);
  r.set_sequence(seq);
  r.set_round(round);
  r.set_node_rank(node == "pod-0" ? 0 : 1);
  r.set_nnodes(2);
  r.set_world_size(4);
  r.set_state(v1::HealthReport::RUNNING);
  r.set_report_interval_ms(5000);
  r.set_exit_code(-1);
  r.set_sent_unix_ms(sent_ms);
  return r;
}

// Every job with all its nodes, as the HTTP views would show them page by
// page (CoreViewSource).
ControllerSnapshot SnapshotOf(const ControllerCore& core, StepRateTracker* rates, Clock* clock,
                              absl::Time started, const std::string& version) {
  CoreViewSource source(&core, rates, clock, started, version);
  ControllerSnapshot s = source.Summary();
  for (JobView& job : s.jobs) {
    absl::StatusOr<JobView> full = source.Job(job.job_id, 0, SIZE_MAX);
    if (full.ok()) job = *std::move(full);
  }
  return s;
}

class SnapshotTest : public ::testing::Test {
 protected:
  SnapshotTest() : core_(ControllerOptions{}, &clock_, nullptr) {}
  int64_t NowMs() { return absl::ToUnixMillis(clock_.Now()); }
  SimulatedClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  ControllerCore core_;
  StepRateTracker rates_;
};

TEST_F(SnapshotTest, NodesWorkersProgressGpusRestartsAndHangsReachTheViews) {
  const absl::Time started = clock_.Now();
  v1::HealthReport a = Report("pod-0", 1, 1, NowMs());
  v1::WorkerHealth* w = a.add_workers();
  w->set_local_rank(1);
  w->set_rank(1);
  w->set_pid(4242);
  w->set_state(v1::WorkerHealth::RUNNING);
  a.mutable_progress()->set_known(true);
  a.mutable_progress()->set_step(100);
  a.mutable_progress()->set_age_ms(0);
  v1::ProgressField* f = a.mutable_progress()->add_fields();
  f->set_key("loss");
  f->set_value("0.31");
  v1::GpuReport* g = a.add_gpus();
  g->set_index(0);
  g->set_uuid("GPU-1");
  g->set_fatal(true);
  g->set_reason("uncorrectable ECC errors");
  a.mutable_coordinator()->set_rounds(1);
  ASSERT_TRUE(core_.Report(a).ok());
  ASSERT_TRUE(core_.Report(Report("pod-1", 1, 1, NowMs())).ok());

  // Ten seconds and 50 steps later, a restart with its cause, then a hang.
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport b = Report("pod-0", 2, 2, NowMs() - 40);  // arrives 40 ms late.
  *b.mutable_progress() = a.progress();
  *b.mutable_workers() = a.workers();
  *b.mutable_gpus() = a.gpus();
  *b.mutable_coordinator() = a.coordinator();
  b.mutable_coordinator()->set_rounds(2);  // the controller follows it.
  b.mutable_progress()->set_step(150);
  v1::ReportEvent* e = b.add_events();
  e->set_kind(v1::ReportEvent::RESTART);
  e->set_round(2);
  e->set_id(1);
  e->set_cause("rank 3 exited with code 3");
  v1::ReportEvent* h = b.add_events();
  h->set_kind(v1::ReportEvent::HANG);
  h->set_round(2);
  h->set_id(2);
  h->set_cause("rank 1 hung: no progress for 3s");
  b.set_hang_evidence(std::string(1000, 'x'));

  // The first snapshot sees step 100; the second, step 150 ten seconds later.
  SnapshotOf(core_, &rates_, &clock_, started, "test");
  ASSERT_TRUE(core_.Report(b).ok());
  const ControllerSnapshot snap = SnapshotOf(core_, &rates_, &clock_, started, "1.2.3");

  EXPECT_EQ(snap.version, "1.2.3");
  EXPECT_EQ(snap.uptime_ms, 10'000);
  EXPECT_EQ(snap.reports_received, 3);
  ASSERT_EQ(snap.jobs.size(), 1u);
  const JobView& j = snap.jobs[0];
  EXPECT_EQ(j.job_id, "job");
  EXPECT_EQ(j.state, JobState::kActive);
  EXPECT_EQ(j.round, 2u);
  EXPECT_EQ(j.rounds, 2);  // node 0's coordinator view.
  EXPECT_EQ(j.nnodes, 2);
  EXPECT_EQ(j.world_size, 4);
  EXPECT_EQ(j.restarts_total, 1);
  EXPECT_EQ(j.failures_total, 1);
  EXPECT_EQ(j.hangs_total, 1);
  ASSERT_EQ(j.restarts.size(), 1u);
  EXPECT_EQ(j.restarts[0].round, 2u);
  EXPECT_EQ(j.restarts[0].cause, "rank 3 exited with code 3");
  ASSERT_EQ(j.hangs.size(), 1u);
  EXPECT_EQ(j.hangs[0].evidence_summary.size(), kEvidenceSummaryLength);
  ASSERT_EQ(j.nodes.size(), 2u);
  const NodeView& n = j.nodes[0];
  EXPECT_EQ(n.node_id, "pod-0");
  EXPECT_TRUE(n.up);
  EXPECT_EQ(n.incarnation, 0xa1u);
  EXPECT_EQ(n.report_lag_ms, 40);
  EXPECT_EQ(n.agent_state, AgentState::kRunning);
  ASSERT_EQ(n.workers.size(), 1u);
  EXPECT_EQ(n.workers[0].pid, 4242);
  EXPECT_EQ(n.workers[0].state, WorkerState::kRunning);
  EXPECT_TRUE(n.progress.known);
  EXPECT_EQ(n.progress.step, 150);
  EXPECT_NEAR(n.progress.steps_per_second, 5.0, 0.05);  // 50 steps in ~10 s.
  ASSERT_EQ(n.progress.fields.size(), 1u);
  EXPECT_EQ(n.progress.fields[0].first, "loss");
  ASSERT_EQ(n.gpus.size(), 1u);
  EXPECT_EQ(n.gpus[0].status, GpuStatus::kFatal);
  EXPECT_FALSE(j.nodes[1].progress.known);

  // The views render it: one renderer for the page's JSON, the table and
  // /metrics.
  EXPECT_THAT(RenderPrometheus(snap), HasSubstr("job_id=\"job\""));
  EXPECT_THAT(RenderStatusTable(snap, "job"), HasSubstr("pod-0"));
}

TEST_F(SnapshotTest, ANodeThatStoppedReportingIsShownDown) {
  const absl::Time started = clock_.Now();
  ASSERT_TRUE(core_.Report(Report("pod-0", 1, 1, NowMs())).ok());
  clock_.Advance(absl::Seconds(60));
  core_.Sweep();
  const ControllerSnapshot snap = SnapshotOf(core_, &rates_, &clock_, started, "");
  ASSERT_EQ(snap.jobs.size(), 1u);
  ASSERT_EQ(snap.jobs[0].nodes.size(), 1u);
  EXPECT_FALSE(snap.jobs[0].nodes[0].up);
  EXPECT_EQ(snap.jobs[0].nodes[0].report_age_ms, 60'000);
  EXPECT_EQ(snap.jobs[0].state, JobState::kStale);
}

TEST_F(SnapshotTest, CoordinatorsLostNodes_FromTheNewestReportThatHasAView) {
  ASSERT_TRUE(core_.Report(Report("pod-0", 1, 1, NowMs())).ok());
  clock_.Advance(absl::Seconds(5));
  v1::HealthReport a = Report("pod-0", 2, 2, NowMs());
  a.mutable_coordinator()->set_members(2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->add_lost_nodes("pod-7");
  a.mutable_coordinator()->add_lost_nodes("pod-9");
  v1::RestartReason* rr = a.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("node pod-7 lost: no heartbeat for 5s (restart 1 of 3)");
  ASSERT_TRUE(core_.Report(a).ok());
  // pod-1 hosts no coordinator; a later report with an empty view (as
  // agents sent before TrimToLimits stopped adding one) does not hide pod-0's.
  v1::HealthReport b = Report("pod-1", 1, 2, NowMs() + 100);
  b.mutable_coordinator();
  ASSERT_TRUE(core_.Report(b).ok());
  ASSERT_EQ(core_.GetStatus("job")->summary().restarts(), 1);
  ControllerSnapshot snap = SnapshotOf(core_, &rates_, &clock_, clock_.Now(), "v");
  ASSERT_EQ(snap.jobs.size(), 1u);
  EXPECT_THAT(snap.jobs[0].lost_nodes, ::testing::ElementsAre("pod-7", "pod-9"));
  // The restart's cause is the coordinator's reason (no node's event gave one).
  ASSERT_EQ(snap.jobs[0].restarts.size(), 1u);
  EXPECT_THAT(snap.jobs[0].restarts[0].cause, HasSubstr("node pod-7 lost"));
  EXPECT_THAT(RenderJson(snap), HasSubstr("\"lost_nodes\":[\"pod-7\",\"pod-9\"]"));
  EXPECT_THAT(RenderStatusTable(snap, "job"), HasSubstr("lost nodes (not back): pod-7, pod-9"));

  // pod-7 came back: node 0's next report no longer names it.
  clock_.Advance(absl::Seconds(5));
  a.set_sequence(3);
  a.set_sent_unix_ms(NowMs());
  a.mutable_coordinator()->mutable_lost_nodes()->DeleteSubrange(0, 1);
  ASSERT_TRUE(core_.Report(a).ok());
  snap = SnapshotOf(core_, &rates_, &clock_, clock_.Now(), "v");
  EXPECT_THAT(snap.jobs[0].lost_nodes, ::testing::ElementsAre("pod-9"));
}

}  // namespace
}  // namespace trainlet::controller

#include "controller/snapshot.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "controller/testing/core_reports.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::HealthReport Report(const std::string& node, uint64_t seq, uint64_t round, int64_t sent_ms) {
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id(node);
  r.set_incarnation(node == "pod-0" ? 0xa1a1a1a1'00000001 : 0xb2b2b2b2'00000002);
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
  EXPECT_EQ(n.incarnation, 0xa1a1a1a1'00000000u);  // ShownIncarnation: the high 32 bits.
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

// The core's answers reach every view: each check with its outcome and
// reason, the links, the job's bad nodes (summary and detail), the metrics.
TEST_F(SnapshotTest, Preflight_ReachesTheViews) {
  v1::HealthReport a = Report("pod-0", 1, 1, NowMs());
  v1::PreflightReport* p = testing::SetPreflight(&a, 1, {"dns"});
  p->set_started_unix_micros(1'800'000'000'000'000);
  p->set_duration_micros(4200);
  p->mutable_links(0)->set_rtt_seconds(0.0002);
  v1::HealthReport b = Report("pod-1", 1, 1, NowMs());
  ASSERT_TRUE(core_.Report(a).ok());
  ASSERT_TRUE(core_.Report(b).ok());
  const ControllerSnapshot s = SnapshotOf(core_, &rates_, &clock_, clock_.Now(), "v");
  ASSERT_EQ(s.jobs.size(), 1u);
  const JobView& job = s.jobs[0];
  ASSERT_EQ(job.nodes.size(), 2u);
  const PreflightView& pf = job.nodes[0].preflight;
  EXPECT_TRUE(pf.known);
  EXPECT_EQ(pf.round, 1u);
  EXPECT_EQ(pf.started_unix_ms, 1'800'000'000'000);
  EXPECT_EQ(pf.duration_ms, 4);
  ASSERT_EQ(pf.checks.size(), 3u);
  EXPECT_EQ(pf.checks[0].check, "shm_size");
  EXPECT_EQ(pf.checks[0].outcome, CheckOutcome::kPass);
  EXPECT_EQ(pf.checks[0].unit, "bytes");
  EXPECT_EQ(pf.checks[1].outcome, CheckOutcome::kSkipped);
  EXPECT_EQ(pf.checks[1].reason, "no NVML on this node");
  EXPECT_EQ(pf.checks[2].outcome, CheckOutcome::kFail);
  EXPECT_EQ(pf.checks[2].reason, "dns failed here");
  ASSERT_EQ(pf.links.size(), 1u);
  EXPECT_EQ(pf.links[0].to_node, "peer");
  EXPECT_EQ(pf.links[0].bandwidth_bytes_per_second, 1e9);
  EXPECT_EQ(pf.links[0].rtt_seconds, 0.0002);
  EXPECT_FALSE(job.nodes[1].preflight.known);
  EXPECT_EQ(job.totals.nodes_preflight_failed, 1);
  EXPECT_THAT(job.totals.preflight_failed_nodes, ::testing::ElementsAre("pod-0"));
  // The summary (the page's job header) names it without the nodes.
  CoreViewSource source(&core_, &rates_, &clock_, clock_.Now(), "v");
  const ControllerSnapshot summary = source.Summary();
  EXPECT_THAT(summary.jobs[0].totals.preflight_failed_nodes, ::testing::ElementsAre("pod-0"));
  EXPECT_THAT(RenderPrometheus(s),
              HasSubstr("trainlet_preflight_check{job_id=\"job\",node_id=\"pod-0\",check=\"dns\","
                        "outcome=\"fail\"} 1\n"));
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

TEST_F(SnapshotTest, CoordinatorsSlowNodes_ReachEveryView) {
  v1::HealthReport a = Report("pod-0", 1, 1, NowMs());
  a.mutable_coordinator()->set_members(2);
  a.mutable_coordinator()->set_rounds(1);
  v1::SlowNodeView* n = a.mutable_coordinator()->add_slow_nodes();
  n->set_node_id("pod-1");
  n->set_cause("network");
  n->set_evidence(
      "node pod-1 is slow (network): its connections delivered 12.5 MB/s at the lowest, the "
      "others' median 1.1 GB/s, 140 retransmits over the last 30s; the job runs about 87% "
      "slower for it; since 12:03:04");
  n->set_since_unix_ms(NowMs() - 30000);
  n->set_slowdown_percent(87);
  ASSERT_TRUE(core_.Report(a).ok());
  ASSERT_TRUE(core_.Report(Report("pod-1", 1, 1, NowMs())).ok());
  ControllerSnapshot snap = SnapshotOf(core_, &rates_, &clock_, clock_.Now(), "v");
  ASSERT_EQ(snap.jobs.size(), 1u);
  ASSERT_EQ(snap.jobs[0].slow_nodes.size(), 1u);
  const SlowNodeView& v = snap.jobs[0].slow_nodes[0];
  EXPECT_EQ(v.node_id, "pod-1");
  EXPECT_EQ(v.cause, "network");
  EXPECT_EQ(v.slowdown_percent, 87);
  EXPECT_EQ(v.since_unix_ms, NowMs() - 30000);
  EXPECT_THAT(
      RenderPrometheus(snap),
      HasSubstr("trainlet_slow_node{job_id=\"job\",node_id=\"pod-1\",cause=\"network\"} 1"));
  EXPECT_THAT(RenderStatusTable(snap, "job"),
              HasSubstr("slow node: node pod-1 is slow (network): its connections delivered"));
  EXPECT_THAT(RenderJson(snap), HasSubstr("\"slow_nodes\":[{\"node_id\":\"pod-1\""));

  // No longer named: gone from every view.
  clock_.Advance(absl::Seconds(5));
  a.set_sequence(2);
  a.set_sent_unix_ms(NowMs());
  a.mutable_coordinator()->clear_slow_nodes();
  ASSERT_TRUE(core_.Report(a).ok());
  snap = SnapshotOf(core_, &rates_, &clock_, clock_.Now(), "v");
  EXPECT_TRUE(snap.jobs[0].slow_nodes.empty());
  EXPECT_THAT(RenderPrometheus(snap), Not(HasSubstr("trainlet_slow_node{")));
}

// An elastic job of three nodes that lost one and whose survivors succeeded,
// as the core tells it (issue 26): what every view of it shows.
class ElasticViewsTest : public ::testing::Test {
 protected:
  ElasticViewsTest() : core_(ControllerOptions{}, &clock_, &sink_) {}
  v1::HealthReport Node(int index, uint64_t round, int node_rank, int nnodes) {
    const std::string id = std::string("node-") + static_cast<char>('a' + index);
    v1::HealthReport r =
        testing::MakeReport("job", id, uint64_t{100u + index} << 32 | 7, ++seq_[index], round);
    r.set_node_rank(node_rank);
    r.set_nnodes(nnodes);
    r.set_world_size(2 * nnodes);
    r.set_min_nodes(2);
    r.set_max_nodes(3);
    r.set_report_interval_ms(1000);
    r.set_command("python train.py --epochs 3");
    r.set_sent_unix_ms(absl::ToUnixMillis(clock_.Now()));
    return r;
  }
  static void Workers(v1::HealthReport* r, v1::WorkerHealth::State state, int code = 0) {
    testing::AddWorker(r, 0, 2 * r->node_rank(), state, code);
    testing::AddWorker(r, 1, 2 * r->node_rank() + 1, state, code);
  }
  static v1::CoordinatorView* View(v1::HealthReport* r, uint64_t rounds, int members) {
    v1::CoordinatorView* v = r->mutable_coordinator();
    v->set_rounds(rounds);
    v->set_members(members);
    v->set_min_nodes(2);
    v->set_max_nodes(3);
    v->set_phase(v1::CoordinatorView::RUNNING);
    return v;
  }
  ControllerSnapshot Full() {
    CoreViewSource source(&core_, &rates_, &clock_, started_, "v");
    ControllerSnapshot s = source.Summary();
    for (JobView& job : s.jobs) job = *source.Job(job.job_id, 0, SIZE_MAX);
    return s;
  }

  SimulatedClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  const absl::Time started_ = clock_.Now();
  testing::RecordingSink sink_;
  ControllerCore core_;
  StepRateTracker rates_;
  uint64_t seq_[3] = {0, 0, 0};
};

TEST_F(ElasticViewsTest, LostNode_SucceededJob_StartCommandTimelineAndSeries) {
  // Round 1: three nodes, progress with a loss every 5 s.
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 3; ++i) {
      v1::HealthReport r = Node(i, 1, i, 3);
      Workers(&r, v1::WorkerHealth::RUNNING);
      testing::SetProgress(&r, 100 * t + 10 * i, absl::StrCat(2.0 / (t + 1)));
      if (i == 0) View(&r, 1, 3);
      ASSERT_TRUE(core_.Report(r).ok()) << t << " " << i;
    }
    clock_.Advance(absl::Seconds(5));
  }
  // node-c is killed: the coordinator lists it lost; round 2 of two nodes.
  v1::HealthReport a = Node(0, 2, 0, 2);
  Workers(&a, v1::WorkerHealth::RUNNING);
  View(&a, 2, 2)->add_lost_nodes("node-c");
  testing::AddEvent(&a, v1::ReportEvent::RESTART, 1, 2, "node node-c lost: stream broken");
  ASSERT_TRUE(core_.Report(a).ok());
  v1::HealthReport b = Node(1, 2, 1, 2);
  Workers(&b, v1::WorkerHealth::RUNNING);
  ASSERT_TRUE(core_.Report(b).ok());
  clock_.Advance(absl::Seconds(10));
  // The survivors succeed.
  for (int i = 0; i < 2; ++i) {
    v1::HealthReport r = Node(i, 2, i, 2);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    Workers(&r, v1::WorkerHealth::SUCCEEDED);
    if (i == 0) View(&r, 2, 2)->set_phase(v1::CoordinatorView::SUCCEEDED);
    ASSERT_TRUE(core_.Report(r).ok());
  }
  clock_.Advance(absl::Seconds(30));

  // The summary, as /api/jobs serves it (no node copied).
  CoreViewSource source(&core_, &rates_, &clock_, started_, "v");
  const ControllerSnapshot summary = source.Summary();
  ASSERT_EQ(summary.jobs.size(), 1u);
  const JobView& sj = summary.jobs[0];
  EXPECT_EQ(sj.state, JobState::kSucceeded);
  EXPECT_EQ(sj.totals.nodes, 2);
  EXPECT_EQ(sj.totals.nodes_lost, 1);
  EXPECT_EQ(sj.command, "python train.py --epochs 3");
  EXPECT_EQ(sj.started_unix_ms, absl::ToUnixMillis(started_));
  EXPECT_EQ(sj.ended_unix_ms, absl::ToUnixMillis(clock_.Now() - absl::Seconds(30)));
  EXPECT_TRUE(sj.nodes.empty());
  EXPECT_TRUE(sj.root_cause.known);
  EXPECT_EQ(sj.root_cause.kind, "node-lost");
  EXPECT_THAT(HeadlineOf(sj.root_cause), HasSubstr("node-c"));

  // The job in full.
  const ControllerSnapshot full = Full();
  const JobView& j = full.jobs[0];
  ASSERT_EQ(j.nodes.size(), 3u);
  EXPECT_EQ(j.nodes[2].node_id, "node-c");
  EXPECT_TRUE(j.nodes[2].lost);
  EXPECT_FALSE(j.nodes[2].up);
  EXPECT_EQ(j.totals.nodes, 2);
  EXPECT_EQ(j.totals.nodes_lost, 1);
  EXPECT_EQ(j.totals.workers, 4);
  EXPECT_EQ(j.totals.progress_age_ms, -1);  // finished.
  ASSERT_EQ(j.rounds_timeline.size(), 2u);
  EXPECT_EQ(j.rounds_timeline[1].round, 2u);
  EXPECT_THAT(j.rounds_timeline[1].restart_cause, HasSubstr("node-c"));
  EXPECT_TRUE(j.rounds_timeline[0].ended_by.known);
  ASSERT_FALSE(j.series.points.empty());
  EXPECT_EQ(j.series.keys, std::vector<std::string>{"loss"});
  EXPECT_GE(j.series.points.size(), 2u);

  // Every view: the table, the JSON and the metrics.
  const std::string table = RenderStatusTable(full, "job");
  EXPECT_THAT(table, HasSubstr("JOB job: succeeded"));
  EXPECT_THAT(table, HasSubstr("0/2 (1 lost)"));  // finished: its members went quiet.
  EXPECT_THAT(table, HasSubstr("command: python train.py --epochs 3"));
  EXPECT_THAT(table, HasSubstr("node-c  -     00000066     lost"));
  EXPECT_THAT(table, HasSubstr("after: node node-c lost: stream broken"));
  const std::string metrics = RenderPrometheus(full);
  EXPECT_THAT(metrics, HasSubstr("trainlet_job_info{job_id=\"job\",state=\"succeeded\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("trainlet_job_nodes_lost{job_id=\"job\"} 1\n"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("trainlet_job_progress_age_seconds{")));
  EXPECT_THAT(metrics, HasSubstr("trainlet_job_end_time_seconds{job_id=\"job\"}"));
}

TEST_F(ElasticViewsTest, Evidence_IsWholeThoughMemoryKeepsOnlyItsStart) {
  // More hangs than the core keeps whole in memory: the older ones' evidence
  // comes back from the history (its sink) in full.
  const int hangs = kEvidenceKeptInMemory + 2;
  for (int k = 0; k < hangs; ++k) {
    v1::HealthReport r = Node(0, 1, 0, 1);
    Workers(&r, v1::WorkerHealth::RUNNING);
    testing::AddEvent(&r, v1::ReportEvent::HANG, k + 1, 1, absl::StrCat("rank 0 hung #", k));
    std::string evidence;
    for (int line = 0; line < 40; ++line)
      absl::StrAppend(&evidence, "hang ", k, " line ", line, "\n");
    r.set_hang_evidence(evidence);
    ASSERT_TRUE(core_.Report(r).ok()) << k;
    clock_.Advance(absl::Seconds(10));  // past the per-node event rate limit.
  }
  CoreViewSource source(&core_, &rates_, &clock_, started_, "v");
  absl::StatusOr<std::vector<EvidenceView>> got = source.Evidence("job");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(hangs));
  for (int k = 0; k < hangs; ++k) {
    EXPECT_THAT((*got)[k].evidence, HasSubstr(absl::StrCat("hang ", k, " line 39\n"))) << k;
  }
  // The job's detail shows a summary of each and says how long the whole is.
  absl::StatusOr<JobView> job = source.Job("job", 0, SIZE_MAX);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->hangs.size(), static_cast<size_t>(hangs));
  EXPECT_LE(job->hangs[0].evidence_summary.size(), kEvidenceSummaryLength);
  EXPECT_GT(job->hangs[0].evidence_bytes, static_cast<int64_t>(kEvidenceSummaryLength));
  EXPECT_GT(job->hangs[0].seq, 0);
}

}  // namespace
}  // namespace trainlet::controller

#include "controller/controller_core.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "controller/report_limits.h"
#include "controller/testing/core_reports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

using testing::MakeReport;
using testing::RecordingSink;

std::vector<v1::HistoryEntry::Kind> Kinds(const v1::GetStatusResponse& s) {
  std::vector<v1::HistoryEntry::Kind> kinds;
  for (const auto& e : s.history()) kinds.push_back(e.kind());
  return kinds;
}

class ControllerCoreTest : public ::testing::Test {
 protected:
  explicit ControllerCoreTest(ControllerOptions options = {})
      : core_(std::make_unique<ControllerCore>(options, &clock_, &sink_)) {}
  SimulatedClock clock_;
  RecordingSink sink_;
  std::unique_ptr<ControllerCore> core_;
};

TEST_F(ControllerCoreTest, Report_FirstRound_IsOneRoundEntryAndActiveJob) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 2, 1, 1)).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->summary().state(), v1::JobSummary::ACTIVE);
  EXPECT_EQ(status->summary().nodes(), 2);
  EXPECT_EQ(status->summary().nodes_fresh(), 2);
  EXPECT_EQ(status->summary().restarts(), 0);
  EXPECT_THAT(Kinds(*status), ::testing::ElementsAre(v1::HistoryEntry::ROUND));
  ASSERT_THAT(sink_.records, SizeIs(1));
  EXPECT_EQ(sink_.records[0].job_id, "job");
  EXPECT_EQ(sink_.records[0].entry.round(), 1u);
}

TEST_F(ControllerCoreTest, Report_NewRound_IsRestartWithTheAgentsCause) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 2, 2);
  v1::ReportEvent* e = r.add_events();
  e->set_kind(v1::ReportEvent::RESTART);
  e->set_round(2);
  e->set_id(1);
  e->set_cause("worker 3 on pod-1 killed by signal 9");
  ASSERT_TRUE(core_->Report(r).ok());
  // The other node's report of the same round adds nothing.
  v1::HealthReport other = MakeReport("job", "pod-1", 7, 1, 2);
  *other.add_events() = *e;
  ASSERT_TRUE(core_->Report(other).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().restarts(), 1);
  EXPECT_EQ(status->summary().round(), 2u);
  EXPECT_THAT(Kinds(*status),
              ::testing::ElementsAre(v1::HistoryEntry::ROUND, v1::HistoryEntry::RESTART,
                                     v1::HistoryEntry::ROUND));
  EXPECT_EQ(status->history(1).cause(), "worker 3 on pod-1 killed by signal 9");
  EXPECT_EQ(status->history(1).node_id(), "pod-0");
}

TEST_F(ControllerCoreTest, Report_NewRoundWithoutEvent_TakesCoordinatorReasonThenLastFailure) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 2, 2);
  r.set_last_failure("local worker failed");
  r.mutable_coordinator()->set_rounds(2);
  v1::RestartReason* rr = r.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("node pod-1 lost: no heartbeat for 10s");
  ASSERT_TRUE(core_->Report(r).ok());
  v1::HealthReport r3 = MakeReport("job", "pod-0", 1, 3, 3);
  r3.mutable_coordinator()->set_rounds(3);
  r3.set_last_failure("local worker 0 exited with code 1");
  ASSERT_TRUE(core_->Report(r3).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->history_size(), 5);
  EXPECT_EQ(status->history(1).cause(), "node pod-1 lost: no heartbeat for 10s");
  EXPECT_EQ(status->history(3).cause(), "local worker 0 exited with code 1");
}

TEST_F(ControllerCoreTest, Restart_WithoutCause_WaitsForTheNodeThatKnowsIt) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 2, 1, 1)).ok());
  // pod-0's workers were fine: its RESTART event has no cause.
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 2, 2);
  v1::ReportEvent* e = r.add_events();
  e->set_kind(v1::ReportEvent::RESTART);
  e->set_round(2);
  e->set_id(1);
  ASSERT_TRUE(core_->Report(r).ok());
  EXPECT_EQ(core_->GetStatus("job")->summary().restarts(), 1);
  EXPECT_THAT(Kinds(*core_->GetStatus("job")),
              ::testing::ElementsAre(v1::HistoryEntry::ROUND, v1::HistoryEntry::ROUND));
  // pod-1, whose worker failed, reports the same round with its failure.
  v1::HealthReport failed = MakeReport("job", "pod-1", 2, 2, 2);
  failed.set_last_failure("worker rank 1 exited with code 3");
  ASSERT_TRUE(core_->Report(failed).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().restarts(), 1);
  ASSERT_EQ(status->history_size(), 3);
  EXPECT_EQ(status->history(2).kind(), v1::HistoryEntry::RESTART);
  EXPECT_EQ(status->history(2).cause(), "worker rank 1 exited with code 3");
  EXPECT_EQ(status->history(2).node_id(), "pod-1");
}

TEST_F(ControllerCoreTest, Restart_NobodyKnowsTheCause_IsRecordedAfterTheWait) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 2, 2)).ok());
  clock_.Advance(kRestartCauseWait - absl::Milliseconds(1));
  core_->Sweep();
  EXPECT_EQ(core_->GetStatus("job")->history_size(), 2);
  clock_.Advance(absl::Milliseconds(1));
  core_->Sweep();
  auto status = core_->GetStatus("job");
  ASSERT_EQ(status->history_size(), 3);
  EXPECT_EQ(status->history(2).kind(), v1::HistoryEntry::RESTART);
  EXPECT_THAT(status->history(2).cause(), HasSubstr("no node reported a cause"));
  EXPECT_EQ(sink_.records.size(), 3u);
}

TEST_F(ControllerCoreTest, Report_HangEvent_RecordsEvidenceAndVerdictOnce) {
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 1, 1);
  r.set_hang_evidence("thread 12 wchan futex_wait_queue\nlast line: step=1200");
  v1::ReportEvent* e = r.add_events();
  e->set_kind(v1::ReportEvent::HANG);
  e->set_round(1);
  e->set_id(1);
  // The suspect's node reports the hang another node declared (issue 25).
  e->set_cause(
      "hang: suspect rank 2 on pod-0 (not in a collective: train.py:41 in step); declared by "
      "node pod-1 (rank 5: no progress for 5m0s)");
  ASSERT_TRUE(core_->Report(r).ok());
  // The same event again (the answer to the first report was lost).
  r.set_sequence(2);
  ASSERT_TRUE(core_->Report(r).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().hangs(), 1);
  ASSERT_EQ(status->history_size(), 2);
  const v1::HistoryEntry& hang = status->history(0);
  EXPECT_EQ(hang.kind(), v1::HistoryEntry::HANG);
  EXPECT_THAT(hang.evidence(), HasSubstr("futex_wait_queue"));
  // The verdict names the suspect first, and the declaring node as the
  // agent said (not "declared by the agent of pod-0", the reporting node).
  EXPECT_THAT(hang.verdict(), ::testing::StartsWith("hang: suspect rank 2 on pod-0"));
  EXPECT_THAT(hang.verdict(), HasSubstr("declared by node pod-1"));
  // The node's latest report keeps no evidence (memory).
  EXPECT_TRUE(status->nodes(0).report().hang_evidence().empty());
}

TEST_F(ControllerCoreTest, Report_OlderSequence_IsIgnored) {
  v1::HealthReport newer = MakeReport("job", "pod-0", 1, 5, 1);
  newer.set_restart_count(3);
  ASSERT_TRUE(core_->Report(newer).ok());
  v1::HealthReport older = MakeReport("job", "pod-0", 1, 4, 1);
  older.set_restart_count(2);
  ASSERT_TRUE(core_->Report(older).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->nodes(0).report().restart_count(), 3);
}

TEST_F(ControllerCoreTest, Report_ReplacedIncarnation_IsFenced) {
  constexpr uint64_t kOld = 0x11111111'00000001, kNew = 0x22222222'00000002;
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", kOld, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 9, 1, 1)).ok());
  // The job goes on to round 2; pod-0's new incarnation is in it.
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 9, 2, 2)).ok());
  clock_.Advance(kMembershipGrace);
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", kNew, 1, 2)).ok());
  absl::Status s = core_->Report(MakeReport("job", "pod-0", kOld, 2, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("replaced"));
  EXPECT_EQ(core_->stats().reports_rejected, 1);
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->nodes(0).report().node_id(), "pod-0");
  EXPECT_EQ(status->nodes(0).report().incarnation(), ShownIncarnation(kNew));
}

TEST_F(ControllerCoreTest, Report_Invalid_IsRefusedNamingTheField) {
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 1, 1);
  r.set_hang_evidence(std::string(kMaxHangEvidenceLength + 1, 'x'));
  absl::Status s = core_->Report(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("hang_evidence"));
  EXPECT_EQ(core_->stats().jobs, 0);
}

TEST_F(ControllerCoreTest, Sweep_SilentNode_GoesStaleOnceThenIsForgotten) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 2, 1, 1)).ok());
  clock_.Advance(absl::Seconds(14));
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", 2, 2, 1)).ok());
  clock_.Advance(absl::Seconds(1));  // pod-0 silent for 15 s = 3 x 5 s.
  core_->Sweep();
  core_->Sweep();
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().state(), v1::JobSummary::ACTIVE);
  EXPECT_EQ(status->summary().nodes_fresh(), 1);
  EXPECT_TRUE(status->nodes(0).stale());
  EXPECT_FALSE(status->nodes(1).stale());
  EXPECT_THAT(Kinds(*status),
              ::testing::ElementsAre(v1::HistoryEntry::ROUND, v1::HistoryEntry::NODE_STALE));
  EXPECT_EQ(status->history(1).node_id(), "pod-0");

  clock_.Advance(absl::Hours(1) + absl::Seconds(14));  // pod-1: 15 s + 1 h silent.
  core_->Sweep();
  status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().nodes(), 0);
  EXPECT_EQ(status->summary().state(), v1::JobSummary::STALE);
  EXPECT_EQ(core_->stats().nodes, 0);
}

TEST_F(ControllerCoreTest, Staleness_FollowsTheAgentsLongerInterval) {
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 1, 1);
  r.set_report_interval_ms(60000);
  ASSERT_TRUE(core_->Report(r).ok());
  clock_.Advance(absl::Seconds(179));
  core_->Sweep();
  EXPECT_FALSE(core_->GetStatus("job")->nodes(0).stale());
  clock_.Advance(absl::Seconds(1));
  core_->Sweep();
  EXPECT_TRUE(core_->GetStatus("job")->nodes(0).stale());
}

TEST_F(ControllerCoreTest, Job_AllNodesDone_SucceedsOrFails) {
  for (const char* node : {"pod-0", "pod-1"}) {
    v1::HealthReport r = MakeReport("ok", node, 1, 1, 1);
    r.set_state(v1::HealthReport::DONE);
    r.set_exit_code(0);
    ASSERT_TRUE(core_->Report(r).ok());
  }
  EXPECT_EQ(core_->GetStatus("ok")->summary().state(), v1::JobSummary::SUCCEEDED);
  v1::HealthReport r = MakeReport("bad", "pod-0", 1, 1, 1);
  r.set_state(v1::HealthReport::DONE);
  r.set_exit_code(75);
  ASSERT_TRUE(core_->Report(r).ok());
  EXPECT_EQ(core_->GetStatus("bad")->summary().state(), v1::JobSummary::FAILED);
  // A finished node going silent is not a stale node.
  clock_.Advance(absl::Minutes(1));
  core_->Sweep();
  EXPECT_EQ(core_->GetStatus("bad")->history_size(), 1);
}

TEST_F(ControllerCoreTest, GetStatus_UnknownJob_IsNotFound) {
  EXPECT_EQ(core_->GetStatus("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ControllerCoreTest, ListJobs_ProgressIsTheHighestStep) {
  v1::HealthReport a = MakeReport("job", "pod-0", 1, 1, 1);
  a.mutable_progress()->set_known(true);
  a.mutable_progress()->set_step(1200);
  v1::HealthReport b = MakeReport("job", "pod-1", 2, 1, 1);
  b.mutable_progress()->set_known(true);
  b.mutable_progress()->set_step(1190);
  ASSERT_TRUE(core_->Report(a).ok());
  ASSERT_TRUE(core_->Report(b).ok());
  v1::ListJobsResponse jobs = core_->ListJobs();
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).progress_step(), 1200);
}

TEST_F(ControllerCoreTest, SinkFailure_KeepsTheEntryInMemory) {
  sink_.fail = true;
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  EXPECT_EQ(core_->GetStatus("job")->history_size(), 1);
}

TEST_F(ControllerCoreTest, Restore_PutsHistoryBackAndDoesNotRepeatTheRound) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  v1::HealthReport second = MakeReport("job", "pod-0", 1, 2, 2);
  second.set_last_failure("worker 0 exited with code 1");
  ASSERT_TRUE(core_->Report(second).ok());
  std::vector<HistoryRecord> saved = sink_.records;
  ASSERT_THAT(saved, SizeIs(3));

  RecordingSink sink2;
  ControllerCore restarted({}, &clock_, &sink2);
  StoredHistory stored;
  stored.entries = saved;
  restarted.Restore(stored);
  auto status = restarted.GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().state(), v1::JobSummary::STALE);
  EXPECT_EQ(status->summary().restarts(), 1);
  EXPECT_EQ(status->summary().round(), 2u);
  EXPECT_EQ(status->history_size(), 3);
  // The agent reports the same round again: nothing new to record.
  ASSERT_TRUE(restarted.Report(MakeReport("job", "pod-0", 1, 3, 2)).ok());
  EXPECT_TRUE(sink2.records.empty());
  EXPECT_EQ(restarted.GetStatus("job")->summary().state(), v1::JobSummary::ACTIVE);
}

// ---- Preflight (issue 29): the node's latest, the job's bad nodes.

TEST_F(ControllerCoreTest, Preflight_IsTheNodesLatest_AndTheSummaryNamesTheBadNodes) {
  v1::HealthReport a = MakeReport("job", "pod-0", 1, 1, 1);
  testing::SetPreflight(&a, 1);
  v1::HealthReport b = MakeReport("job", "pod-1", 2, 1, 1);
  testing::SetPreflight(&b, 1, {"dns", "gpu_row_remap"});
  ASSERT_TRUE(core_->Report(a).ok());
  ASSERT_TRUE(core_->Report(b).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->summary().nodes_preflight_failed(), 1);
  EXPECT_THAT(status->summary().preflight_failed_nodes(), ::testing::ElementsAre("pod-1"));
  ASSERT_EQ(status->nodes(1).report().node_id(), "pod-1");
  EXPECT_EQ(status->nodes(1).report().preflight().results_size(), 4);
  EXPECT_EQ(status->nodes(1).report().preflight().results(2).check(), "dns");
  EXPECT_EQ(core_->ListJobs().jobs(0).nodes_preflight_failed(), 1);

  // Its next preflight passes: no bad node any more.
  testing::SetPreflight(&b, 2);
  b.set_sequence(2);
  ASSERT_TRUE(core_->Report(b).ok());
  EXPECT_EQ(core_->GetStatus("job")->summary().nodes_preflight_failed(), 0);
  EXPECT_EQ(core_->GetStatus("job")->summary().preflight_failed_nodes_size(), 0);
}

TEST_F(ControllerCoreTest, Preflight_SummaryNamesAtMostSixteenAndCountsAll) {
  for (int i = 0; i < kPreflightFailedNodesNamed + 4; ++i) {
    v1::HealthReport r = MakeReport("job", absl::StrCat("pod-", 100 + i), 10 + i, 1, 1);
    testing::SetPreflight(&r, 1, {"memlock"});
    ASSERT_TRUE(core_->Report(r).ok());
  }
  v1::JobSummary s = core_->ListJobs().jobs(0);
  EXPECT_EQ(s.nodes_preflight_failed(), kPreflightFailedNodesNamed + 4);
  ASSERT_EQ(s.preflight_failed_nodes_size(), kPreflightFailedNodesNamed);
  EXPECT_EQ(s.preflight_failed_nodes(0), "pod-100");
}

TEST_F(ControllerCoreTest, Preflight_OfAnotherNode_IsRefusedWithTheWholeReport) {
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 1, 1);
  testing::SetPreflight(&r, 1)->set_node_id("pod-1");
  absl::Status s = core_->Report(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("preflight report"));
  EXPECT_EQ(core_->stats().reports_rejected, 1);
  EXPECT_EQ(core_->stats().jobs, 0);
}

TEST_F(ControllerCoreTest, Preflight_Event_IsOneHistoryEntry) {
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-0", 1, 1, 1)).ok());
  // The preflight of the next round failed.
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 2, 1);
  testing::SetPreflight(&r, 2, {"dns"});
  testing::AddEvent(&r, v1::ReportEvent::PREFLIGHT, 1, 2, "preflight: 1 failed: dns (no answer)");
  ASSERT_TRUE(core_->Report(r).ok());
  r.set_sequence(3);  // re-sent: its answer was lost.
  ASSERT_TRUE(core_->Report(r).ok());
  auto status = core_->GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_THAT(Kinds(*status),
              ::testing::ElementsAre(v1::HistoryEntry::ROUND, v1::HistoryEntry::PREFLIGHT));
  EXPECT_EQ(status->history(1).node_id(), "pod-0");
  EXPECT_EQ(status->history(1).round(), 2u);
  EXPECT_EQ(status->history(1).cause(), "preflight: 1 failed: dns (no answer)");
  // Saved as it happened.
  ASSERT_THAT(sink_.records, SizeIs(2));
  EXPECT_EQ(sink_.records[1].entry.kind(), v1::HistoryEntry::PREFLIGHT);
}

// A controller restart keeps which checks failed (not the passes, not the
// links: the record stays small), and the job still names the node.
TEST_F(ControllerCoreTest, Preflight_Stored_KeepsTheFailedChecksAcrossARestart) {
  v1::HealthReport r = MakeReport("job", "pod-0", 1, 1, 1);
  testing::SetPreflight(&r, 1, {"path_round_trip"});
  ASSERT_TRUE(core_->Report(r).ok());
  core_->Flush();
  ASSERT_EQ(sink_.jobs.count("job"), 1u);
  const v1::JobRecord& rec = sink_.jobs["job"];
  ASSERT_EQ(rec.nodes_size(), 1);
  const v1::PreflightReport& kept = rec.nodes(0).report().preflight();
  ASSERT_EQ(kept.results_size(), 1);
  EXPECT_EQ(kept.results(0).check(), "path_round_trip");
  EXPECT_EQ(kept.results(0).reason(), "path_round_trip failed here");
  EXPECT_EQ(kept.links_size(), 0);

  ControllerCore restarted({}, &clock_, nullptr);
  restarted.Restore(sink_.Stored());
  v1::JobSummary s = restarted.ListJobs().jobs(0);
  EXPECT_THAT(s.preflight_failed_nodes(), ::testing::ElementsAre("pod-0"));
}

class ControllerCoreLimitsTest : public ControllerCoreTest {
 protected:
  static ControllerOptions Small() {
    ControllerOptions o;
    o.max_jobs = 2;
    o.max_nodes = 3;
    o.max_nodes_per_job = 2;
    o.max_history_per_job = 4;
    return o;
  }
  ControllerCoreLimitsTest() : ControllerCoreTest(Small()) {}
};

TEST_F(ControllerCoreLimitsTest, NodesPerJobAndInAll_AreCapped) {
  ASSERT_TRUE(core_->Report(MakeReport("a", "n0", 1, 1, 1)).ok());
  ASSERT_TRUE(core_->Report(MakeReport("a", "n1", 2, 1, 1)).ok());
  EXPECT_EQ(core_->Report(MakeReport("a", "n2", 3, 1, 1)).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(core_->Report(MakeReport("b", "n0", 4, 1, 1)).ok());
  EXPECT_EQ(core_->Report(MakeReport("b", "n1", 5, 1, 1)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(core_->stats().nodes, 3);
}

TEST_F(ControllerCoreLimitsTest, Jobs_AreCappedAndTheOldestSilentOneMakesRoom) {
  ASSERT_TRUE(core_->Report(MakeReport("a", "n0", 1, 1, 1)).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(core_->Report(MakeReport("b", "n0", 2, 1, 1)).ok());
  // Both active: no room.
  absl::Status s = core_->Report(MakeReport("c", "n0", 3, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(core_->stats().jobs, 2);
  clock_.Advance(absl::Seconds(20));
  core_->Sweep();  // both stale; "a" heard from first.
  ASSERT_TRUE(core_->Report(MakeReport("c", "n0", 3, 1, 1)).ok());
  EXPECT_EQ(core_->GetStatus("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->GetStatus("b").ok());
}

TEST_F(ControllerCoreLimitsTest, HistoryInMemory_KeepsTheNewest) {
  for (uint64_t round = 1; round <= 5; ++round) {
    v1::HealthReport r = MakeReport("a", "n0", 1, round, round);
    r.set_last_failure("worker 0 failed");
    ASSERT_TRUE(core_->Report(r).ok());
  }
  auto status = core_->GetStatus("a");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->history_size(), 4);
  EXPECT_EQ(status->history(3).round(), 5u);
  EXPECT_EQ(status->summary().restarts(), 4);
  EXPECT_EQ(core_->stats().history_entries, 4);
  EXPECT_THAT(sink_.records, SizeIs(9));  // the store has them all.
}

}  // namespace
}  // namespace trainlet::controller

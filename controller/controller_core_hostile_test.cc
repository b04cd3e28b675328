// A hostile or broken reporter cannot rewrite others (issue 26, scope 4):
// the red team's reproductions (C1, C2) against the core, on a
// SimulatedClock.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "controller/controller_core.h"
#include "controller/report_limits.h"
#include "controller/testing/core_reports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using testing::AddEvent;
using testing::AddWorker;
using ::testing::HasSubstr;
using testing::MakeReport;
using testing::RecordingSink;

class HostileReporterTest : public ::testing::Test {
 protected:
  HostileReporterTest()
      : core_(std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_)) {}

  // The real job: pod-0 (it hosts the coordinator) and pod-1, in `round`.
  void RealReports(uint64_t round) {
    v1::HealthReport a = MakeReport("job", "pod-0", 0xa0, ++seq0_, round);
    a.mutable_coordinator()->set_rounds(round);
    a.mutable_coordinator()->set_members(2);
    a.mutable_coordinator()->set_max_nodes(2);
    a.mutable_coordinator()->set_phase(v1::CoordinatorView::RUNNING);
    ASSERT_TRUE(core_->Report(a).ok());
    v1::HealthReport b = MakeReport("job", "pod-1", 0xb1, ++seq1_, round);
    b.set_node_rank(1);
    ASSERT_TRUE(core_->Report(b).ok());
  }
  v1::GetStatusResponse Status() {
    auto s = core_->GetStatus("job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::GetStatusResponse();
  }
  const v1::NodeStatus* Node(const v1::GetStatusResponse& s, const std::string& id) {
    for (const v1::NodeStatus& n : s.nodes()) {
      if (n.report().node_id() == id) return &n;
    }
    return nullptr;
  }

  SimulatedClock clock_;
  RecordingSink sink_;
  std::unique_ptr<ControllerCore> core_;
  uint64_t seq0_ = 0, seq1_ = 0;
};

// C1: a report with a new incarnation fenced the real agent's row for good.
TEST_F(HostileReporterTest, Takeover_NewIncarnationWhileTheAgentReports_IsRefused) {
  RealReports(1);
  clock_.Advance(absl::Seconds(1));
  for (uint64_t round : {0, 1, 2, 3}) {
    v1::HealthReport forged = MakeReport("job", "pod-1", 0xbad, 1000 + round, round);
    absl::Status s = core_->Report(forged);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << round << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("in a later round of the job"));
  }
  // The real agent is not fenced: its next reports are taken.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(5));
    RealReports(1);
  }
  v1::GetStatusResponse s = Status();
  ASSERT_NE(Node(s, "pod-1"), nullptr);
  EXPECT_EQ(Node(s, "pod-1")->report().incarnation(), 0xb1u);
  EXPECT_EQ(Node(s, "pod-1")->report().sequence(), seq1_);
  EXPECT_FALSE(Node(s, "pod-1")->stale());
}

TEST_F(HostileReporterTest, RestartedAgent_TakesItsRowThroughTheRoundThatAdmittedIt) {
  RealReports(1);
  clock_.Advance(absl::Seconds(1));
  // pod-1's agent restarts: new incarnation, joining (refused: not in a
  // round yet, the old one is still the node's).
  EXPECT_EQ(core_->Report(MakeReport("job", "pod-1", 0xb2, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  // The coordinator opens round 2 with it; node 0 says so.
  v1::HealthReport a = MakeReport("job", "pod-0", 0xa0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->set_members(2);
  ASSERT_TRUE(core_->Report(a).ok());
  // Within the grace the old incarnation may still report round 2 itself.
  v1::HealthReport b2 = MakeReport("job", "pod-1", 0xb2, 2, 2);
  EXPECT_EQ(core_->Report(b2).code(), absl::StatusCode::kFailedPrecondition);
  clock_.Advance(kMembershipGrace);
  b2.set_sequence(3);
  ASSERT_TRUE(core_->Report(b2).ok());
  EXPECT_EQ(Node(Status(), "pod-1")->report().incarnation(), 0xb2u);
  // Now the old one is fenced.
  v1::HealthReport old = MakeReport("job", "pod-1", 0xb1, 99, 1);
  absl::Status s = core_->Report(old);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("was replaced"));
}

TEST_F(HostileReporterTest, NewNode_BeyondTheCoordinatorsMembership_IsRefused) {
  RealReports(1);
  absl::Status s = core_->Report(MakeReport("job", "intruder", 0xee, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("as many as its coordinator allows"));
  EXPECT_EQ(Status().nodes_size(), 2);
}

// C1: round=2^40 meant real rounds and restarts were never recorded again.
TEST_F(HostileReporterTest, RoundJump_IsRefused_RealRoundsStillRecorded) {
  RealReports(1);
  for (uint64_t round : {kMaxRound, uint64_t{1} << 39, uint64_t{1} + kMaxRoundStep + 1}) {
    v1::HealthReport forged = MakeReport("job", "pod-1", 0xb1, ++seq1_, round);
    absl::Status s = core_->Report(forged);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << round;
    EXPECT_THAT(s.message(), HasSubstr("rounds ahead"));
  }
  // An event of a far round, and a view from another node, move nothing.
  v1::HealthReport sly = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  AddEvent(&sly, v1::ReportEvent::RESTART, 1, 1 + kMaxRoundStep, "forged restart");
  sly.mutable_coordinator()->set_rounds(1 + kMaxRoundStep);
  ASSERT_TRUE(core_->Report(sly).ok());
  EXPECT_EQ(Status().summary().round(), 1u);
  EXPECT_EQ(Status().summary().restarts(), 0);
  // The real restart is recorded.
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport a = MakeReport("job", "pod-0", 0xa0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  v1::RestartReason* rr = a.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("worker rank 1 exited with code 3 (restart 1 of 3)");
  ASSERT_TRUE(core_->Report(a).ok());
  v1::JobSummary summary = Status().summary();
  EXPECT_EQ(summary.round(), 2u);
  EXPECT_EQ(summary.restarts(), 1);
  EXPECT_THAT(Status().rounds(1).restart_cause(), HasSubstr("restart 1 of 3"));
}

// C1: an event dated in the year 3000 was never aged out.
TEST_F(HostileReporterTest, FutureEventTime_IsClampedToTheControllersClock) {
  RealReports(1);
  v1::HealthReport r = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  const int64_t year_3000 = absl::ToUnixMillis(
      absl::FromCivil(absl::CivilSecond(3000, 1, 1, 0, 0, 0), absl::UTCTimeZone()));
  AddEvent(&r, v1::ReportEvent::HANG, 1, 1, "hung")->set_at_unix_ms(year_3000);
  AddEvent(&r, v1::ReportEvent::FINISHED, 2, 1, "bye")->set_at_unix_ms(1);  // 1970.
  AddWorker(&r, 0, 2, v1::WorkerHealth::FAILED, 3)->set_exited_unix_ms(year_3000);
  r.set_state(v1::HealthReport::STOPPING);
  ASSERT_TRUE(core_->Report(r).ok());
  const int64_t now = absl::ToUnixMillis(clock_.Now());
  v1::GetStatusResponse s = Status();
  for (const v1::HistoryEntry& e : s.history()) {
    EXPECT_LE(e.at_unix_ms(), now) << e.DebugString();
    EXPECT_GE(e.at_unix_ms(), now - absl::ToInt64Milliseconds(absl::Hours(24))) << e.DebugString();
  }
  EXPECT_EQ(s.summary().root_cause().at_unix_ms(), now);
}

// C2: one 16.6 KB report with 16 HANG events (id 0) wrote 256 KiB of
// evidence and 16 unthrottled log lines.
TEST_F(HostileReporterTest, EventFlood_SixteenHangs_OneEvidenceAndTheRateLimit) {
  RealReports(1);
  const std::string evidence(kMaxHangEvidenceLength, 'e');
  v1::HealthReport flood = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  flood.set_hang_evidence(evidence);
  for (int i = 0; i < kMaxEvents; ++i) AddEvent(&flood, v1::ReportEvent::HANG, 0, 1, "hung");
  ASSERT_TRUE(ValidateHealthReport(flood).ok());
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), 0);  // effectful events need ids.

  // With ids, the same event under 16 ids is one.
  flood = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  flood.set_hang_evidence(evidence);
  for (int i = 1; i <= kMaxEvents; ++i) AddEvent(&flood, v1::ReportEvent::HANG, i, 1, "hung");
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), 1);

  // 16 different ones: the node's allowance (8), one evidence per report.
  flood = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  flood.set_hang_evidence(evidence);
  for (int i = 1; i <= kMaxEvents; ++i) {
    AddEvent(&flood, v1::ReportEvent::HANG, 100 + i, 1, absl::StrCat("hung ", i));
  }
  ASSERT_TRUE(core_->Report(flood).ok());
  v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().hangs(), kNodeEventBurst);
  int64_t evidence_bytes = 0;
  for (const v1::HistoryEntry& e : s.history()) evidence_bytes += e.evidence_bytes();
  EXPECT_EQ(evidence_bytes, 2 * static_cast<int64_t>(kMaxHangEvidenceLength));
  EXPECT_GT(core_->stats().events_dropped, 0);
  // The allowance comes back slowly: one more every kNodeEventEvery.
  clock_.Advance(kNodeEventEvery);
  flood = MakeReport("job", "pod-1", 0xb1, ++seq1_, 1);
  AddEvent(&flood, v1::ReportEvent::HANG, 200, 1, "hung again");
  AddEvent(&flood, v1::ReportEvent::HANG, 201, 1, "and again");
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), kNodeEventBurst + 1);
  // The other node's events are its own.
  v1::HealthReport other = MakeReport("job", "pod-0", 0xa0, ++seq0_, 1);
  AddEvent(&other, v1::ReportEvent::HANG, 1, 1, "pod-0 hung");
  ASSERT_TRUE(core_->Report(other).ok());
  EXPECT_EQ(Status().summary().hangs(), kNodeEventBurst + 2);
}

TEST_F(HostileReporterTest, EvidenceInMemory_IsBoundedPerJobAndInAll) {
  ControllerOptions o;
  o.max_history_per_job = 1000;
  ControllerCore core(o, &clock_, &sink_);
  const std::string evidence(kMaxHangEvidenceLength, 'e');
  // Enough jobs and hangs to pass the bound in all.
  const int jobs = static_cast<int>(kMaxEvidenceBytesInMemory /
                                    (kEvidenceKeptInMemory * kMaxHangEvidenceLength)) +
                   4;
  for (int j = 0; j < jobs; ++j) {
    for (int h = 1; h <= kEvidenceKeptInMemory + 2; ++h) {
      v1::HealthReport r = MakeReport(absl::StrCat("job-", j), "pod-0", 1, h, 1);
      r.set_hang_evidence(evidence);
      AddEvent(&r, v1::ReportEvent::HANG, h, 1, absl::StrCat("hang ", h));
      ASSERT_TRUE(core.Report(r).ok());
      clock_.Advance(absl::Seconds(10));
    }
  }
  EXPECT_LE(core.stats().evidence_bytes, kMaxEvidenceBytesInMemory);
  auto newest = core.GetStatus(absl::StrCat("job-", jobs - 1));
  ASSERT_TRUE(newest.ok());
  int whole = 0;
  for (const v1::HistoryEntry& e : newest->history()) {
    if (e.kind() != v1::HistoryEntry::HANG) continue;
    EXPECT_EQ(e.evidence_bytes(), static_cast<int>(kMaxHangEvidenceLength));
    if (e.evidence().size() == kMaxHangEvidenceLength)
      ++whole;
    else
      EXPECT_EQ(e.evidence().size(), kEvidenceSummaryBytes);
  }
  EXPECT_EQ(whole, kEvidenceKeptInMemory);
  // What is no longer whole in memory is read from the store.
  int64_t seq = 0;  // the oldest hang's.
  for (const v1::HistoryEntry& e : newest->history()) {
    if (e.kind() == v1::HistoryEntry::HANG && seq == 0) seq = e.seq();
  }
  auto read = core.Evidence(absl::StrCat("job-", jobs - 1), seq);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), kMaxHangEvidenceLength);
}

}  // namespace
}  // namespace trainlet::controller

// A hostile or broken reporter cannot rewrite others (issue 26, scope 4):
// the red team's reproductions (C1, C2) against the core, on a
// SimulatedClock.
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
using ::testing::Not;
using testing::RecordingSink;

// Incarnations as agents draw them: random 64-bit numbers.
constexpr uint64_t kIncA0 = 0xa0a0a0a0'12345678;
constexpr uint64_t kIncB1 = 0xb1b1b1b1'9abcdef0;
constexpr uint64_t kIncB2 = 0xb2b2b2b2'0fedcba9;

class HostileReporterTest : public ::testing::Test {
 protected:
  HostileReporterTest()
      : core_(std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_)) {}

  // The real job: pod-0 (it hosts the coordinator) and pod-1, in `round`.
  void RealReports(uint64_t round) {
    v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, round);
    a.mutable_coordinator()->set_rounds(round);
    a.mutable_coordinator()->set_members(2);
    a.mutable_coordinator()->set_max_nodes(2);
    a.mutable_coordinator()->set_phase(v1::CoordinatorView::RUNNING);
    ASSERT_TRUE(core_->Report(a).ok());
    v1::HealthReport b = MakeReport("job", "pod-1", kIncB1, ++seq1_, round);
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
  EXPECT_EQ(Node(s, "pod-1")->report().incarnation(), ShownIncarnation(kIncB1));
  EXPECT_EQ(Node(s, "pod-1")->report().sequence(), seq1_);
  EXPECT_FALSE(Node(s, "pod-1")->stale());
}

TEST_F(HostileReporterTest, RestartedAgent_TakesItsRowThroughTheRoundThatAdmittedIt) {
  RealReports(1);
  clock_.Advance(absl::Seconds(1));
  // pod-1's agent restarts: new incarnation, joining (refused: not in a
  // round yet, the old one is still the node's).
  EXPECT_EQ(core_->Report(MakeReport("job", "pod-1", kIncB2, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  // The coordinator opens round 2 with it; node 0 says so.
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->set_members(2);
  ASSERT_TRUE(core_->Report(a).ok());
  // Within the grace the old incarnation may still report round 2 itself.
  v1::HealthReport b2 = MakeReport("job", "pod-1", kIncB2, 2, 2);
  EXPECT_EQ(core_->Report(b2).code(), absl::StatusCode::kFailedPrecondition);
  clock_.Advance(kMembershipGrace);
  b2.set_sequence(3);
  ASSERT_TRUE(core_->Report(b2).ok());
  EXPECT_EQ(Node(Status(), "pod-1")->report().incarnation(), ShownIncarnation(kIncB2));
  // Now the old one is fenced.
  v1::HealthReport old = MakeReport("job", "pod-1", kIncB1, 99, 1);
  absl::Status s = core_->Report(old);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("was replaced"));
}

// A made-up incarnation took a row 2 s after the round changed when the
// real agent had not reported the new round yet (its report slow: a send
// timeout, a busy controller), and the real agent was then fenced from its
// own row for the rest of its life. A replaced incarnation that reports
// the job's current round is the member: it takes its row back.
TEST_F(HostileReporterTest, GraceTakeover_TheRealAgentInTheRoundTakesItsRowBack) {
  RealReports(1);
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->set_members(2);
  a.mutable_coordinator()->set_max_nodes(2);
  ASSERT_TRUE(core_->Report(a).ok());
  clock_.Advance(kMembershipGrace);
  v1::HealthReport forged = MakeReport("job", "pod-1", 0xf0f0f0f0'f0f0f0f0, 1, 2);
  ASSERT_TRUE(core_->Report(forged).ok());  // the old one has not reported round 2.
  // The real agent's report of round 2 arrives.
  v1::HealthReport real = MakeReport("job", "pod-1", kIncB1, ++seq1_, 2);
  absl::Status s = core_->Report(real);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Node(Status(), "pod-1")->report().incarnation(), ShownIncarnation(kIncB1));
  // The made-up one is fenced now, and cannot take it again.
  forged.set_sequence(2);
  s = core_->Report(forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("was replaced"));
  clock_.Advance(kMembershipGrace);
  EXPECT_EQ(core_->Report(MakeReport("job", "pod-1", 0xe0e0e0e0'e0e0e0e0, 1, 2)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", kIncB1, ++seq1_, 2)).ok());
  EXPECT_EQ(Node(Status(), "pod-1")->report().sequence(), seq1_);
}

// The whole incarnation is what writes a row: a refusal named the row's,
// and GetStatus (the views) showed it, so one forged report taught a forger
// how to write any node's row.
TEST_F(HostileReporterTest, Refusals_AndAnswers_NeverNameARowsIncarnation) {
  const std::string b1 = absl::StrFormat("%016x", kIncB1);
  const std::string b2 = absl::StrFormat("%016x", kIncB2);
  RealReports(1);
  absl::Status s = core_->Report(MakeReport("job", "pod-1", 0xbad, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), Not(HasSubstr(b1)));
  EXPECT_THAT(s.message(), HasSubstr("000000000000bad"));  // the caller's own.
  // Replaced through round 2, the old incarnation is fenced: its refusal
  // does not name the new one either.
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->set_members(2);
  ASSERT_TRUE(core_->Report(a).ok());
  clock_.Advance(kMembershipGrace);
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", kIncB2, 1, 2)).ok());
  s = core_->Report(MakeReport("job", "pod-1", kIncB1, 1000, 1));
  EXPECT_THAT(s.message(), HasSubstr("was replaced"));
  EXPECT_THAT(s.message(), Not(HasSubstr(b2)));
  // Answers show what the agent's log shows (inc=b2b2b2b2), no more.
  const v1::GetStatusResponse status = Status();
  ASSERT_NE(Node(status, "pod-1"), nullptr);
  EXPECT_EQ(Node(status, "pod-1")->report().incarnation(), 0xb2b2b2b2'00000000u);
  EXPECT_EQ(Node(status, "pod-0")->report().incarnation(), 0xa0a0a0a0'00000000u);
  // Which is no incarnation to write the row with.
  v1::HealthReport forged = MakeReport("job", "pod-1", 0xb2b2b2b2'00000000, 1u << 30, 2);
  forged.set_state(v1::HealthReport::DONE);
  forged.set_exit_code(1);
  EXPECT_EQ(core_->Report(forged).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Node(Status(), "pod-1")->report().state(), v1::HealthReport::RUNNING);
}

// A node the coordinator lost is no member; a made-up incarnation of it,
// reporting the round that lost it, made it one again (counted, and its
// DONE with exit code 1 the job's verdict).
TEST_F(HostileReporterTest, LostNode_AMadeUpIncarnationCannotReviveIt) {
  RealReports(1);
  clock_.Advance(absl::Seconds(5));
  // pod-1 is lost; the coordinator goes on without it in round 2.
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
  v1::CoordinatorView* view = a.mutable_coordinator();
  view->set_rounds(2);
  view->set_members(1);
  view->set_min_nodes(1);
  view->set_max_nodes(2);
  view->set_phase(v1::CoordinatorView::RUNNING);
  view->add_lost_nodes("pod-1");
  ASSERT_TRUE(core_->Report(a).ok());
  ASSERT_TRUE(Node(Status(), "pod-1")->lost());
  clock_.Advance(kMembershipGrace);
  v1::HealthReport forged = MakeReport("job", "pod-1", 0xf0f0f0f0'f0f0f0f0, 1, 2);
  absl::Status s = core_->Report(forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("lists it lost"));
  forged.set_sequence(2);
  forged.set_state(v1::HealthReport::DONE);
  forged.set_exit_code(1);
  EXPECT_EQ(core_->Report(forged).code(), absl::StatusCode::kFailedPrecondition);
  v1::GetStatusResponse st = Status();
  EXPECT_TRUE(Node(st, "pod-1")->lost());
  EXPECT_EQ(st.summary().nodes_lost(), 1);
  EXPECT_EQ(st.summary().state(), v1::JobSummary::ACTIVE);
  // The real pod-1, restarted, is taken once the coordinator lets it join
  // a later round (and no longer lists it lost).
  a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 3);
  *a.mutable_coordinator() = *view;
  a.mutable_coordinator()->set_rounds(3);
  a.mutable_coordinator()->set_members(2);
  a.mutable_coordinator()->clear_lost_nodes();
  ASSERT_TRUE(core_->Report(a).ok());
  ASSERT_TRUE(core_->Report(MakeReport("job", "pod-1", kIncB2, 1, 3)).ok());
  st = Status();
  EXPECT_FALSE(Node(st, "pod-1")->lost());
  EXPECT_EQ(st.summary().nodes_lost(), 0);
  EXPECT_EQ(st.summary().nodes_fresh(), 2);
}

// A finished job's record is history: a made-up incarnation of its lost
// node (through the job's last round) or a new node wrote a failed worker
// into it, and the succeeded job showed a failure and its "root cause".
TEST_F(HostileReporterTest, FinishedJob_NoNewIncarnationOrNodeRewritesIt) {
  // A job whose coordinator sends no view (`trainlet coordinator`).
  for (const char* id : {"pod-0", "pod-1", "pod-2"}) {
    ASSERT_TRUE(core_->Report(MakeReport("job", id, kIncA0, 1, 1)).ok());
  }
  // pod-2 dies; the others go on in round 2 and finish.
  for (uint64_t seq = 2; seq < 22; ++seq) {
    clock_.Advance(absl::Seconds(1));
    for (const char* id : {"pod-0", "pod-1"}) {
      ASSERT_TRUE(core_->Report(MakeReport("job", id, kIncA0, seq, 2)).ok());
    }
    core_->Sweep();
  }
  for (const char* id : {"pod-0", "pod-1"}) {
    v1::HealthReport done = MakeReport("job", id, kIncA0, 30, 2);
    done.set_state(v1::HealthReport::DONE);
    done.set_exit_code(0);
    ASSERT_TRUE(core_->Report(done).ok());
  }
  const v1::JobSummary before = Status().summary();
  ASSERT_EQ(before.state(), v1::JobSummary::SUCCEEDED);
  ASSERT_TRUE(Node(Status(), "pod-2")->lost());
  ASSERT_EQ(before.failures(), 1);  // pod-2's loss ended round 1.
  ASSERT_EQ(before.root_cause().node_id(), "pod-2");
  clock_.Advance(absl::Seconds(30));
  // A made-up incarnation of the lost node, through the job's last round.
  v1::HealthReport forged = MakeReport("job", "pod-2", 0xf0f0f0f0'f0f0f0f0, 1, 2);
  AddWorker(&forged, 0, 4, v1::WorkerHealth::FAILED, 1);
  absl::Status s = core_->Report(forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("finished"));
  forged.set_sequence(2);
  forged.set_state(v1::HealthReport::DONE);
  forged.set_exit_code(1);
  EXPECT_EQ(core_->Report(forged).code(), absl::StatusCode::kFailedPrecondition);
  // A new node: running is refused; done is a late goodbye, no cause.
  forged.set_node_id("pod-9");
  forged.set_state(v1::HealthReport::RUNNING);
  EXPECT_EQ(core_->Report(forged).code(), absl::StatusCode::kFailedPrecondition);
  forged.set_state(v1::HealthReport::DONE);
  EXPECT_TRUE(core_->Report(forged).ok());
  const v1::GetStatusResponse st = Status();
  EXPECT_EQ(st.summary().state(), v1::JobSummary::SUCCEEDED);
  EXPECT_EQ(st.summary().failures(), before.failures());
  EXPECT_EQ(st.summary().root_cause().DebugString(), before.root_cause().DebugString());
  EXPECT_TRUE(Node(st, "pod-2")->lost());
  EXPECT_EQ(st.summary().nodes_lost(), 1);
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
    v1::HealthReport forged = MakeReport("job", "pod-1", kIncB1, ++seq1_, round);
    absl::Status s = core_->Report(forged);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << round;
    EXPECT_THAT(s.message(), HasSubstr("rounds ahead"));
  }
  // An event of a far round, and a view from another node, move nothing.
  v1::HealthReport sly = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
  AddEvent(&sly, v1::ReportEvent::RESTART, 1, 1 + kMaxRoundStep, "forged restart");
  sly.mutable_coordinator()->set_rounds(1 + kMaxRoundStep);
  ASSERT_TRUE(core_->Report(sly).ok());
  EXPECT_EQ(Status().summary().round(), 1u);
  EXPECT_EQ(Status().summary().restarts(), 0);
  // The real restart is recorded.
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
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

// A member's own round may run 4 ahead of the job's (kept in its row,
// moving nothing); a RESTART event of that round, let through because it
// is the report's own round, took the next restarts' place: the real
// restart into round 2 was "recorded already", its cause the forged one.
TEST_F(HostileReporterTest, RestartEventOfAMembersRoundAhead_PreemptsNoRealRestart) {
  RealReports(1);
  const uint64_t ahead = 1 + kMaxRoundStep;
  v1::HealthReport sly = MakeReport("job", "pod-1", kIncB1, ++seq1_, ahead);
  AddEvent(&sly, v1::ReportEvent::RESTART, 1, ahead, "forged restart");
  ASSERT_TRUE(core_->Report(sly).ok());
  EXPECT_EQ(Status().summary().restarts(), 0);
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport a = MakeReport("job", "pod-0", kIncA0, ++seq0_, 2);
  a.mutable_coordinator()->set_rounds(2);
  a.mutable_coordinator()->set_members(2);
  v1::RestartReason* rr = a.mutable_coordinator()->add_restarts();
  rr->set_round(2);
  rr->set_reason("worker rank 1 exited with code 3 (restart 1 of 3)");
  ASSERT_TRUE(core_->Report(a).ok());
  const v1::GetStatusResponse s = Status();
  EXPECT_EQ(s.summary().round(), 2u);
  EXPECT_EQ(s.summary().restarts(), 1);
  ASSERT_EQ(s.rounds_size(), 2);
  EXPECT_THAT(s.rounds(1).restart_cause(), HasSubstr("restart 1 of 3"));
  for (const v1::HistoryEntry& e : s.history()) EXPECT_NE(e.cause(), "forged restart");
}

// C1: an event dated in the year 3000 was never aged out.
TEST_F(HostileReporterTest, FutureEventTime_IsClampedToTheControllersClock) {
  RealReports(1);
  v1::HealthReport r = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
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

// A progress line "written" 292 million years ago (age_ms near 2^63, which
// the bounds allow) made the series' first point; the next one overflowed
// the spacing and the job's series never had another point.
TEST_F(HostileReporterTest, ProgressAge_IsClampedLikeEventTimes_TheSeriesGoesOn) {
  const absl::Time start = clock_.Now();
  v1::HealthReport r = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
  testing::SetProgress(&r, 10, "2.5");
  r.mutable_progress()->set_age_ms(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(core_->Report(r).ok());
  for (int i = 1; i <= 3; ++i) {
    clock_.Advance(absl::Seconds(6));
    r = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
    testing::SetProgress(&r, 10 + 60 * i, "2.0");
    ASSERT_TRUE(core_->Report(r).ok());
  }
  const v1::ProgressSeries series = Status().series();
  ASSERT_EQ(series.points_size(), 4);
  for (const v1::SeriesPoint& p : series.points()) {
    EXPECT_GE(p.at_unix_ms(), absl::ToUnixMillis(start - absl::Hours(24)));
    EXPECT_LE(p.at_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  }
  EXPECT_DOUBLE_EQ(series.points(3).steps_per_second(), 10.0);
}

// C2: one 16.6 KB report with 16 HANG events (id 0) wrote 256 KiB of
// evidence and 16 unthrottled log lines.
TEST_F(HostileReporterTest, EventFlood_SixteenHangs_OneEvidenceAndTheRateLimit) {
  RealReports(1);
  const std::string evidence(kMaxHangEvidenceLength, 'e');
  v1::HealthReport flood = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
  flood.set_hang_evidence(evidence);
  for (int i = 0; i < kMaxEvents; ++i) AddEvent(&flood, v1::ReportEvent::HANG, 0, 1, "hung");
  ASSERT_TRUE(ValidateHealthReport(flood).ok());
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), 0);  // effectful events need ids.

  // With ids, the same event under 16 ids is one.
  flood = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
  flood.set_hang_evidence(evidence);
  for (int i = 1; i <= kMaxEvents; ++i) AddEvent(&flood, v1::ReportEvent::HANG, i, 1, "hung");
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), 1);

  // 16 different ones: the node's allowance (8), one evidence per report.
  flood = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
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
  flood = MakeReport("job", "pod-1", kIncB1, ++seq1_, 1);
  AddEvent(&flood, v1::ReportEvent::HANG, 200, 1, "hung again");
  AddEvent(&flood, v1::ReportEvent::HANG, 201, 1, "and again");
  ASSERT_TRUE(core_->Report(flood).ok());
  EXPECT_EQ(Status().summary().hangs(), kNodeEventBurst + 1);
  // The other node's events are its own.
  v1::HealthReport other = MakeReport("job", "pod-0", kIncA0, ++seq0_, 1);
  AddEvent(&other, v1::ReportEvent::HANG, 1, 1, "pod-0 hung");
  ASSERT_TRUE(core_->Report(other).ok());
  EXPECT_EQ(Status().summary().hangs(), kNodeEventBurst + 2);
}

// Counts what the core hands its sink.
class CountingSink : public HistorySink {
 public:
  absl::Status Append(const HistoryBatch& batch) override {
    for (const auto& [id, record] : batch.jobs) {
      ++records;
      bytes += static_cast<int64_t>(record.ByteSizeLong());
      largest = std::max<int64_t>(largest, static_cast<int64_t>(record.ByteSizeLong()));
      last_round = record.summary().round();
    }
    return absl::OkStatus();
  }
  int records = 0;
  int64_t bytes = 0;
  int64_t largest = 0;
  uint64_t last_round = 0;
};

// A job's summary was written at once on every round change, and held
// every failed worker of 256 nodes: reports of 1,024 failed workers that
// each moved the job's round (a job without a coordinator view trusts its
// agents with it) wrote a summary of megabytes per report.
TEST_F(HostileReporterTest, SummaryWrites_AreBoundedInSizeAndRate) {
  CountingSink sink;
  ControllerCore core(ControllerOptions{}, &clock_, &sink);
  const std::string text(kMaxTextLength, 'f');
  v1::HealthReport r;
  for (int n = 0; n < kNodesStored; ++n) {
    r = MakeReport("job", absl::StrCat("pod-", n), kIncA0, 1, 1);
    r.set_last_failure(text);
    // As many failed workers as the report bound lets through.
    for (int w = 0; w < kMaxWorkers; ++w) AddWorker(&r, w, w, v1::WorkerHealth::FAILED, 137);
    TrimToLimits(&r);
    ASSERT_TRUE(core.Report(r).ok()) << n << ": " << r.ByteSizeLong();
  }
  // One node moves the round with every report, 100 times in a second.
  for (uint64_t i = 0; i < 100; ++i) {
    clock_.Advance(absl::Milliseconds(10));
    r.set_sequence(2 + i);
    r.set_round(2 + i);
    ASSERT_TRUE(core.Report(r).ok()) << i;
  }
  core.Sweep();
  EXPECT_LE(sink.largest, kMaxJobRecordBytes);
  EXPECT_LE(sink.records, 4);
  EXPECT_EQ(core.GetStatus("job")->summary().round(), 101u);
  // What was held back is saved within a sweep or two.
  clock_.Advance(absl::Seconds(2));
  core.Sweep();
  core.Sweep();
  EXPECT_LE(sink.records, 5);
  EXPECT_EQ(sink.last_round, 101u);
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

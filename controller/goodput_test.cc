// The goodput of a job (goodput.h) as the controller's core keeps it, driven
// by reports on a simulated clock: the phases partition the wall time, each
// restart's record has the durations the job's totals add up.
#include "controller/goodput.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "common/clock.h"
#include "controller/controller_core.h"
#include "controller/testing/core_reports.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using testing::AddWorker;
using testing::MakeReport;
using testing::RecordingSink;

int64_t Sum(const v1::Goodput& g) {
  return g.productive_ms() + g.startup_ms() + g.waiting_ms() + g.detection_ms() + g.restart_ms() +
         g.rewarm_ms() + g.redone_ms();
}

class GoodputTest : public ::testing::Test {
 protected:
  GoodputTest() : core_(std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_)) {
    start_ = clock_.Now();
  }

  // A report of `node` (its own sequence) in `round` and `state`, of a job
  // that needs two nodes.
  v1::HealthReport Report(const std::string& node, uint64_t round,
                          v1::HealthReport::AgentState state) {
    v1::HealthReport r = MakeReport("job", node, Incarnation(node), ++seq_[node], round);
    r.set_state(state);
    r.set_min_nodes(2);
    r.set_max_nodes(2);
    r.set_node_rank(node == "pod-0" ? 0 : 1);
    return r;
  }
  uint64_t Incarnation(const std::string& node) {
    return incarnations_[node] + (node == "pod-0" ? 100 : 200);
  }
  static void Step(v1::HealthReport* r, int64_t step, absl::Duration age,
                   std::optional<int64_t> first = std::nullopt,
                   absl::Duration first_age = absl::ZeroDuration()) {
    v1::Progress* p = r->mutable_progress();
    p->set_known(true);
    p->set_step(step);
    p->set_age_ms(absl::ToInt64Milliseconds(age));
    if (first.has_value()) {
      p->set_first_step(*first);
      p->set_first_age_ms(absl::ToInt64Milliseconds(first_age));
    }
  }
  // The failing node's RESTART event of round 2: rank 3 killed at
  // `failed` (on the agent's clock).
  static void AddRankThreeKilled(v1::HealthReport* r, absl::Time failed) {
    v1::ReportEvent* e = r->add_events();
    e->set_kind(v1::ReportEvent::RESTART);
    e->set_round(2);
    e->set_id(1);
    e->set_cause("local worker 1 exited with code 137");
    e->set_failed_rank(3);
    e->set_failed_exit_code(137);
    e->set_failed_unix_ms(absl::ToUnixMillis(failed));
  }
  void Send(const v1::HealthReport& r) { ASSERT_TRUE(core_->Report(r).ok()) << r.DebugString(); }
  // Both nodes join and run round 1; their first step is at start_ + 4 s.
  void RunFirstRound() {
    Send(Report("pod-0", 0, v1::HealthReport::JOINING));  // alone: too few nodes.
    clock_.Advance(absl::Seconds(1));
    Send(Report("pod-1", 0, v1::HealthReport::JOINING));
    clock_.Advance(absl::Seconds(1));
    Send(Report("pod-0", 1, v1::HealthReport::RUNNING));
    Send(Report("pod-1", 1, v1::HealthReport::RUNNING));
    clock_.Advance(absl::Seconds(3));
    v1::HealthReport r = Report("pod-0", 1, v1::HealthReport::RUNNING);
    Step(&r, 1, absl::Seconds(1), 1, absl::Seconds(1));
    Send(r);
  }
  v1::Goodput Goodput() {
    auto s = core_->GetStatus("job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s->summary().goodput();
  }
  v1::RoundInfo Round(uint64_t round) {
    auto s = core_->GetStatus("job");
    EXPECT_TRUE(s.ok()) << s.status();
    for (const v1::RoundInfo& r : s->rounds()) {
      if (r.round() == round) return r;
    }
    ADD_FAILURE() << "no round " << round;
    return {};
  }
  // The phases add up to the wall time, which is the job's age (or life).
  void ExpectPartition(absl::Time end) {
    const v1::Goodput g = Goodput();
    EXPECT_EQ(Sum(g), g.wall_ms());
    EXPECT_EQ(g.wall_ms(), absl::ToInt64Milliseconds(end - start_));
    EXPECT_DOUBLE_EQ(g.ettr(), static_cast<double>(g.productive_ms()) / g.wall_ms());
  }

  SimulatedClock clock_;
  RecordingSink sink_;
  std::unique_ptr<ControllerCore> core_;
  absl::Time start_;
  std::map<std::string, uint64_t> seq_;
  std::map<std::string, uint64_t> incarnations_;
};

TEST_F(GoodputTest, StartUp_WaitsForMinNodesThenRunsToTheFirstStep) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(10));
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::PRODUCTIVE);
  EXPECT_EQ(g.waiting_ms(), 1000);  // pod-0 alone, min 2.
  EXPECT_EQ(g.startup_ms(), 3000);  // both there, to the first step (start_ + 4 s).
  EXPECT_EQ(g.productive_ms(), 11000);
  EXPECT_EQ(g.restart_ms() + g.detection_ms() + g.rewarm_ms() + g.redone_ms(), 0);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, KillAndRestart_RecordsEachPhaseAndTheRedoneSteps) {
  RunFirstRound();                    // productive from start_ + 4 s.
  clock_.Advance(absl::Seconds(16));  // start_ + 21 s.
  // pod-1's rank 3 was killed at start_ + 20 s, at step 40.
  v1::HealthReport failed = Report("pod-1", 1, v1::HealthReport::STOPPING);
  AddWorker(&failed, 1, 3, v1::WorkerHealth::FAILED, 137)
      ->set_exited_unix_ms(absl::ToUnixMillis(start_ + absl::Seconds(20)));
  Step(&failed, 40, absl::Seconds(1));
  Send(failed);
  // The restart, decided at start_ + 22 s, reaches the controller at 23 s.
  clock_.Advance(absl::Seconds(2));
  v1::HealthReport restart = Report("pod-0", 2, v1::HealthReport::JOINING);
  v1::ReportEvent* e = restart.add_events();
  e->set_kind(v1::ReportEvent::RESTART);
  e->set_round(2);
  e->set_id(1);
  e->set_cause("rank 3 on pod-1 was killed by signal 9");
  e->set_at_unix_ms(absl::ToUnixMillis(start_ + absl::Seconds(22)));
  Send(restart);
  EXPECT_EQ(Goodput().phase(), v1::Goodput::RESTART);
  // Workers run again at start_ + 25 s.
  clock_.Advance(absl::Seconds(2));
  Send(Report("pod-0", 2, v1::HealthReport::RUNNING));
  Send(Report("pod-1", 2, v1::HealthReport::RUNNING));
  EXPECT_EQ(Goodput().phase(), v1::Goodput::REWARM);
  // Their first step (31: resumed from the checkpoint at 30) at 28 s.
  clock_.Advance(absl::Seconds(5));  // 30 s.
  v1::HealthReport stepping = Report("pod-0", 2, v1::HealthReport::RUNNING);
  Step(&stepping, 32, absl::ZeroDuration(), 31, absl::Seconds(2));
  Send(stepping);
  EXPECT_EQ(Goodput().phase(), v1::Goodput::REDONE);
  // Past the failure's step 40: step 42 at 40 s, so 40 at 28 + 12 * 9/11 s.
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport past = Report("pod-0", 2, v1::HealthReport::RUNNING);
  Step(&past, 42, absl::ZeroDuration());
  Send(past);
  clock_.Advance(absl::Seconds(5));

  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::PRODUCTIVE);
  EXPECT_EQ(g.detection_ms(), 2000);
  EXPECT_EQ(g.restart_ms(), 3000);
  EXPECT_EQ(g.rewarm_ms(), 3000);
  EXPECT_EQ(g.redone_ms(), 9818);
  EXPECT_EQ(g.productive_ms(), 16000 + (45000 - 37818));
  ExpectPartition(clock_.Now());

  // The restart's record: the same numbers, who failed, the steps.
  const v1::RoundInfo round2 = Round(2);
  ASSERT_TRUE(round2.has_restart());
  const v1::RestartTimes& t = round2.restart();
  EXPECT_EQ(round2.restart_cause(), "rank 3 on pod-1 was killed by signal 9");
  EXPECT_EQ(t.node_id(), "pod-1");
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.failed_unix_ms(), absl::ToUnixMillis(start_ + absl::Seconds(20)));
  EXPECT_EQ(t.detection_ms(), g.detection_ms());
  EXPECT_EQ(t.restart_ms(), g.restart_ms());
  EXPECT_EQ(t.rewarm_ms(), g.rewarm_ms());
  EXPECT_EQ(t.redone_ms(), g.redone_ms());
  EXPECT_EQ(t.failed_at_step(), 40);
  EXPECT_EQ(t.resumed_from_step(), 30);
  EXPECT_EQ(t.redone_steps(), 10);
  EXPECT_TRUE(t.done());
  EXPECT_FALSE(Round(1).has_restart());
}

TEST_F(GoodputTest, FailingNodesRestartEvent_NamesWhoFailedAndMovesDetectionBack) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(16));  // start_ + 21 s.
  // pod-0 reaches round 2 first: no cause, the failure taken as now.
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));
  EXPECT_EQ(Goodput().detection_ms(), 0);
  // pod-1's report of round 2 (its failed round's coalesced away): the
  // RESTART event names its rank 3, exited at start_ + 19 s.
  clock_.Advance(absl::Seconds(1));
  v1::HealthReport r = Report("pod-1", 2, v1::HealthReport::JOINING);
  AddRankThreeKilled(&r, start_ + absl::Seconds(19));
  Send(r);
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.detection_ms(), 2000);
  EXPECT_EQ(g.productive_ms(), 15000);
  const v1::RoundInfo round2 = Round(2);
  EXPECT_EQ(round2.restart().node_id(), "pod-1");
  EXPECT_EQ(round2.restart().rank(), 3);
  EXPECT_EQ(round2.restart().detection_ms(), 2000);
  EXPECT_EQ(round2.restart().failed_unix_ms(), absl::ToUnixMillis(start_ + absl::Seconds(19)));
  EXPECT_EQ(Round(1).ended_by().kind(), v1::RootCause::WORKER_FAILED);
  EXPECT_EQ(Round(1).ended_by().exit_code(), 137);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, AnAgentsClockOffByMinutes_MovesNoBoundary) {
  // pod-1's wall clock is 10 minutes behind the controller's (no NTP): its
  // times are read against its report's own send time.
  for (const absl::Duration off : {absl::Minutes(-10), absl::Minutes(10)}) {
    SCOPED_TRACE(absl::FormatDuration(off));
    core_ = std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_);
    seq_.clear();
    ++incarnations_["pod-0"];
    ++incarnations_["pod-1"];
    start_ = clock_.Now();
    RunFirstRound();                    // productive from start_ + 4 s.
    clock_.Advance(absl::Seconds(16));  // start_ + 21 s.
    Send(Report("pod-0", 2, v1::HealthReport::JOINING));
    clock_.Advance(absl::Seconds(1));
    v1::HealthReport r = Report("pod-1", 2, v1::HealthReport::JOINING);
    r.set_sent_unix_ms(absl::ToUnixMillis(clock_.Now() + off));
    AddRankThreeKilled(&r, start_ + absl::Seconds(19) + off);
    Send(r);
    const v1::Goodput g = Goodput();
    EXPECT_EQ(g.detection_ms(), 2000);
    EXPECT_EQ(g.productive_ms(), 15000);
    EXPECT_EQ(Round(2).restart().failed_unix_ms(), absl::ToUnixMillis(start_ + absl::Seconds(19)));
    EXPECT_EQ(Round(1).ended_by().at_unix_ms(), absl::ToUnixMillis(start_ + absl::Seconds(19)));
    ExpectPartition(clock_.Now());
  }
}

TEST_F(GoodputTest, AJobWhoseNodesAllWentSilent_IsCountedToItsLastReport) {
  RunFirstRound();  // productive from start_ + 4 s; the last report at + 5 s.
  const absl::Time last = clock_.Now();
  // Its pods are deleted (no verdict): an hour later the job is STALE, and
  // its figures are those of its last report, not an hour of "productive"
  // that nobody saw (an ETTR creeping to 100% on /metrics).
  clock_.Advance(absl::Hours(1));
  core_->Sweep();
  auto s = core_->GetStatus("job");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->summary().state(), v1::JobSummary::STALE);
  v1::Goodput g = Goodput();
  EXPECT_EQ(g.wall_ms(), 5000);
  EXPECT_EQ(g.productive_ms(), 1000);
  EXPECT_EQ(Sum(g), g.wall_ms());
  // A report again (the controller was cut off, the job went on): the open
  // phase goes on through the gap, as documented.
  v1::HealthReport r = Report("pod-0", 1, v1::HealthReport::RUNNING);
  Step(&r, 9000, absl::ZeroDuration());
  Send(r);
  g = Goodput();
  EXPECT_EQ(g.productive_ms(), absl::ToInt64Milliseconds(clock_.Now() - last) + 1000);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, HungWorker_DetectionStartsAtTheRoundsLastStep) {
  RunFirstRound();                   // productive from start_ + 4 s.
  clock_.Advance(absl::Seconds(5));  // start_ + 10 s: step 30, then nothing.
  v1::HealthReport last = Report("pod-1", 1, v1::HealthReport::RUNNING);
  Step(&last, 30, absl::ZeroDuration());
  Send(last);
  // Declared hung 30 s later; the restart a second after.
  clock_.Advance(absl::Seconds(30));
  v1::HealthReport hung = Report("pod-1", 1, v1::HealthReport::STOPPING);
  AddWorker(&hung, 0, 2, v1::WorkerHealth::HUNG);
  Step(&hung, 30, absl::Seconds(30));
  Send(hung);
  clock_.Advance(absl::Seconds(1));
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.productive_ms(), 6000);
  EXPECT_EQ(g.detection_ms(), 31000);
  EXPECT_EQ(Round(2).restart().failed_at_step(), 30);
  EXPECT_EQ(Round(2).restart().rank(), 2);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, LateReportOfTheFailedRound_RaisesTheFailuresStep) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(5));
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));
  // pod-1's last word of round 1 comes after the restart.
  v1::HealthReport late = Report("pod-1", 1, v1::HealthReport::STOPPING);
  Step(&late, 17, absl::Seconds(1));
  Send(late);
  EXPECT_EQ(Round(2).restart().failed_at_step(), 17);
}

TEST_F(GoodputTest, TooFewNodesDuringARestart_IsWaitingInTheRestartsRecord) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(5));
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));  // pod-1 is gone.
  EXPECT_EQ(Goodput().phase(), v1::Goodput::RESTART);
  // pod-1 stays silent past its staleness window (15 s): too few nodes.
  for (int i = 1; i <= 20; ++i) {
    clock_.Advance(absl::Seconds(1));
    if (i % 5 == 0) Send(Report("pod-0", 2, v1::HealthReport::JOINING));
    core_->Sweep();
  }
  EXPECT_EQ(Goodput().phase(), v1::Goodput::WAITING);
  const absl::Time waiting_since = absl::FromUnixMillis(Goodput().phase_since_unix_ms());
  // A new pod-1 runs round 2 with pod-0 30 s later.
  clock_.Advance(absl::Seconds(30));
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));
  ++incarnations_["pod-1"];
  seq_["pod-1"] = 0;
  Send(Report("pod-1", 2, v1::HealthReport::RUNNING));
  EXPECT_EQ(Goodput().phase(), v1::Goodput::REWARM);
  const v1::RestartTimes t = Round(2).restart();
  EXPECT_EQ(t.waiting_ms(), absl::ToInt64Milliseconds(clock_.Now() - waiting_since));
  EXPECT_GE(t.waiting_ms(), 30000);
  EXPECT_EQ(Goodput().waiting_ms(), 1000 + t.waiting_ms());
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, PreflightExclusion_IsWaiting) {
  v1::HealthReport a = Report("pod-0", 0, v1::HealthReport::JOINING);
  Send(a);
  clock_.Advance(absl::Seconds(1));
  v1::HealthReport b = Report("pod-1", 0, v1::HealthReport::JOINING);
  testing::SetPreflight(&b, 1, {"dns"});
  Send(b);
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(Goodput().phase(), v1::Goodput::WAITING);
  // Its next preflight passes.
  v1::HealthReport fixed = Report("pod-1", 0, v1::HealthReport::JOINING);
  testing::SetPreflight(&fixed, 1);
  Send(fixed);
  clock_.Advance(absl::Seconds(2));
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::STARTUP);
  EXPECT_EQ(g.waiting_ms(), 5000);
  EXPECT_EQ(g.startup_ms(), 2000);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, ControllerRestartMidRestart_KeepsThePhasesAndTheOpenOne) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport failed = Report("pod-1", 1, v1::HealthReport::STOPPING);
  AddWorker(&failed, 0, 2, v1::WorkerHealth::FAILED, 1);
  Step(&failed, 20, absl::ZeroDuration());
  Send(failed);
  Send(Report("pod-0", 2, v1::HealthReport::JOINING));
  clock_.Advance(absl::Seconds(2));
  Send(Report("pod-0", 2, v1::HealthReport::RUNNING));  // re-warming.
  clock_.Advance(absl::Seconds(1));
  core_->Flush();
  const v1::Goodput before = Goodput();

  // The controller is away 30 s; the next one takes what the store kept.
  core_ = std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, &sink_);
  core_->Restore(sink_.Stored());
  clock_.Advance(absl::Seconds(30));
  v1::Goodput after = Goodput();
  EXPECT_EQ(after.phase(), v1::Goodput::REWARM);
  EXPECT_EQ(after.rewarm_ms(), before.rewarm_ms() + 30000);
  EXPECT_EQ(after.productive_ms(), before.productive_ms());
  EXPECT_EQ(Round(2).restart().rewarm_ms(), after.rewarm_ms());
  ExpectPartition(clock_.Now());

  // The agents report again: the first step ends the re-warm, 5 s back.
  v1::HealthReport stepping = Report("pod-0", 2, v1::HealthReport::RUNNING);
  Step(&stepping, 25, absl::ZeroDuration(), 21, absl::Seconds(5));
  Send(stepping);
  after = Goodput();
  EXPECT_EQ(after.phase(), v1::Goodput::PRODUCTIVE);  // nothing to redo: resumed at 20.
  EXPECT_EQ(Round(2).restart().resumed_from_step(), 20);
  EXPECT_EQ(Round(2).restart().redone_steps(), 0);
  EXPECT_EQ(after.productive_ms(), before.productive_ms() + 5000);
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, MissingReports_ThePhaseGoesOnAndTheLatestLineStandsForTheFirst) {
  Send(Report("pod-0", 1, v1::HealthReport::RUNNING));
  Send(Report("pod-1", 1, v1::HealthReport::RUNNING));
  // No report for a minute, then one from an agent that sends no first
  // step: its latest line, written 20 s ago, ends the start-up.
  clock_.Advance(absl::Minutes(1));
  core_->Sweep();
  EXPECT_EQ(Goodput().phase(), v1::Goodput::WAITING) << "both went silent: too few nodes";
  v1::HealthReport r = Report("pod-0", 1, v1::HealthReport::RUNNING);
  Step(&r, 300, absl::Seconds(20));
  Send(r);
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::PRODUCTIVE);
  EXPECT_EQ(g.productive_ms(), 0) << "the waiting phase opened after the line was written";
  ExpectPartition(clock_.Now());
}

TEST_F(GoodputTest, HostileReports_AreBoundedAndThePhasesStillPartition) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(10));
  // A first step "written" years ago, an age at the limit, a step at the
  // top of its range: clamped into the open phase.
  v1::HealthReport r = Report("pod-1", 1, v1::HealthReport::RUNNING);
  Step(&r, std::numeric_limits<int64_t>::max(), absl::Hours(24 * 365 * 100), 0,
       absl::Hours(24 * 365 * 100));
  Send(r);
  // An older report of the same incarnation (out of order): ignored.
  v1::HealthReport old = MakeReport("job", "pod-1", Incarnation("pod-1"), 1, 1);
  Step(&old, 3, absl::ZeroDuration());
  Send(old);
  // A restart whose event is dated in the future and the failure long ago.
  clock_.Advance(absl::Seconds(5));
  v1::HealthReport restart = Report("pod-0", 2, v1::HealthReport::JOINING);
  v1::ReportEvent* e = restart.add_events();
  e->set_kind(v1::ReportEvent::RESTART);
  e->set_round(2);
  e->set_id(1);
  e->set_at_unix_ms(std::numeric_limits<int64_t>::max() / 2);
  Send(restart);
  clock_.Advance(absl::Seconds(5));
  Send(Report("pod-0", 2, v1::HealthReport::RUNNING));
  v1::HealthReport stepping = Report("pod-0", 2, v1::HealthReport::RUNNING);
  Step(&stepping, 1, absl::ZeroDuration(), -5, absl::Hours(1));
  Send(stepping);
  clock_.Advance(absl::Seconds(5));
  const v1::Goodput g = Goodput();
  for (int64_t ms : {g.productive_ms(), g.startup_ms(), g.waiting_ms(), g.detection_ms(),
                     g.restart_ms(), g.rewarm_ms(), g.redone_ms()}) {
    EXPECT_GE(ms, 0);
  }
  ExpectPartition(clock_.Now());
  // The failure's step (a lie) is never reached again: the rest is redone,
  // which still adds up.
  EXPECT_EQ(g.phase(), v1::Goodput::REDONE);
}

TEST_F(GoodputTest, Verdict_EndsTheTimelineAndAFailureIsDetection) {
  RunFirstRound();
  clock_.Advance(absl::Seconds(10));
  v1::HealthReport a = Report("pod-0", 1, v1::HealthReport::DONE);
  a.set_exit_code(1);
  AddWorker(&a, 0, 0, v1::WorkerHealth::FAILED, 1)
      ->set_exited_unix_ms(absl::ToUnixMillis(clock_.Now() - absl::Seconds(2)));
  Send(a);
  v1::HealthReport b = Report("pod-1", 1, v1::HealthReport::DONE);
  b.set_exit_code(1);
  Send(b);
  const absl::Time ended = clock_.Now();
  clock_.Advance(absl::Minutes(5));
  const v1::Goodput g = Goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::ENDED);
  EXPECT_EQ(g.detection_ms(), 2000);
  ExpectPartition(ended);
}

// The ledger alone: a boundary before the open phase began is clamped to it.
TEST(GoodputLedgerTest, BoundariesNeverGoBackPastTheOpenPhase) {
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  GoodputLedger g;
  g.Start(t0, /*waiting=*/false);
  g.FirstRound(t0 + absl::Seconds(1));
  ASSERT_TRUE(
      g.Progress(1, 5, t0 + absl::Seconds(3), 1, t0 + absl::Seconds(2), t0 + absl::Seconds(4)));
  // A failure "before" the first step: detection starts at the first step.
  g.Restart(2, t0, t0 + absl::Seconds(6), t0 + absl::Seconds(7));
  const v1::Goodput a = g.Answer(t0 + absl::Seconds(8));
  EXPECT_EQ(a.startup_ms(), 2000);
  EXPECT_EQ(a.productive_ms(), 0);
  EXPECT_EQ(a.detection_ms(), 4000);
  EXPECT_EQ(a.restart_ms(), 2000);
  EXPECT_EQ(a.wall_ms(), 8000);
  EXPECT_EQ(g.RestartOf(2, t0 + absl::Seconds(8))->restart_ms(), 2000);
  EXPECT_FALSE(g.RestartOf(1, t0 + absl::Seconds(8)).has_value());
}

TEST(GoodputLedgerTest, AJobThatFailsWhileRewarming_KeepsTheRestartsRecordItsOwn) {
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  auto at = [&](int s) { return t0 + absl::Seconds(s); };
  GoodputLedger g;
  g.Start(t0, /*waiting=*/false);
  g.FirstRound(t0);
  g.Progress(1, 5, at(2), 1, at(1), at(2));  // productive from 1 s.
  g.Restart(2, at(10), at(12), at(12));      // detection 2 s.
  g.WorkersRunning(at(15));                  // restart 3 s; re-warming.
  g.End(at(40), at(20));                     // the job fails for good at 20 s.
  const v1::Goodput a = g.Answer(at(40));
  EXPECT_EQ(a.detection_ms(), 2000 + 20000);  // the restart's and the final failure's
  EXPECT_EQ(a.wall_ms(), 40000);
  // The restart's record is what the restart cost: its detection is not
  // the final failure's (a restart's record never holds another failure).
  const std::optional<v1::RestartTimes> r = g.RestartOf(2, at(40));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->done());
  EXPECT_EQ(r->detection_ms(), 2000);
  EXPECT_EQ(r->restart_ms(), 3000);
  EXPECT_EQ(r->rewarm_ms(), 5000);
  // One that succeeds while re-warming: its record has the re-warm to the end.
  GoodputLedger ok;
  ok.Start(t0, /*waiting=*/false);
  ok.FirstRound(t0);
  ok.Progress(1, 5, at(2), 1, at(1), at(2));
  ok.Restart(2, at(10), at(12), at(12));
  ok.WorkersRunning(at(15));
  ok.End(at(40), std::nullopt);
  EXPECT_EQ(ok.RestartOf(2, at(40))->rewarm_ms(), 25000);
  EXPECT_EQ(ok.Answer(at(40)).rewarm_ms(), 25000);
}

// Random sequences of what reports can say, in any order, with times
// anywhere around now (fixed seeds: the same every run): the phases always
// partition the wall time, none is negative, and the restarts' records add
// up to the job's restart, re-warm and redone totals (its detection also
// holds a failed job's final one).
TEST(GoodputLedgerTest, RandomReports_PhasesPartitionAndRestartsAddUp) {
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    auto ms = [&](uint64_t n) { return absl::Milliseconds(static_cast<int64_t>(rng() % n)); };
    const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
    absl::Time now = t0;
    auto around = [&] { return now - ms(20000) + ms(3000); };
    GoodputLedger g;
    g.Start(now, rng() % 2 == 0);
    uint64_t round = 0;
    std::map<uint64_t, v1::RestartTimes> records;
    for (int i = 0; i < 60 && g.phase() != v1::Goodput::ENDED; ++i) {
      now += ms(5000);
      switch (rng() % 8) {
        case 0:
          if (round == 0) g.FirstRound(now);
          round = std::max<uint64_t>(round, 1);
          break;
        case 1: {
          if (round == 0) break;
          const uint64_t previous = g.state().restart_round();
          if (previous > 0 && g.state().restart().done()) records[previous] = g.state().restart();
          const absl::Time decided = around();
          auto r = g.Restart(++round, std::min(around(), decided), decided, now);
          if (r.has_value()) records[previous] = *r;
          break;
        }
        case 2:
          g.RefineFailure(around());
          break;
        case 3:
          g.WorkersRunning(now);
          break;
        case 4:
          g.Waiting(rng() % 2 == 0, now);
          break;
        case 5:
        case 6: {
          if (round == 0) break;
          std::optional<int64_t> first;
          if (rng() % 2 == 0) first = static_cast<int64_t>(rng() % 100);
          const absl::Time at = around();
          g.Progress(round - (rng() % 4 == 0 ? 1 : 0), static_cast<int64_t>(rng() % 100), at, first,
                     around(), now);
          break;
        }
        default:
          if (rng() % 6 == 0) {
            std::optional<absl::Time> failed;
            if (rng() % 2 == 0) failed = around();
            g.End(now, failed);
          }
      }
      const v1::Goodput a = g.Answer(now);
      ASSERT_EQ(Sum(a), a.wall_ms());
      ASSERT_EQ(a.wall_ms(), absl::ToInt64Milliseconds(now - t0));
      for (int64_t v : {a.productive_ms(), a.startup_ms(), a.waiting_ms(), a.detection_ms(),
                        a.restart_ms(), a.rewarm_ms(), a.redone_ms()}) {
        ASSERT_GE(v, 0) << a.DebugString();
      }
    }
    if (auto r = g.RestartOf(g.state().restart_round(), now)) {
      records[g.state().restart_round()] = *r;
    }
    const v1::Goodput a = g.Answer(now);
    v1::RestartTimes sum;
    for (const auto& [r, t] : records) {
      sum.set_detection_ms(sum.detection_ms() + t.detection_ms());
      sum.set_restart_ms(sum.restart_ms() + t.restart_ms());
      sum.set_rewarm_ms(sum.rewarm_ms() + t.rewarm_ms());
      sum.set_redone_ms(sum.redone_ms() + t.redone_ms());
    }
    EXPECT_LE(sum.detection_ms(), a.detection_ms());
    EXPECT_EQ(sum.restart_ms(), a.restart_ms());
    EXPECT_EQ(sum.rewarm_ms(), a.rewarm_ms());
    EXPECT_EQ(sum.redone_ms(), a.redone_ms());
  }
}

}  // namespace
}  // namespace trainlet::controller

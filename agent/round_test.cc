// The machine's bookkeeping that the executor tests (agent_test.cc) do not
// reach (the exit policy's own tests are common/exit_codes_test.cc's).
#include "agent/round.h"

#include <signal.h>

#include <csignal>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/testing/fake_rendezvous_client.h"

namespace trainlet::agent {
namespace {

TEST(RoundMachine, StartsByJoiningWithTheConfiguredTimeout) {
  SimulatedClock clock;
  RoundOptions o;
  o.me.set_node_id("n0");
  o.me.set_incarnation(7);
  o.job_id = "job";
  o.join_timeout = absl::Seconds(42);
  o.master_port = 29500;
  o.agent_store_port = 29499;
  RoundMachine m(o, &clock);
  std::vector<RoundAction> actions = m.Start();
  ASSERT_EQ(actions.size(), 1u);
  const StartJoin* join = std::get_if<StartJoin>(&actions[0]);
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->timeout, absl::Seconds(42));
  EXPECT_EQ(join->request.job_id(), "job");
  EXPECT_EQ(join->request.master_port(), 29500);
  EXPECT_EQ(join->request.agent_store_port(), 29499);
  EXPECT_EQ(m.state(), RoundState::kJoining);
  // While joining, the only deadline is the next progress line.
  EXPECT_EQ(m.NextDeadline(), clock.Now() + o.progress_log_interval);
}

// --preflight=exclude left this node out: it waits out the quarantine the
// answer names, still joining, then joins again asking for its checks.
// Node n0 joining (10m join timeout); `Excluded()` is the answer that
// leaves it out for 5m.
RoundOptions ExcludedNodeOptions() {
  RoundOptions o;
  o.me.set_node_id("n0");
  o.me.set_incarnation(7);
  o.job_id = "job";
  o.join_timeout = absl::Minutes(10);
  return o;
}
absl::Status Excluded() {
  v1::ErrorInfo info;
  info.set_reason(v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  info.set_retry_after_ms(300000);
  return rendezvous::WithErrorInfo(absl::FailedPreconditionError("node n0 left out of the round"),
                                   info);
}

TEST(RoundMachine, PreflightExcluded_WaitsTheQuarantineThenJoinsAgainRechecking) {
  SimulatedClock clock;
  RoundMachine m(ExcludedNodeOptions(), &clock);
  ASSERT_EQ(m.Start().size(), 1u);
  std::vector<RoundAction> actions = m.Handle(JoinAnswered{Excluded()});
  EXPECT_EQ(m.state(), RoundState::kJoining) << "not an ending";
  EXPECT_FALSE(m.done());
  for (const RoundAction& a : actions) EXPECT_FALSE(std::holds_alternative<StartJoin>(a));
  EXPECT_LE(m.NextDeadline(), clock.Now() + absl::Minutes(5)) << "a turn comes by then";
  clock.Advance(absl::Minutes(5) - absl::Seconds(1));
  for (const RoundAction& a : m.Handle(Tick{})) EXPECT_FALSE(std::holds_alternative<StartJoin>(a));
  clock.Advance(absl::Seconds(1));
  actions = m.Handle(Tick{});
  const StartJoin* join = nullptr;
  for (const RoundAction& a : actions) {
    if (const StartJoin* j = std::get_if<StartJoin>(&a)) join = j;
  }
  ASSERT_NE(join, nullptr) << "joins again once the quarantine is over";
  EXPECT_TRUE(join->recheck);
  EXPECT_FALSE(join->on_stream);
}

// A stop while it waits out a quarantine ends the agent at once: no Join
// call is in flight whose answer would (it used to wait forever).
TEST(RoundMachine, PreflightExcluded_ASignalDuringTheQuarantineFinishesAtOnce) {
  SimulatedClock clock;
  RoundMachine m(ExcludedNodeOptions(), &clock);
  ASSERT_EQ(m.Start().size(), 1u);
  (void)m.Handle(JoinAnswered{Excluded()});
  ASSERT_FALSE(m.done());
  const std::vector<RoundAction> actions = m.Handle(SignalReceived{SIGTERM});
  EXPECT_TRUE(m.done());
  const Finish* finish = nullptr;
  for (const RoundAction& a : actions) {
    EXPECT_FALSE(std::holds_alternative<CancelJoin>(a)) << "no Join call to cancel";
    if (const Finish* f = std::get_if<Finish>(&a)) finish = f;
  }
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->exit_code, 128 + SIGTERM);
}

TEST(RoundMachine, WaitingForTheRoundSaysSoEveryInterval) {
  SimulatedClock clock;
  RoundOptions o;
  o.progress_log_interval = absl::Seconds(10);
  RoundMachine m(o, &clock);
  m.Start();
  const absl::Time first = m.NextDeadline();
  clock.Advance(absl::Seconds(10));
  EXPECT_TRUE(m.Handle(Tick{}).empty());
  EXPECT_EQ(m.NextDeadline(), first + absl::Seconds(10));
}

// Something waits for the next Report (a preflight report, slow-node
// signals): a RUNNING Report goes at once while the round runs, and none
// before it runs.
// Node n1 of job "job".
RoundOptions NodeOneOptions() {
  RoundOptions o;
  o.me.set_node_id("n1");
  o.job_id = "job";
  return o;
}

TEST(RoundMachine, ReportDue_ARunningReportGoesAtOnce_OnlyWhileTheRoundRuns) {
  SimulatedClock clock;
  RoundMachine m(NodeOneOptions(), &clock);
  m.Start();
  for (const RoundAction& a : m.Handle(ReportDue{})) {
    EXPECT_FALSE(std::holds_alternative<SendReport>(a)) << "joining: no round to report";
  }
  m.Handle(JoinAnswered{rendezvous::testing::MakeAssignment(1, 1, 2, 2, absl::Hours(1))});
  m.Handle(WorkersStarted{absl::OkStatus()});
  ASSERT_EQ(m.state(), RoundState::kRunning);
  std::vector<RoundAction> actions = m.Handle(ReportDue{});
  ASSERT_EQ(actions.size(), 1u);
  const SendReport* report = std::get_if<SendReport>(&actions[0]);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->request.state(), v1::ReportRequest::RUNNING);
  EXPECT_EQ(report->request.round(), 1u);
}

// The Report out of turn stands for the heartbeat Report: the next one
// waits a whole interval (a round's Reports stay within the coordinator's
// cap however often slow-node signals go).
TEST(RoundMachine, ReportDue_StandsForTheHeartbeat) {
  SimulatedClock clock;
  RoundMachine m(NodeOneOptions(), &clock);
  m.Start();
  m.Handle(JoinAnswered{rendezvous::testing::MakeAssignment(1, 1, 2, 2, absl::Seconds(1))});
  m.Handle(WorkersStarted{absl::OkStatus()});
  ASSERT_EQ(m.state(), RoundState::kRunning);
  auto reports = [&](const std::vector<RoundAction>& actions) {
    int n = 0;
    for (const RoundAction& a : actions) n += std::holds_alternative<SendReport>(a);
    return n;
  };
  // The heartbeats come every second until the out-of-turn one.
  int before = 0;
  for (int i = 0; i < 3; ++i) {
    clock.Advance(absl::Seconds(1));
    before += reports(m.Handle(Tick{}));
  }
  ASSERT_GE(before, 2);
  clock.Advance(absl::Milliseconds(500));
  ASSERT_EQ(reports(m.Handle(ReportDue{})), 1);
  clock.Advance(absl::Milliseconds(600));  // past the heartbeat it replaced
  EXPECT_EQ(reports(m.Handle(Tick{})), 0);
  clock.Advance(absl::Milliseconds(500));  // a whole interval after it
  EXPECT_EQ(reports(m.Handle(Tick{})), 1);
}

// ---- Hang detection (--hang-timeout), on the simulated clock.

template <typename T>
const T* Find(const std::vector<RoundAction>& actions) {
  for (const RoundAction& a : actions) {
    if (const T* t = std::get_if<T>(&a)) return t;
  }
  return nullptr;
}

class HangTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kHangTimeout = absl::Seconds(10);

  // Round 1 running with two local workers (global ranks 2 and 3); the
  // heartbeats are far apart so that only hang deadlines come up.
  void StartRound(bool elastic = false) {
    RoundOptions o;
    o.me.set_node_id("n1");
    o.job_id = "job";
    o.hang_timeout = kHangTimeout;
    o.traceback_wait = absl::Seconds(2);
    o.elastic = elastic;
    options_ = o;
    machine_ = std::make_unique<RoundMachine>(o, &clock_);
    machine_->Start();
    std::vector<RoundAction> actions = machine_->Handle(
        JoinAnswered{rendezvous::testing::MakeAssignment(1, 1, 2, 2, absl::Hours(1))});
    ASSERT_NE(Find<OpenWatch>(actions), nullptr);
    watch_id_ = Find<OpenWatch>(actions)->watch_id;
    machine_->Handle(WorkersStarted{absl::OkStatus()});
    ASSERT_EQ(machine_->state(), RoundState::kRunning);
  }

  std::vector<RoundAction> AdvanceAndTick(absl::Duration d) {
    clock_.Advance(d);
    return machine_->Handle(Tick{});
  }

  // The local ranks whose stacks `actions` asks for.
  static std::vector<int> Requested(const std::vector<RoundAction>& actions) {
    std::vector<int> out;
    for (const RoundAction& a : actions) {
      if (const RequestTraceback* r = std::get_if<RequestTraceback>(&a))
        out.push_back(r->local_rank);
    }
    return out;
  }
  // What the executor answers CollectHangEvidence with: rank 2 (local 0)
  // sleeps outside a collective, rank 3 waits in all_reduce.
  static v1::HangReport Summaries() {
    v1::HangReport r;
    r.set_collected(true);
    v1::WorkerEvidence* w = r.add_workers();
    w->set_local_rank(0);
    w->set_stack(v1::WorkerEvidence::NOT_IN_COLLECTIVE);
    w->set_where("train.py:41 in main");
    w->set_progress_age_ms(10000);
    w = r.add_workers();
    w->set_local_rank(1);
    w->set_stack(v1::WorkerEvidence::IN_COLLECTIVE);
    w->set_where("all_reduce");
    w->set_progress_age_ms(10000);
    return r;
  }
  // Worker `local_rank` reports and goes silent: declared hung, evidence
  // taken (no stacks), summaries reported; the verdict is awaited.
  void Declare(int local_rank) {
    machine_->Handle(ProgressReported{local_rank, "step=7"});
    ASSERT_NE(Find<SendReport>(AdvanceAndTick(kHangTimeout)), nullptr);
    machine_->Handle(TracebackRequested{0, false});
    ASSERT_NE(Find<CollectHangEvidence>(machine_->Handle(TracebackRequested{1, false})), nullptr);
    ASSERT_NE(Find<SendReport>(machine_->Handle(HangEvidenceCollected{Summaries()})), nullptr);
    ASSERT_EQ(machine_->state(), RoundState::kRunning);
  }
  // The coordinator's Rejoin or JobFailed for a hang whose suspect is rank
  // `rank` (local `local`) of `node`.
  static v1::Directive Verdict(bool rejoin, const std::string& node, int rank, int local,
                               const std::string& summary) {
    v1::Directive d = rendezvous::testing::MakeDirective(1);
    v1::HangVerdict* v =
        rejoin ? d.mutable_rejoin()->mutable_hang() : d.mutable_job_failed()->mutable_hang();
    if (rejoin) {
      d.mutable_rejoin()->set_next_round(2);
      d.mutable_rejoin()->set_reason("hang: " + summary);
    } else {
      d.mutable_job_failed()->set_reason("hang: " + summary);
    }
    v->set_suspect_node_id(node);
    v->set_suspect_rank(rank);
    v->set_suspect_local_rank(local);
    v->set_summary(summary);
    return d;
  }
  static v1::Directive JobFailed() {
    v1::Directive d = rendezvous::testing::MakeDirective(1);
    d.mutable_job_failed()->set_reason("rank 2 hung");
    return d;
  }
  void Exit(int local_rank) {
    launcher::ProcessExit x;
    x.local_rank = local_rank;
    x.global_rank = 2 + local_rank;
    x.exit_code = 128 + SIGTERM;
    machine_->Handle(WorkerExited{x});
  }
  // The workers stop; returns the exit code once they are gone.
  int StopAll() {
    for (int l : {0, 1}) Exit(l);
    const std::vector<RoundAction> actions = machine_->Handle(WorkersGone{});
    const Finish* f = Find<Finish>(actions);
    return f == nullptr ? -1 : f->exit_code;
  }

  SimulatedClock clock_;
  RoundOptions options_;
  std::unique_ptr<RoundMachine> machine_;
  uint64_t watch_id_ = 0;
  std::vector<RoundAction> actions_;
};

TEST_F(HangTest, NotWatchedBeforeTheFirstProgress) {
  StartRound();
  const absl::Time heartbeat = machine_->NextDeadline();
  EXPECT_GT(heartbeat, clock_.Now() + absl::Minutes(30)) << "only the heartbeat is scheduled";
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(absl::Minutes(1))), nullptr);
  }
  EXPECT_EQ(machine_->state(), RoundState::kRunning);
  EXPECT_EQ(machine_->status().hangs, 0);
}

TEST_F(HangTest, DeclaredAtExactlyTheTimeout_TellsTheCoordinator_TakesEveryWorkersEvidence) {
  StartRound();
  clock_.Advance(absl::Seconds(3));
  const absl::Time reported = clock_.Now();
  EXPECT_TRUE(machine_->Handle(ProgressReported{1, "step=7 loss=0.5"}).empty());
  ASSERT_EQ(machine_->status().progress.size(), 1u);
  EXPECT_EQ(machine_->status().progress[0].global_rank, 3);
  EXPECT_EQ(machine_->status().progress[0].line, "step=7 loss=0.5");
  EXPECT_EQ(machine_->status().progress[0].updated, reported);
  EXPECT_EQ(machine_->NextDeadline(), reported + kHangTimeout);
  // The round's first line with a step stays (the controller's goodput).
  EXPECT_EQ(machine_->status().progress[0].first_line, "step=7 loss=0.5");
  EXPECT_EQ(machine_->status().progress[0].first_updated, reported);

  // A touch keeps the last line and counts as progress.
  EXPECT_TRUE(AdvanceAndTick(absl::Seconds(1)).empty());
  machine_->Handle(ProgressReported{1, ""});
  const absl::Time touched = clock_.Now();
  EXPECT_EQ(machine_->status().progress[0].line, "step=7 loss=0.5");
  EXPECT_EQ(machine_->status().progress[0].updates, 2);
  EXPECT_EQ(machine_->status().progress[0].first_updated, reported);
  EXPECT_EQ(machine_->NextDeadline(), touched + kHangTimeout);

  EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout - absl::Milliseconds(1))), nullptr);
  std::vector<RoundAction> actions = AdvanceAndTick(absl::Milliseconds(1));
  // The coordinator is told at once (it asks every other node), and every
  // local worker's stacks are asked for, the declared one's and the others'.
  const SendReport* declared = Find<SendReport>(actions);
  ASSERT_NE(declared, nullptr);
  EXPECT_EQ(declared->request.state(), v1::ReportRequest::RUNNING);
  EXPECT_TRUE(declared->request.hang().declared());
  EXPECT_EQ(declared->request.hang().declared_local_rank(), 1);
  EXPECT_EQ(declared->request.hang().silence_ms(), 10000);
  EXPECT_FALSE(declared->request.hang().collected());
  EXPECT_EQ(Requested(actions), (std::vector<int>{0, 1}));
  EXPECT_EQ(Find<SignalWorkers>(actions), nullptr) << "nothing is stopped yet";
  EXPECT_EQ(machine_->status().hangs, 1);

  // Not opted in: the evidence at once, of both workers.
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, false}).empty());
  actions = machine_->Handle(TracebackRequested{0, false});
  const CollectHangEvidence* evidence = Find<CollectHangEvidence>(actions);
  ASSERT_NE(evidence, nullptr);
  ASSERT_EQ(evidence->evidence.size(), 2u);
  const HangEvidence& other = evidence->evidence[0];
  EXPECT_EQ(other.global_rank, 2);
  EXPECT_FALSE(other.declared);
  EXPECT_EQ(other.silence, absl::InfiniteDuration()) << "it never reported";
  EXPECT_THAT(other.why, ::testing::HasSubstr("declared worker rank 3 hung"));
  const HangEvidence& hung = evidence->evidence[1];
  EXPECT_TRUE(hung.declared);
  EXPECT_EQ(hung.local_rank, 1);
  EXPECT_EQ(hung.global_rank, 3);
  EXPECT_EQ(hung.round, 1u);
  EXPECT_EQ(hung.silence, kHangTimeout);
  EXPECT_EQ(hung.hang_timeout, kHangTimeout);
  EXPECT_EQ(hung.last_progress, "step=7 loss=0.5");
  EXPECT_EQ(Find<SendReport>(actions), nullptr) << "not before the summaries";

  // The executor's summaries go to the coordinator; still nothing stops.
  actions = machine_->Handle(HangEvidenceCollected{Summaries()});
  const SendReport* collected = Find<SendReport>(actions);
  ASSERT_NE(collected, nullptr);
  EXPECT_EQ(collected->request.state(), v1::ReportRequest::RUNNING);
  EXPECT_TRUE(collected->request.hang().declared());
  EXPECT_TRUE(collected->request.hang().collected());
  EXPECT_EQ(collected->request.hang().workers_size(), 2);
  EXPECT_EQ(Find<SignalWorkers>(actions), nullptr);
  EXPECT_EQ(machine_->state(), RoundState::kRunning);
  EXPECT_EQ(machine_->NextDeadline(), clock_.Now() + absl::Seconds(10)) << "the verdict's wait";
}

TEST_F(HangTest, TheVerdictNamesAWorkerHere_ThisNodeExits80AndReportsTheHang) {
  StartRound();
  Declare(1);
  actions_ = machine_->Handle(DirectiveReceived{
      watch_id_, Verdict(/*rejoin=*/false, "n1", 3, 1, "suspect rank 3 on n1 (x)")});
  const HangJudged* judged = Find<HangJudged>(actions_);
  ASSERT_NE(judged, nullptr);
  EXPECT_EQ(judged->suspect_local_rank, 1);
  EXPECT_EQ(judged->summary, "suspect rank 3 on n1 (x)");
  ASSERT_NE(Find<SignalWorkers>(actions_), nullptr);
  EXPECT_EQ(machine_->status().last_failure, "hang: suspect rank 3 on n1 (x)");
  EXPECT_EQ(StopAll(), kExitWorkerHung);
}

TEST_F(HangTest, TheVerdictNamesAnotherNode_TheDeclaredWorkerWasAVictim_Exits75) {
  StartRound();
  Declare(1);
  actions_ = machine_->Handle(
      DirectiveReceived{watch_id_, Verdict(false, "n0", 0, 0, "suspect rank 0 on n0 (y)")});
  EXPECT_EQ(Find<HangJudged>(actions_), nullptr) << "n0 reports it";
  EXPECT_EQ(StopAll(), kExitPeerFailed);
}

TEST_F(HangTest, AskedByTheCoordinator_TakesTheEvidenceWithoutDeclaring_ARestartIsNoLocalFailure) {
  StartRound(/*elastic=*/true);
  machine_->Handle(ProgressReported{0, "step=3"});
  v1::Directive ask = rendezvous::testing::MakeDirective(1);
  ask.mutable_collect_evidence()->set_declared_by_node("n0");
  ask.mutable_collect_evidence()->set_declared_rank(0);
  actions_ = machine_->Handle(DirectiveReceived{watch_id_, ask});
  EXPECT_EQ(Requested(actions_), (std::vector<int>{0, 1}));
  EXPECT_EQ(Find<SendReport>(actions_), nullptr) << "nothing declared here";
  EXPECT_TRUE(machine_->Handle(DirectiveReceived{watch_id_, ask}).empty()) << "once";
  machine_->Handle(TracebackRequested{0, false});
  actions_ = machine_->Handle(TracebackRequested{1, false});
  ASSERT_NE(Find<CollectHangEvidence>(actions_), nullptr);
  EXPECT_THAT(Find<CollectHangEvidence>(actions_)->evidence[0].why,
              ::testing::HasSubstr("node n0 declared worker rank 0 hung"));
  actions_ = machine_->Handle(HangEvidenceCollected{Summaries()});
  ASSERT_NE(Find<SendReport>(actions_), nullptr);
  EXPECT_FALSE(Find<SendReport>(actions_)->request.hang().declared());
  EXPECT_TRUE(Find<SendReport>(actions_)->request.hang().collected());
  // Its own silent worker is not declared while the hang is judged.
  EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  // The coordinator goes quiet: not this node's to judge; nothing stops.
  EXPECT_TRUE(AdvanceAndTick(absl::Seconds(10)).empty());
  EXPECT_EQ(machine_->state(), RoundState::kRunning);
  // The restart names n0's worker: no local failure (no health check).
  machine_->Handle(
      DirectiveReceived{watch_id_, Verdict(/*rejoin=*/true, "n0", 0, 0, "suspect rank 0 on n0")});
  for (int l : {0, 1}) Exit(l);
  actions_ = machine_->Handle(WorkersGone{});
  ASSERT_NE(Find<StartJoin>(actions_), nullptr);
  EXPECT_FALSE(Find<StartJoin>(actions_)->after_local_failure);
}

TEST_F(HangTest, NoVerdictInTime_TheDeclaringNodeJudgesItsOwnWorkers_Exits80) {
  StartRound();
  Declare(1);  // rank 2 (local 0) is not in a collective, rank 3 is
  actions_ = AdvanceAndTick(absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_EQ(Find<HangJudged>(actions_), nullptr);
  actions_ = AdvanceAndTick(absl::Milliseconds(1));
  const HangJudged* judged = Find<HangJudged>(actions_);
  ASSERT_NE(judged, nullptr);
  EXPECT_EQ(judged->suspect_local_rank, 0);
  EXPECT_EQ(judged->summary, "suspect rank 2 on n1 (not in a collective: train.py:41 in main)");
  const SendReport* failed = Find<SendReport>(actions_);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->request.state(), v1::ReportRequest::FAILED);
  EXPECT_EQ(failed->request.exit_code(), kExitWorkerHung);
  EXPECT_EQ(failed->request.failed_local_rank(), 0);
  EXPECT_EQ(failed->request.message(), "hang: " + judged->summary);
  ASSERT_NE(Find<SignalWorkers>(actions_), nullptr);
  EXPECT_EQ(Find<SignalWorkers>(actions_)->signal, SIGTERM);
  EXPECT_EQ(machine_->state(), RoundState::kStopping);
  for (int l : {0, 1}) Exit(l);
  machine_->Handle(WorkersGone{});
  actions_ = machine_->Handle(DirectiveReceived{watch_id_, JobFailed()});
  ASSERT_NE(Find<Finish>(actions_), nullptr);
  EXPECT_EQ(Find<Finish>(actions_)->exit_code, kExitWorkerHung);
}

TEST_F(HangTest, ProgressResetsTheTimer_PerWorker) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  const absl::Time first = clock_.Now();
  EXPECT_TRUE(AdvanceAndTick(absl::Seconds(9)).empty());
  machine_->Handle(ProgressReported{0, "step=2"});
  machine_->Handle(ProgressReported{1, "step=2"});
  EXPECT_TRUE(AdvanceAndTick(absl::Seconds(9)).empty()) << "18 s after the first report";
  machine_->Handle(ProgressReported{1, "step=3"});
  // Rank 0 last reported at first + 9 s: hung at first + 19 s, not before.
  EXPECT_EQ(machine_->NextDeadline(), first + absl::Seconds(19));
  std::vector<RoundAction> actions = AdvanceAndTick(absl::Seconds(1));
  ASSERT_NE(Find<SendReport>(actions), nullptr);
  EXPECT_EQ(Find<SendReport>(actions)->request.hang().declared_local_rank(), 0);
}

// Drives the wait for local rank 0's stacks (rank 1 wrote none) the way the
// executor does: at each deadline a Tick; each CheckTraceback answered with
// `size(elapsed)`. Returns how long after the signal the evidence was
// collected, or InfiniteDuration.
absl::Duration AwaitEvidence(RoundMachine* machine, SimulatedClock* clock,
                             const std::function<int64_t(absl::Duration)>& size) {
  const absl::Time signalled = clock->Now();
  for (int i = 0; i < 1000; ++i) {
    const absl::Time next = machine->NextDeadline();
    if (next == absl::InfiniteFuture()) return absl::InfiniteDuration();
    clock->Advance(next - clock->Now());
    std::vector<RoundAction> actions = machine->Handle(Tick{});
    if (const CheckTraceback* check = Find<CheckTraceback>(actions)) {
      EXPECT_EQ(check->local_rank, 0);
      actions = machine->Handle(TracebackSize{check->local_rank, size(clock->Now() - signalled)});
    }
    if (const CollectHangEvidence* c = Find<CollectHangEvidence>(actions)) {
      EXPECT_EQ(c->evidence.size(), 2u);
      EXPECT_EQ(Find<SignalWorkers>(actions), nullptr);
      return clock->Now() - signalled;
    }
  }
  return absl::InfiniteDuration();
}

TEST_F(HangTest, SignalSentButNothingWritten_WaitsTheWholeTracebackWait) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, false}).empty());
  EXPECT_TRUE(machine_->Handle(TracebackRequested{0, true, 0}).empty());
  // The file is checked every traceback_poll, not slept on.
  EXPECT_EQ(machine_->NextDeadline(), clock_.Now() + absl::Milliseconds(20));
  EXPECT_EQ(AwaitEvidence(machine_.get(), &clock_, [](absl::Duration) { return 0; }),
            absl::Seconds(2));
}

TEST_F(HangTest, StacksWritten_TheWaitEndsOnceTheFileStopsGrowing) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, false}).empty());
  EXPECT_TRUE(machine_->Handle(TracebackRequested{0, true, 0}).empty());
  // Empty for 30 ms, 3,000 bytes at 40 ms, 5,000 from 60 ms on: complete
  // 100 ms after it last grew.
  const absl::Duration waited =
      AwaitEvidence(machine_.get(), &clock_, [](absl::Duration t) -> int64_t {
        if (t < absl::Milliseconds(40)) return 0;
        return t < absl::Milliseconds(60) ? 3000 : 5000;
      });
  EXPECT_EQ(waited, absl::Milliseconds(160));
}

TEST_F(HangTest, EveryWorkersStacks_TheWaitEndsWhenTheLastSettles) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  EXPECT_TRUE(machine_->Handle(TracebackRequested{0, true, 0}).empty());
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, true, 0}).empty());
  // Rank 0 writes at once, rank 1 at 300 ms: both settled 100 ms later.
  const absl::Time signalled = clock_.Now();
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(machine_->NextDeadline() - clock_.Now());
    actions_ = machine_->Handle(Tick{});
    std::vector<RoundAction> answers;
    for (const RoundAction& a : actions_) {
      if (const CheckTraceback* c = std::get_if<CheckTraceback>(&a)) {
        const bool written =
            c->local_rank == 0 || clock_.Now() - signalled >= absl::Milliseconds(300);
        for (RoundAction& b : machine_->Handle(TracebackSize{c->local_rank, written ? 900 : 0})) {
          answers.push_back(std::move(b));
        }
      }
    }
    if (Find<CollectHangEvidence>(answers) != nullptr) break;
  }
  EXPECT_EQ(clock_.Now() - signalled, absl::Milliseconds(400));
}

TEST_F(HangTest, TracebackFileAlreadyWritten_OnlyWhatFollowsTheSignalCounts) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, false}).empty());
  // 700 bytes from an earlier SIGUSR1 (one the user sent the agent, which
  // forwarded it); the new stacks land at 500 ms.
  EXPECT_TRUE(machine_->Handle(TracebackRequested{0, true, 700}).empty());
  EXPECT_EQ(AwaitEvidence(machine_.get(), &clock_,
                          [](absl::Duration t) -> int64_t {
                            return t < absl::Milliseconds(500) ? 700 : 2100;
                          }),
            absl::Milliseconds(600));
}

TEST_F(HangTest, StacksStillGrowingAtTheLimit_TheWaitEndsAtTracebackWait) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  EXPECT_TRUE(machine_->Handle(TracebackRequested{1, false}).empty());
  EXPECT_TRUE(machine_->Handle(TracebackRequested{0, true, 0}).empty());
  EXPECT_EQ(AwaitEvidence(machine_.get(), &clock_,
                          [](absl::Duration t) {
                            return 100 + absl::ToInt64Milliseconds(t);  // never settles
                          }),
            absl::Seconds(2));
}

TEST_F(HangTest, AWorkerThatExitedIsNotHung_AndARestartStartsAfresh) {
  StartRound(/*elastic=*/true);
  machine_->Handle(ProgressReported{0, "step=1"});
  launcher::ProcessExit x;
  x.local_rank = 0;
  x.global_rank = 2;
  x.exit_code = 0;
  machine_->Handle(WorkerExited{x});
  EXPECT_GT(machine_->NextDeadline(), clock_.Now() + absl::Minutes(30));
  EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(absl::Minutes(1))), nullptr);

  // A restart: the next round watches nothing until its workers report.
  v1::Directive d = rendezvous::testing::MakeDirective(1);
  d.mutable_rejoin()->set_next_round(2);
  machine_->Handle(DirectiveReceived{watch_id_, d});
  machine_->Handle(WorkersGone{});
  ASSERT_EQ(machine_->state(), RoundState::kJoining);
  machine_->Handle(JoinAnswered{rendezvous::testing::MakeAssignment(2, 1, 2, 2, absl::Hours(1))});
  machine_->Handle(WorkersStarted{absl::OkStatus()});
  EXPECT_TRUE(machine_->status().progress.empty());
  EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(absl::Minutes(1))), nullptr);
}

TEST_F(HangTest, AnExitedWorkerIsNotAskedForStacks_OneExitingMeanwhileHasNone) {
  StartRound();
  machine_->Handle(ProgressReported{1, "step=1"});
  actions_ = AdvanceAndTick(kHangTimeout);
  EXPECT_EQ(Requested(actions_), (std::vector<int>{0, 1}));
  machine_->Handle(TracebackRequested{1, true, 0});
  // Rank 2 (local 0) exits 0 while its stacks are awaited: it has none to
  // give; rank 3's still count.
  launcher::ProcessExit x;
  x.local_rank = 0;
  x.global_rank = 2;
  x.exit_code = 0;
  EXPECT_EQ(Find<CollectHangEvidence>(machine_->Handle(WorkerExited{x})), nullptr);
  EXPECT_EQ(Find<CollectHangEvidence>(machine_->Handle(TracebackRequested{0, false})), nullptr);
  actions_ = AdvanceAndTick(options_.traceback_wait);
  const CollectHangEvidence* c = Find<CollectHangEvidence>(actions_);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->evidence[0].exited);
  EXPECT_FALSE(c->evidence[1].exited);
}

TEST_F(HangTest, AnUnhealthyNodeLeavesAnElasticJobInsteadOfRejoining_With81) {
  StartRound(/*elastic=*/true);
  Declare(0);
  machine_->Handle(
      DirectiveReceived{watch_id_, Verdict(/*rejoin=*/true, "n1", 2, 0, "suspect rank 2 on n1")});
  for (int l : {0, 1}) Exit(l);
  std::vector<RoundAction> actions = machine_->Handle(WorkersGone{});
  const StartJoin* join = Find<StartJoin>(actions);
  ASSERT_NE(join, nullptr);
  EXPECT_TRUE(join->after_local_failure) << "this node's worker hung: check its health";
  actions = machine_->Handle(NodeUnhealthy{"GPU 0: 2 uncorrectable ECC error(s)"});
  ASSERT_NE(Find<SendLeave>(actions), nullptr);
  EXPECT_THAT(Find<SendLeave>(actions)->request.reason(), ::testing::HasSubstr("ECC"));
  ASSERT_NE(Find<Finish>(actions), nullptr);
  EXPECT_EQ(Find<Finish>(actions)->exit_code, kExitNodeUnhealthy);
  EXPECT_TRUE(machine_->done());
}

TEST_F(HangTest, ARejoinForAnotherReasonIsNotALocalFailure_AndStaticJobsIgnoreHealth) {
  StartRound(/*elastic=*/false);
  v1::Directive d = rendezvous::testing::MakeDirective(1);
  d.mutable_rejoin()->set_next_round(2);
  machine_->Handle(DirectiveReceived{watch_id_, d});
  std::vector<RoundAction> actions = machine_->Handle(WorkersGone{});
  ASSERT_NE(Find<StartJoin>(actions), nullptr);
  EXPECT_FALSE(Find<StartJoin>(actions)->after_local_failure);
  EXPECT_TRUE(machine_->Handle(NodeUnhealthy{"GPU 0"}).empty()) << "not elastic";
  EXPECT_EQ(machine_->state(), RoundState::kJoining);
}

}  // namespace
}  // namespace trainlet::agent

// The exit policy table and the machine's bookkeeping that the executor
// tests (agent_test.cc) do not reach.
#include "agent/round.h"

#include <signal.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/testing/fake_rendezvous_client.h"

namespace trainlet::agent {
namespace {

EndingFacts Facts(Ending ending) {
  EndingFacts f;
  f.ending = ending;
  return f;
}

TEST(ExitPolicy, FollowsTheContract) {
  EXPECT_EQ(ExitCodeFor(Facts(Ending::kJobFinished)), 0);

  EndingFacts failed = Facts(Ending::kJobFailed);
  EXPECT_EQ(ExitCodeFor(failed), kExitPeerFailed);
  failed.any_failure = 143;  // our workers, stopped by us: not this node's failure
  EXPECT_EQ(ExitCodeFor(failed), kExitPeerFailed);
  failed.signal = SIGTERM;
  EXPECT_EQ(ExitCodeFor(failed), 128 + SIGTERM);
  failed.running_failure = 3;
  EXPECT_EQ(ExitCodeFor(failed), 3);
  failed.restarts_exhausted = true;  // the same on every node, the failing one too
  EXPECT_EQ(ExitCodeFor(failed), kExitRestartsExhausted);

  EndingFacts signal = Facts(Ending::kSignal);
  signal.signal = SIGINT;
  EXPECT_EQ(ExitCodeFor(signal), 128 + SIGINT);
  signal.any_failure = 5;  // tini: the first failing worker's code
  EXPECT_EQ(ExitCodeFor(signal), 5);

  EndingFacts fenced = Facts(Ending::kFenced);
  fenced.running_failure = 3;
  EXPECT_EQ(ExitCodeFor(fenced), kExitUnavailable);

  EndingFacts lost = Facts(Ending::kCoordinatorLost);
  EXPECT_EQ(ExitCodeFor(lost), kExitUnavailable);
  lost.running_failure = 9;
  EXPECT_EQ(ExitCodeFor(lost), 9);
  EXPECT_EQ(ExitCodeFor(Facts(Ending::kCoordinatorLostAfterSuccess)), 0);

  EndingFacts no_verdict = Facts(Ending::kNoVerdict);
  no_verdict.running_failure = 7;
  EXPECT_EQ(ExitCodeFor(no_verdict), 7);

  EndingFacts join = Facts(Ending::kJoinFailed);
  join.given_code = kExitRejected;
  EXPECT_EQ(ExitCodeFor(join), kExitRejected);
  EndingFacts spawn = Facts(Ending::kSpawnFailed);
  spawn.given_code = kExitNotFound;
  EXPECT_EQ(ExitCodeFor(spawn), kExitNotFound);
}

TEST(ExitPolicy, EveryEndingHasARule) {
  for (Ending e :
       {Ending::kJobFinished, Ending::kJobFailed, Ending::kSignal, Ending::kFenced,
        Ending::kCoordinatorLost, Ending::kCoordinatorLostAfterSuccess, Ending::kNoVerdict,
        Ending::kJoinFailed, Ending::kSpawnFailed, Ending::kNodeUnhealthy}) {
    EndingFacts f = Facts(e);
    f.signal = SIGTERM;  // a signal ending always has one
    EXPECT_NE(ExitCodeFor(f), kExitInternal) << EndingName(e);
  }
}

TEST(RoundMachine, StartsByJoiningWithTheConfiguredTimeout) {
  SimulatedClock clock;
  RoundOptions o;
  o.me.set_node_id("n0");
  o.me.set_incarnation(7);
  o.job_id = "job";
  o.join_timeout = absl::Seconds(42);
  RoundMachine m(o, &clock);
  std::vector<RoundAction> actions = m.Start();
  ASSERT_EQ(actions.size(), 1u);
  const StartJoin* join = std::get_if<StartJoin>(&actions[0]);
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->timeout, absl::Seconds(42));
  EXPECT_EQ(join->request.job_id(), "job");
  EXPECT_EQ(m.state(), RoundState::kJoining);
  // While joining, the only deadline is the next progress line.
  EXPECT_EQ(m.NextDeadline(), clock.Now() + o.progress_log_interval);
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

  SimulatedClock clock_;
  std::unique_ptr<RoundMachine> machine_;
  uint64_t watch_id_ = 0;
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

TEST_F(HangTest, DeclaredAtExactlyTheTimeout_ThenFailsTheRoundWithItsOwnCode) {
  StartRound();
  clock_.Advance(absl::Seconds(3));
  const absl::Time reported = clock_.Now();
  EXPECT_TRUE(machine_->Handle(ProgressReported{1, "step=7 loss=0.5"}).empty());
  ASSERT_EQ(machine_->status().progress.size(), 1u);
  EXPECT_EQ(machine_->status().progress[0].global_rank, 3);
  EXPECT_EQ(machine_->status().progress[0].line, "step=7 loss=0.5");
  EXPECT_EQ(machine_->status().progress[0].updated, reported);
  EXPECT_EQ(machine_->NextDeadline(), reported + kHangTimeout);

  // A touch keeps the last line and counts as progress.
  EXPECT_TRUE(AdvanceAndTick(absl::Seconds(1)).empty());
  machine_->Handle(ProgressReported{1, ""});
  const absl::Time touched = clock_.Now();
  EXPECT_EQ(machine_->status().progress[0].line, "step=7 loss=0.5");
  EXPECT_EQ(machine_->status().progress[0].updates, 2);
  EXPECT_EQ(machine_->NextDeadline(), touched + kHangTimeout);

  EXPECT_EQ(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout - absl::Milliseconds(1))), nullptr);
  std::vector<RoundAction> actions = AdvanceAndTick(absl::Milliseconds(1));
  ASSERT_NE(Find<RequestTraceback>(actions), nullptr);
  EXPECT_EQ(Find<RequestTraceback>(actions)->local_rank, 1);
  EXPECT_EQ(Find<SendReport>(actions), nullptr) << "not before the evidence";
  EXPECT_EQ(machine_->status().hangs, 1);

  // Not opted in: the evidence and the failure at once.
  actions = machine_->Handle(TracebackRequested{1, false});
  const CollectHangEvidence* evidence = Find<CollectHangEvidence>(actions);
  ASSERT_NE(evidence, nullptr);
  EXPECT_EQ(evidence->evidence.local_rank, 1);
  EXPECT_EQ(evidence->evidence.global_rank, 3);
  EXPECT_EQ(evidence->evidence.round, 1u);
  EXPECT_EQ(evidence->evidence.silence, kHangTimeout);
  EXPECT_EQ(evidence->evidence.hang_timeout, kHangTimeout);
  EXPECT_EQ(evidence->evidence.last_progress, "step=7 loss=0.5");
  const SendReport* report = Find<SendReport>(actions);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->request.state(), v1::ReportRequest::FAILED);
  EXPECT_EQ(report->request.exit_code(), kExitWorkerHung);
  EXPECT_EQ(report->request.failed_local_rank(), 1);
  ASSERT_NE(Find<SignalWorkers>(actions), nullptr);
  EXPECT_EQ(Find<SignalWorkers>(actions)->signal, SIGTERM);
  EXPECT_EQ(machine_->state(), RoundState::kStopping);
  EXPECT_THAT(machine_->status().last_failure, ::testing::HasSubstr("rank 3"));

  // The workers stop; a static job's verdict: failed. This node exits 80.
  for (int l : {0, 1}) {
    launcher::ProcessExit x;
    x.local_rank = l;
    x.global_rank = 2 + l;
    x.exit_code = 128 + SIGTERM;
    machine_->Handle(WorkerExited{x});
  }
  machine_->Handle(WorkersGone{});
  v1::Directive d = rendezvous::testing::MakeDirective(1);
  d.mutable_job_failed()->set_reason("rank 3 hung");
  actions = machine_->Handle(DirectiveReceived{watch_id_, d});
  ASSERT_NE(Find<Finish>(actions), nullptr);
  EXPECT_EQ(Find<Finish>(actions)->exit_code, kExitWorkerHung);
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
  ASSERT_NE(Find<RequestTraceback>(actions), nullptr);
  EXPECT_EQ(Find<RequestTraceback>(actions)->local_rank, 0);
}

// Drives the wait for a hung worker's stacks the way the executor does:
// at each deadline a Tick; each CheckTraceback answered with
// `size(elapsed)`. Returns how long after the signal the evidence was
// collected (and its SendReport checked), or InfiniteDuration.
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
    if (Find<CollectHangEvidence>(actions) != nullptr) {
      EXPECT_EQ(Find<CollectHangEvidence>(actions)->evidence.local_rank, 0);
      EXPECT_NE(Find<SendReport>(actions), nullptr);
      if (Find<SendReport>(actions) != nullptr) {
        EXPECT_EQ(Find<SendReport>(actions)->request.exit_code(), kExitWorkerHung);
      }
      return clock->Now() - signalled;
    }
  }
  return absl::InfiniteDuration();
}

TEST_F(HangTest, SignalSentButNothingWritten_WaitsTheWholeTracebackWait) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
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

TEST_F(HangTest, TracebackFileAlreadyWritten_OnlyWhatFollowsTheSignalCounts) {
  StartRound();
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
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

TEST_F(HangTest, AnUnhealthyNodeLeavesAnElasticJobInsteadOfRejoining_With81) {
  StartRound(/*elastic=*/true);
  machine_->Handle(ProgressReported{0, "step=1"});
  ASSERT_NE(Find<RequestTraceback>(AdvanceAndTick(kHangTimeout)), nullptr);
  machine_->Handle(TracebackRequested{0, false});
  for (int l : {0, 1}) {
    launcher::ProcessExit x;
    x.local_rank = l;
    x.exit_code = 128 + SIGTERM;
    machine_->Handle(WorkerExited{x});
  }
  machine_->Handle(WorkersGone{});
  v1::Directive d = rendezvous::testing::MakeDirective(1);
  d.mutable_rejoin()->set_next_round(2);
  std::vector<RoundAction> actions = machine_->Handle(DirectiveReceived{watch_id_, d});
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

TEST(ExitPolicy, AHungWorkerIsThisNodesRunningFailure) {
  EndingFacts f = Facts(Ending::kJobFailed);
  f.running_failure = kExitWorkerHung;
  f.any_failure = kExitWorkerHung;
  EXPECT_EQ(ExitCodeFor(f), kExitWorkerHung);
  f.restarts_exhausted = true;
  EXPECT_EQ(ExitCodeFor(f), kExitRestartsExhausted);
  f.ending = Ending::kNoVerdict;
  EXPECT_EQ(ExitCodeFor(f), kExitWorkerHung);
}

}  // namespace
}  // namespace trainlet::agent

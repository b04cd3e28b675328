// The exit policy table and the machine's bookkeeping that the executor
// tests (agent_test.cc) do not reach.
#include "agent/round.h"

#include <signal.h>

#include "common/exit_codes.h"
#include "gtest/gtest.h"

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
  for (Ending e : {Ending::kJobFinished, Ending::kJobFailed, Ending::kSignal, Ending::kFenced,
                   Ending::kCoordinatorLost, Ending::kCoordinatorLostAfterSuccess,
                   Ending::kNoVerdict, Ending::kJoinFailed, Ending::kSpawnFailed}) {
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

}  // namespace
}  // namespace trainlet::agent

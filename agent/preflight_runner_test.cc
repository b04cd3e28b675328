#include "agent/preflight_runner.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "preflight/testing/fake_resolver.h"

namespace trainlet::agent {
namespace {

TEST(PreflightLines, EachLineOnce_WithWhatItIs) {
  google::protobuf::RepeatedPtrField<std::string> lines;
  *lines.Add() = "node pod-3 is slow (cpu): its workers waited for a CPU 48% of the last 30s";
  PreflightLines slow("slow node");
  ::testing::internal::CaptureStderr();
  slow.Log(lines);
  *lines.Add() = "node pod-5 is slow (network): ...";
  slow.Log(lines);  // pod-3's line again: not logged twice
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("slow node (the coordinator): node pod-3 is slow (cpu)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("pod-3"), out.rfind("pod-3")) << out;
  EXPECT_NE(out.find("slow node (the coordinator): node pod-5 is slow"), std::string::npos) << out;
  ::testing::internal::CaptureStderr();
  PreflightLines preflight;
  preflight.Log(lines);
  EXPECT_NE(
      ::testing::internal::GetCapturedStderr().find("preflight (the coordinator): node pod-3"),
      std::string::npos);
}

// A runner whose checks find `path` (a directory, or one that does not
// exist: the path checks fail), on a simulated clock.
// warn's report, once its thread has finished (at most 30 s).
std::optional<v1::PreflightReport> PollUntilDone(PreflightRunner* runner) {
  std::optional<v1::PreflightReport> r;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(r = runner->Poll()).has_value() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  return r;
}

class PreflightRunnerTest : public ::testing::Test {
 protected:
  std::unique_ptr<PreflightRunner> Make(v1::PreflightPolicy policy, const std::string& path,
                                        bool with_gpu = false, bool with_links = false,
                                        absl::Duration beside_delay = absl::ZeroDuration()) {
    preflight::NodeCheckConfig checks;
    checks.path = path;
    auto resolver = std::make_shared<preflight::testing::FakeResolver>();
    resolver->Add("coordinator", {"10.0.0.1"});
    auto checker = std::make_unique<preflight::NodeChecker>(checks, "n0", resolver);
    PreflightRunner::Options o;
    o.policy = policy;
    o.interval = absl::Minutes(10);
    o.node_id = "n0";
    o.incarnation = 7;
    o.beside_delay = beside_delay;
    if (with_links) {
      o.measure_links = [this](const v1::NetworkPlan& plan) {
        ++link_runs_;
        std::vector<v1::LinkResult> out;
        for (const v1::LinkTarget& t : plan.targets()) {
          v1::LinkResult l;
          l.set_from_node("n0");
          l.set_to_node(t.node_id());
          l.set_bandwidth_bytes_per_second(1e9);
          out.push_back(l);
        }
        return out;
      };
    }
    if (with_gpu) {
      o.gpu_check = [this] {
        ++gpu_runs_;
        return std::vector<v1::CheckResult>{preflight::MakeResult(
            preflight::kCheckGpuNcclBusbw, gpu_outcome_, "canned", 1e9, "bytes_per_second")};
      };
    }
    return std::make_unique<PreflightRunner>(
        o, std::move(checker),
        [] {
          preflight::NodeCheckInputs in;
          in.names = {"coordinator"};
          return in;
        },
        &clock_);
  }
  std::string Dir() const { return ::testing::TempDir(); }
  SimulatedClock clock_;
  int gpu_runs_ = 0;
  std::atomic<int> link_runs_{0};
  v1::CheckResult::Outcome gpu_outcome_ = v1::CheckResult::PASS;
};

int Count(const v1::PreflightReport& r, const std::string& check) {
  int n = 0;
  for (const v1::CheckResult& c : r.results()) n += c.check() == check ? 1 : 0;
  return n;
}

TEST_F(PreflightRunnerTest, Gating_ChecksBeforeTheFirstJoinThenOnlyWhenDue) {
  auto runner = Make(v1::PREFLIGHT_EXCLUDE, Dir());
  std::optional<v1::PreflightReport> first = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->round(), 1u);
  EXPECT_EQ(first->node_id(), "n0");
  EXPECT_TRUE(PreflightPassed(*first));
  // A survivor's restart within the interval pays nothing...
  clock_.Advance(absl::Minutes(1));
  EXPECT_FALSE(runner->BeforeJoin(1, false, false).has_value());
  // ... unless its own worker failed, or it comes back from a quarantine.
  EXPECT_TRUE(runner->BeforeJoin(1, /*after_local_failure=*/true, false).has_value());
  EXPECT_TRUE(runner->BeforeJoin(1, false, /*recheck=*/true).has_value());
  clock_.Advance(absl::Minutes(11));
  EXPECT_TRUE(runner->BeforeJoin(2, false, false).has_value());
}

TEST_F(PreflightRunnerTest, Gating_AMissingPathFails) {
  auto runner = Make(v1::PREFLIGHT_FAIL, Dir() + "/no-such-dir");
  std::optional<v1::PreflightReport> r = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(PreflightPassed(*r));
}

// The coordinator holds a failure until a report says better: a node that
// failed checks again at every join, interval or not.
TEST_F(PreflightRunnerTest, Gating_AfterAFailure_ChecksAtEveryJoin) {
  auto runner = Make(v1::PREFLIGHT_EXCLUDE, Dir() + "/no-such-dir");
  ASSERT_TRUE(runner->BeforeJoin(0, false, false).has_value());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(runner->BeforeJoin(0, false, false).has_value());
}

TEST_F(PreflightRunnerTest, Warn_NeverBeforeAJoin_RunsBesideTheWorkers) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir() + "/no-such-dir");
  EXPECT_FALSE(runner->BeforeJoin(0, false, false).has_value());
  runner->AfterStart(1);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->round(), 1u);
  EXPECT_FALSE(PreflightPassed(*r));
  EXPECT_FALSE(runner->Poll().has_value()) << "handed over once";
  // Not again within the interval.
  runner->AfterStart(2);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(runner->Poll().has_value());
}

// The checks beside the workers wait out beside_delay (the workers' start
// first), and an agent that ends meanwhile does not wait for it.
TEST_F(PreflightRunnerTest, Warn_BesideTheWorkers_AfterTheDelay) {
  auto runner =
      Make(v1::PREFLIGHT_WARN, Dir() + "/no-such-dir", false, false, absl::Milliseconds(300));
  const absl::Time started = absl::Now();
  runner->AfterStart(1);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_GE(absl::Now() - started, absl::Milliseconds(300));
  EXPECT_GE(absl::FromUnixMicros(r->started_unix_micros()) - started, absl::Milliseconds(290));
}

TEST_F(PreflightRunnerTest, Warn_AnAgentEndingDuringTheDelayDoesNotWaitForIt) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), false, false, absl::Seconds(60));
  runner->AfterStart(1);
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time ending = absl::Now();
  runner.reset();
  EXPECT_LT(absl::Now() - ending, absl::Seconds(10));
}

// A re-join within the delay (a restart: the workers are gone) does not
// wait the rest of it out before its own checks: the checks beside the
// last round run at once, and their report still comes.
TEST_F(PreflightRunnerTest, Warn_ARejoinWithinTheDelayDoesNotWaitForIt) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), /*with_gpu=*/true, false, absl::Seconds(60));
  EXPECT_FALSE(runner->BeforeJoin(0, false, false).has_value());
  runner->AfterStart(1);
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time joining = absl::Now();
  // Back from a quarantine: the GPU loopback is due again before this join.
  EXPECT_FALSE(runner->BeforeJoin(1, true, /*recheck=*/true).has_value());
  EXPECT_LT(absl::Now() - joining, absl::Seconds(10)) << "the join waited out the delay";
  EXPECT_EQ(gpu_runs_, 2);
  std::optional<v1::PreflightReport> r = runner->Poll();
  ASSERT_TRUE(r.has_value()) << "round 1's checks ran when the join cut the delay short";
  EXPECT_EQ(r->round(), 1u);
  EXPECT_GT(Count(*r, preflight::kCheckDns), 0);
}

// After a join cut one delay short, the next round's thread waits out its
// own and measures its plan.
TEST_F(PreflightRunnerTest, Warn_AfterAJoinCutTheDelay_TheNextRoundIsMeasured) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), /*with_gpu=*/true, /*with_links=*/true,
                     absl::Milliseconds(200));
  EXPECT_FALSE(runner->BeforeJoin(0, false, false).has_value());
  runner->AfterStart(1);
  EXPECT_FALSE(runner->BeforeJoin(1, true, /*recheck=*/true).has_value());  // cuts round 1's
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->round(), 1u);
  v1::Assignment a;
  a.set_round(2);
  a.mutable_network_plan()->add_targets()->set_node_id("n1");
  runner->OnAssignment(a);
  const absl::Time started = absl::Now();
  runner->AfterStart(2);
  r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->round(), 2u);
  EXPECT_EQ(r->links_size(), 1) << "round 2's plan was measured";
  EXPECT_GE(absl::Now() - started, absl::Milliseconds(200)) << "after its own delay";
}

// The same for a join whose policy now gates (the coordinator changed it).
TEST_F(PreflightRunnerTest, Warn_AGatedJoinWithinTheDelayDoesNotWaitForIt) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), false, false, absl::Seconds(60));
  runner->AfterStart(1);
  absl::SleepFor(absl::Milliseconds(20));
  runner->SetPolicy(v1::PREFLIGHT_EXCLUDE);
  const absl::Time joining = absl::Now();
  EXPECT_TRUE(runner->BeforeJoin(1, /*after_local_failure=*/true, false).has_value());
  EXPECT_LT(absl::Now() - joining, absl::Seconds(10)) << "the join waited out the delay";
}

TEST_F(PreflightRunnerTest, TheCoordinatorsPolicyWins) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir());
  runner->SetPolicy(v1::PREFLIGHT_POLICY_UNSPECIFIED);  // an older coordinator: kept
  EXPECT_EQ(runner->policy(), v1::PREFLIGHT_WARN);
  runner->SetPolicy(v1::PREFLIGHT_EXCLUDE);
  EXPECT_TRUE(runner->BeforeJoin(0, false, false).has_value());
  runner->SetPolicy(v1::PREFLIGHT_OFF);
  EXPECT_FALSE(runner->BeforeJoin(1, true, true).has_value());
}

// --preflight-gpu takes seconds: the first join and when due, not every
// restart; its result rides on the gated report.
TEST_F(PreflightRunnerTest, Gpu_Gating_FirstJoinThenWhenDue) {
  auto runner = Make(v1::PREFLIGHT_EXCLUDE, Dir(), /*with_gpu=*/true);
  std::optional<v1::PreflightReport> first = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(gpu_runs_, 1);
  EXPECT_EQ(Count(*first, preflight::kCheckGpuNcclBusbw), 1);
  clock_.Advance(absl::Minutes(1));
  // A worker failed here: the node checks again, the GPU loopback does not.
  std::optional<v1::PreflightReport> restart = runner->BeforeJoin(1, true, false);
  ASSERT_TRUE(restart.has_value());
  EXPECT_EQ(gpu_runs_, 1);
  EXPECT_EQ(Count(*restart, preflight::kCheckGpuNcclBusbw), 0);
  EXPECT_TRUE(runner->BeforeJoin(1, false, /*recheck=*/true).has_value());
  EXPECT_EQ(gpu_runs_, 2) << "back from a quarantine";
  clock_.Advance(absl::Minutes(11));
  EXPECT_TRUE(runner->BeforeJoin(2, false, false).has_value());
  EXPECT_EQ(gpu_runs_, 3);
}

TEST_F(PreflightRunnerTest, Gpu_AfterAFailure_RunsAtEveryJoin) {
  gpu_outcome_ = v1::CheckResult::FAIL;
  auto runner = Make(v1::PREFLIGHT_FAIL, Dir(), /*with_gpu=*/true);
  std::optional<v1::PreflightReport> r = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(PreflightPassed(*r));
  clock_.Advance(absl::Seconds(1));
  gpu_outcome_ = v1::CheckResult::PASS;
  r = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(PreflightPassed(*r));
  EXPECT_EQ(gpu_runs_, 2);
}

// warn never runs it beside the workers (they use the GPUs): before the
// join, its result in the report of the check beside them.
TEST_F(PreflightRunnerTest, Gpu_Warn_BeforeTheJoin_ReportedBesideTheWorkers) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), /*with_gpu=*/true);
  EXPECT_FALSE(runner->BeforeJoin(0, false, false).has_value());
  EXPECT_EQ(gpu_runs_, 1);
  runner->AfterStart(1);
  EXPECT_EQ(gpu_runs_, 1);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(Count(*r, preflight::kCheckGpuNcclBusbw), 1);
  EXPECT_GT(Count(*r, preflight::kCheckDns), 0) << "with the node checks";
  EXPECT_FALSE(runner->BeforeJoin(1, false, false).has_value());
  EXPECT_EQ(gpu_runs_, 1) << "not due again within the interval";
}

TEST_F(PreflightRunnerTest, Gpu_Off_NeverRuns) {
  auto runner = Make(v1::PREFLIGHT_OFF, Dir(), /*with_gpu=*/true);
  EXPECT_FALSE(runner->BeforeJoin(0, true, true).has_value());
  runner->AfterStart(1);
  EXPECT_EQ(gpu_runs_, 0);
}

// The network: due at the first join, back from a quarantine, and an
// interval after the last measurement; a restart's survivor is not.
TEST_F(PreflightRunnerTest, Network_DueFirstAfterAQuarantineAndAfterTheInterval) {
  auto runner = Make(v1::PREFLIGHT_EXCLUDE, Dir(), false, /*with_links=*/true);
  (void)runner->BeforeJoin(0, false, false);
  EXPECT_TRUE(runner->NetworkDue());
  v1::Assignment a;
  a.set_round(1);
  runner->OnAssignment(a);  // the coordinator measured nothing: still due
  EXPECT_TRUE(runner->NetworkDue());
  runner->NetworkMeasured();
  runner->OnAssignment(a);  // measured before it closed
  EXPECT_FALSE(runner->NetworkDue());
  clock_.Advance(absl::Minutes(1));
  (void)runner->BeforeJoin(1, /*after_local_failure=*/true, false);
  EXPECT_FALSE(runner->NetworkDue()) << "a worker's failure is not the network's";
  (void)runner->BeforeJoin(1, false, /*recheck=*/true);
  EXPECT_TRUE(runner->NetworkDue()) << "back from a quarantine";
  a.set_round(2);
  runner->NetworkMeasured();
  runner->OnAssignment(a);
  (void)runner->BeforeJoin(2, false, false);
  EXPECT_FALSE(runner->NetworkDue());
  clock_.Advance(absl::Minutes(11));
  EXPECT_TRUE(runner->NetworkDue());
  // Without a measurer, never; nor with --preflight=off.
  EXPECT_FALSE(Make(v1::PREFLIGHT_EXCLUDE, Dir())->NetworkDue());
  EXPECT_FALSE(Make(v1::PREFLIGHT_OFF, Dir(), false, true)->NetworkDue());
}

TEST_F(PreflightRunnerTest, Warn_TheRoundsPlanIsMeasuredBesideTheWorkersAndReported) {
  auto runner = Make(v1::PREFLIGHT_WARN, Dir(), false, /*with_links=*/true);
  EXPECT_TRUE(runner->NetworkDue());
  v1::Assignment a;
  a.set_round(1);
  v1::LinkTarget* t = a.mutable_network_plan()->add_targets();
  t->set_node_id("n1");
  runner->OnAssignment(a);
  runner->AfterStart(1);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->links_size(), 1);
  EXPECT_EQ(r->links(0).to_node(), "n1");
  EXPECT_GT(r->results_size(), 0) << "the node checks were due too";
  // The next round has no plan and no checks due: nothing runs.
  a.set_round(2);
  a.clear_network_plan();
  runner->OnAssignment(a);
  runner->AfterStart(2);
  EXPECT_FALSE(runner->Poll().has_value());
  EXPECT_EQ(link_runs_.load(), 1);
  EXPECT_FALSE(runner->NetworkDue());
}

// A round that ends within the delay: its node checks still run, its plan
// is not measured (the peers are at the next round and would refuse it).
TEST_F(PreflightRunnerTest, Warn_ARoundOverWithinTheDelay_ChecksButNoLinks) {
  auto runner =
      Make(v1::PREFLIGHT_WARN, Dir(), false, /*with_links=*/true, absl::Milliseconds(200));
  v1::Assignment a;
  a.set_round(1);
  a.mutable_network_plan()->add_targets()->set_node_id("n1");
  runner->OnAssignment(a);
  runner->AfterStart(1);
  a.set_round(2);
  runner->OnAssignment(a);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->round(), 1u);
  EXPECT_GT(r->results_size(), 0);
  EXPECT_EQ(r->links_size(), 0);
  EXPECT_EQ(link_runs_.load(), 0);
}

// A restart within the delay (no join waits for the checks: none due): the
// new round's plan is still measured beside its workers, not dropped
// because the last round's checks had not begun; those checks, never run,
// go with the new round's (the executor never waits for them).
TEST_F(PreflightRunnerTest, Warn_ARestartWithinTheDelay_ItsPlanIsStillMeasured) {
  auto runner =
      Make(v1::PREFLIGHT_WARN, Dir(), false, /*with_links=*/true, absl::Milliseconds(1500));
  v1::Assignment a;
  a.set_round(1);
  a.mutable_network_plan()->add_targets()->set_node_id("n1");
  runner->OnAssignment(a);
  runner->AfterStart(1);
  EXPECT_FALSE(runner->BeforeJoin(1, true, false).has_value());
  a.set_round(2);
  runner->OnAssignment(a);
  runner->AfterStart(2);
  std::optional<v1::PreflightReport> r = PollUntilDone(runner.get());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->round(), 2u) << "round 2's plan was dropped";
  EXPECT_EQ(r->links_size(), 1);
  EXPECT_EQ(link_runs_.load(), 1) << "round 1's plan is not measured: that round is over";
  EXPECT_GT(Count(*r, preflight::kCheckDns), 0) << "round 1's node checks, run with round 2";
}

TEST_F(PreflightRunnerTest, TheClockOffsetComesFromTheLatestJoin) {
  auto runner = Make(v1::PREFLIGHT_EXCLUDE, Dir());
  std::optional<v1::PreflightReport> r = runner->BeforeJoin(0, false, false);
  ASSERT_TRUE(r.has_value());
  auto outcome = [](const v1::PreflightReport& rep) {
    for (const v1::CheckResult& c : rep.results()) {
      if (c.check() == preflight::kCheckClockOffset) return c.outcome();
    }
    return v1::CheckResult::OUTCOME_UNSPECIFIED;
  };
  EXPECT_EQ(outcome(*r), v1::CheckResult::SKIPPED) << "no exchange yet";
  // The coordinator's clock is 5 s ahead: the report sent again says so.
  const absl::Time t1 = absl::FromUnixSeconds(1000);
  runner->NoteClock({t1, t1 + absl::Milliseconds(5001), t1 + absl::Milliseconds(5002),
                     t1 + absl::Milliseconds(3)});
  runner->RefreshClock(&*r);
  EXPECT_EQ(outcome(*r), v1::CheckResult::FAIL);
  // And the next check uses it too.
  std::optional<v1::PreflightReport> next = runner->BeforeJoin(1, false, /*recheck=*/true);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(outcome(*next), v1::CheckResult::FAIL);
}

}  // namespace
}  // namespace trainlet::agent

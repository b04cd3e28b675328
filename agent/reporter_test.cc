#include "agent/reporter.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "controller/report_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

class FakeTransport : public ReportTransport {
 public:
  absl::Status Send(const v1::HealthReport& report, absl::Duration timeout) override {
    sent.push_back(report);
    if (on_send) on_send();
    return next;
  }
  absl::Status Close(absl::Duration timeout) override {
    closes.push_back(timeout);
    return absl::OkStatus();
  }
  std::function<void()> on_send;
  std::vector<absl::Duration> closes;  // each Close's timeout.
  std::vector<v1::HealthReport> sent;
  absl::Status next = absl::OkStatus();
};

AgentStatus Running(uint64_t round, int workers = 2) {
  AgentStatus s;
  s.state = RoundState::kRunning;
  s.round = round;
  s.node_rank = 1;
  s.nnodes = 2;
  s.world_size = 4;
  s.workers_running = workers;
  return s;
}

std::vector<v1::ReportEvent::Kind> Kinds(const v1::HealthReport& r) {
  std::vector<v1::ReportEvent::Kind> k;
  for (const auto& e : r.events()) k.push_back(e.kind());
  return k;
}

class ReporterTest : public ::testing::Test {
 protected:
  ReporterTest() : reporter_(Options(), &transport_, &clock_, &clock_) {}
  static ReporterOptions Options() {
    ReporterOptions o;
    o.job_id = "job";
    o.node_id = "pod-1";
    o.incarnation = 7;
    o.interval = absl::Seconds(5);
    o.enrich = [](v1::HealthReport* r) { r->set_agent_rss_bytes(12345); };
    return o;
  }
  SimulatedClock clock_;
  FakeTransport transport_;
  Reporter reporter_;
};

TEST_F(ReporterTest, NothingIsSentBeforeTheFirstStatus) {
  EXPECT_EQ(reporter_.Step(), absl::InfiniteFuture());
  EXPECT_TRUE(transport_.sent.empty());
}

TEST_F(ReporterTest, StatusChange_IsSentAtOnceThenPeriodically) {
  reporter_.Update(Running(1));
  EXPECT_EQ(reporter_.Step(), clock_.Now() + absl::Seconds(5));
  ASSERT_EQ(transport_.sent.size(), 1u);
  const v1::HealthReport& first = transport_.sent[0];
  EXPECT_EQ(first.job_id(), "job");
  EXPECT_EQ(first.node_id(), "pod-1");
  EXPECT_EQ(first.incarnation(), 7u);
  EXPECT_EQ(first.sequence(), 1u);
  EXPECT_EQ(first.round(), 1u);
  EXPECT_EQ(first.node_rank(), 1);
  EXPECT_EQ(first.state(), v1::HealthReport::RUNNING);
  EXPECT_EQ(first.agent_rss_bytes(), 12345u);
  EXPECT_EQ(first.report_interval_ms(), 5000);
  EXPECT_THAT(Kinds(first), ::testing::ElementsAre(v1::ReportEvent::STATE_CHANGE));

  // The same status again: not a change, no report before the interval.
  reporter_.Update(Running(1));
  clock_.Advance(absl::Seconds(4));
  reporter_.Step();
  EXPECT_EQ(transport_.sent.size(), 1u);
  clock_.Advance(absl::Seconds(1));
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(transport_.sent[1].sequence(), 2u);
  EXPECT_THAT(Kinds(transport_.sent[1]), ::testing::ElementsAre(v1::ReportEvent::PERIODIC));
}

TEST_F(ReporterTest, Changes_AreRateLimitedToOnePerMinGap) {
  reporter_.Update(Running(1, 2));
  reporter_.Step();
  reporter_.Update(Running(1, 1));
  EXPECT_EQ(reporter_.Step(), clock_.Now() + kMinReportGap);
  EXPECT_EQ(transport_.sent.size(), 1u);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(transport_.sent[1].events(0).kind(), v1::ReportEvent::STATE_CHANGE);
}

TEST_F(ReporterTest, NewRound_IsARestartEventWithTheCause) {
  reporter_.Update(Running(1));
  reporter_.Step();
  AgentStatus next = Running(2);
  next.restart_count = 1;
  next.last_failure = "local worker 0 was killed by signal 9";
  reporter_.Update(next);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 2u);
  const v1::HealthReport& r = transport_.sent[1];
  ASSERT_THAT(Kinds(r),
              ::testing::ElementsAre(v1::ReportEvent::STATE_CHANGE, v1::ReportEvent::RESTART));
  EXPECT_EQ(r.events(1).round(), 2u);
  EXPECT_EQ(r.events(1).cause(), "local worker 0 was killed by signal 9");
  EXPECT_EQ(r.events(1).id(), 1u);
  // Delivered: not sent again.
  clock_.Advance(absl::Seconds(5));
  reporter_.Step();
  EXPECT_THAT(Kinds(transport_.sent[2]), ::testing::ElementsAre(v1::ReportEvent::PERIODIC));
}

TEST_F(ReporterTest, RestartAfterThisNodesWorkerFailed_NamesItsRankCodeAndTime) {
  AgentStatus s = Running(1);
  WorkerStatus failed;
  failed.local_rank = 0;
  failed.global_rank = 3;
  failed.pid = 0;
  failed.exited = true;
  failed.exit_code = 137;
  WorkerStatus stopped = failed;
  stopped.local_rank = 1;
  stopped.global_rank = 2;
  stopped.pid = 77;
  stopped.exited = false;
  s.workers = {stopped};
  reporter_.Update(s);
  reporter_.Step();
  // rank 3 exits 137; then the agent stops rank 2 (exit 143: not a failure).
  clock_.Advance(absl::Seconds(1));
  const int64_t exited_ms = absl::ToUnixMillis(clock_.Now());
  s.workers = {failed, stopped};
  reporter_.Update(s);
  s.state = RoundState::kStopping;
  reporter_.Update(s);
  s.workers[1].exited = true;
  s.workers[1].exit_code = 143;
  clock_.Advance(absl::Milliseconds(10));
  reporter_.Update(s);
  AgentStatus next = Running(2);
  next.restart_count = 1;
  next.last_failure = "rank 3 killed by signal 9";
  reporter_.Update(next);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  const v1::HealthReport& r = transport_.sent.back();
  const v1::ReportEvent* restart = nullptr;
  for (const auto& e : r.events()) {
    if (e.kind() == v1::ReportEvent::RESTART) restart = &e;
  }
  ASSERT_NE(restart, nullptr);
  ASSERT_TRUE(restart->has_failed_rank());
  EXPECT_EQ(restart->failed_rank(), 3);
  EXPECT_EQ(restart->failed_exit_code(), 137);
  EXPECT_EQ(restart->failed_unix_ms(), exited_ms);

  // A node whose workers were only stopped names no failure.
  AgentStatus third = Running(3);
  third.restart_count = 2;
  reporter_.Update(third);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  for (const auto& e : transport_.sent.back().events()) {
    if (e.kind() == v1::ReportEvent::RESTART) {
      EXPECT_FALSE(e.has_failed_rank());
    }
  }
}

TEST_F(ReporterTest, Progress_CarriesTheRoundsFirstStepAndItsAge) {
  AgentStatus s = Running(2);
  WorkerProgress late;
  late.local_rank = 1;
  late.line = "step=30 loss=0.2";
  late.updated = clock_.Now() - absl::Seconds(1);
  late.updates = 9;
  late.first_line = "step=12 loss=0.9";
  late.first_updated = clock_.Now() - absl::Seconds(7);
  WorkerProgress early = late;
  early.local_rank = 0;
  early.line = "step=29";
  early.first_line = "step=11";
  early.first_updated = clock_.Now() - absl::Seconds(8);
  s.progress = {late, early};
  reporter_.Update(s);
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 1u);
  const v1::Progress& p = transport_.sent[0].progress();
  EXPECT_EQ(p.step(), 30);
  EXPECT_EQ(p.age_ms(), 1000);
  ASSERT_TRUE(p.has_first_step());
  EXPECT_EQ(p.first_step(), 11);  // the earliest worker's first line.
  EXPECT_EQ(p.first_age_ms(), 8000);

  // No first line with a step: unset.
  s.progress[0].first_line.clear();
  s.progress[1].first_line = "loss=0.1";
  s.round = 3;
  clock_.Advance(kMinReportGap);
  reporter_.Update(s);
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_FALSE(transport_.sent[1].progress().has_first_step());
}

TEST_F(ReporterTest, ControllerAway_KeepsOnlyTheLatestStateAndBoundedEvents) {
  transport_.next = absl::UnavailableError("connection refused");
  reporter_.Update(Running(1));
  reporter_.Step();
  for (int i = 0; i < 40; ++i) {
    reporter_.AddEvent(v1::ReportEvent::HANG, "hang " + std::to_string(i),
                       std::string(100000, 'e'));
  }
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  Reporter::Stats stats = reporter_.stats();
  EXPECT_EQ(stats.failed, 2);
  EXPECT_EQ(stats.pending_events, kMaxPendingEvents);
  EXPECT_EQ(stats.events_dropped, 40 - kMaxPendingEvents);
  const v1::HealthReport& r = transport_.sent.back();
  EXPECT_EQ(r.events_size(), controller::kMaxEvents);
  EXPECT_EQ(r.events(controller::kMaxEvents - 1).cause(), "hang 39");
  EXPECT_LE(r.hang_evidence().size(), controller::kMaxHangEvidenceLength);
  EXPECT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);

  // Back: the pending events go once, then are forgotten.
  transport_.next = absl::OkStatus();
  clock_.Advance(absl::Seconds(5));
  reporter_.Step();
  EXPECT_EQ(reporter_.stats().pending_events, 0);
  EXPECT_EQ(transport_.sent.back().events_size(), controller::kMaxEvents);
  clock_.Advance(absl::Seconds(5));
  reporter_.Step();
  EXPECT_EQ(transport_.sent.back().events_size(), 1);
  EXPECT_TRUE(transport_.sent.back().hang_evidence().empty());
}

TEST_F(ReporterTest, Stop_SendsTheFinalStateOnceWhenTheControllerAnswers) {
  reporter_.Update(Running(1));
  reporter_.Step();
  AgentStatus done = Running(1, 0);
  done.state = RoundState::kDone;
  done.exit_code = 3;
  reporter_.Update(done);
  reporter_.Stop(absl::Milliseconds(500));
  ASSERT_EQ(transport_.sent.size(), 2u);
  const v1::HealthReport& r = transport_.sent[1];
  EXPECT_EQ(r.state(), v1::HealthReport::DONE);
  EXPECT_EQ(r.exit_code(), 3);
  ASSERT_EQ(r.events_size(), 2);
  EXPECT_EQ(r.events(1).kind(), v1::ReportEvent::FINISHED);
  EXPECT_THAT(r.events(1).cause(), HasSubstr("code 3"));
  // Then the transport is closed within what is left of the 500 ms (the
  // simulated clock did not move), so that the final report is processed.
  ASSERT_EQ(transport_.closes.size(), 1u);
  EXPECT_EQ(transport_.closes[0], absl::Milliseconds(500));
}

TEST_F(ReporterTest, Stop_DoesNotWaitForAControllerThatIsAway) {
  transport_.next = absl::DeadlineExceededError("deadline");
  reporter_.Update(Running(1));
  reporter_.Step();
  AgentStatus done = Running(1, 0);
  done.state = RoundState::kDone;
  reporter_.Update(done);
  reporter_.Stop(absl::Milliseconds(500));
  EXPECT_EQ(transport_.sent.size(), 1u);
  // Nothing worth waiting for: the transport is closed without waiting.
  ASSERT_EQ(transport_.closes.size(), 1u);
  EXPECT_EQ(transport_.closes[0], absl::ZeroDuration());
}

TEST_F(ReporterTest, SendCancelledByStop_IsNotAFailure) {
  reporter_.Update(Running(1));
  reporter_.Step();
  reporter_.Update(Running(1, 1));
  // The agent stops while a report is in flight; the transport answers
  // CANCELLED.
  transport_.next = absl::CancelledError("cancelled");
  transport_.on_send = [this] { reporter_.Stop(absl::ZeroDuration()); };
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  EXPECT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(reporter_.stats().failed, 0);
}

// Two local workers of round 1, ranks 2 and 3, as the executor publishes them.
AgentStatus WithWorkers(RoundState state, bool exited0, int code0, bool exited1, int code1) {
  AgentStatus s = Running(1, (exited0 ? 0 : 1) + (exited1 ? 0 : 1));
  s.state = state;
  s.workers.push_back({0, 2, exited0 ? 0 : 100, exited0, code0});
  s.workers.push_back({1, 3, exited1 ? 0 : 101, exited1, code1});
  return s;
}

TEST_F(ReporterTest, WorkersTheAgentStopped_AreStopped_TheOneThatFailedIsFailed) {
  reporter_.Update(WithWorkers(RoundState::kRunning, false, 0, false, 0));
  reporter_.Step();
  // Worker 0 exits 3: the agent stops the round; worker 1 still runs.
  clock_.Advance(absl::Milliseconds(10));
  const int64_t failed_at = absl::ToUnixMillis(clock_.Now());
  reporter_.Update(WithWorkers(RoundState::kStopping, true, 3, false, 0));
  clock_.Advance(absl::Milliseconds(200));
  const int64_t stopped_at = absl::ToUnixMillis(clock_.Now());
  reporter_.Update(WithWorkers(RoundState::kStopping, true, 3, true, 143));
  AgentStatus done = WithWorkers(RoundState::kDone, true, 3, true, 143);
  done.exit_code = 3;
  reporter_.Update(done);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  const v1::HealthReport& r = transport_.sent.back();
  ASSERT_EQ(r.workers_size(), 2);
  EXPECT_EQ(r.workers(0).state(), v1::WorkerHealth::FAILED);
  EXPECT_EQ(r.workers(0).exit_code(), 3);
  EXPECT_EQ(r.workers(0).exited_unix_ms(), failed_at);
  EXPECT_EQ(r.workers(1).state(), v1::WorkerHealth::STOPPED);
  EXPECT_EQ(r.workers(1).exit_code(), 143);
  EXPECT_EQ(r.workers(1).exited_unix_ms(), stopped_at);
}

TEST_F(ReporterTest, WorkersThatEndOnTheirOwn_AreNotStopped) {
  reporter_.Update(WithWorkers(RoundState::kRunning, false, 0, false, 0));
  reporter_.Update(WithWorkers(RoundState::kRunning, true, 0, false, 0));
  reporter_.Update(WithWorkers(RoundState::kAwaitingVerdict, true, 0, true, 0));
  reporter_.Update(WithWorkers(RoundState::kDone, true, 0, true, 0));
  reporter_.Step();
  const v1::HealthReport& r = transport_.sent.back();
  EXPECT_EQ(r.workers(0).state(), v1::WorkerHealth::SUCCEEDED);
  EXPECT_EQ(r.workers(1).state(), v1::WorkerHealth::SUCCEEDED);
  // The next round's workers start afresh.
  AgentStatus next = WithWorkers(RoundState::kRunning, false, 0, true, 1);
  next.round = 2;
  reporter_.Update(next);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  EXPECT_EQ(transport_.sent.back().workers(1).state(), v1::WorkerHealth::FAILED);
}

TEST_F(ReporterTest, CommandNodesAndJoinDeadline_AreReported) {
  ReporterOptions o = Options();
  o.command = CommandLineOf({"python", "train.py", "--name=my run", "it's"});
  o.min_nodes = 2;
  o.max_nodes = 4;
  o.join_timeout = absl::Minutes(10);
  o.topology = "zone=z1,switch=s0";
  FakeTransport transport;
  Reporter reporter(o, &transport, &clock_, &clock_);
  AgentStatus joining;
  joining.state = RoundState::kJoining;
  const int64_t deadline = absl::ToUnixMillis(clock_.Now() + absl::Minutes(10));
  reporter.Update(joining);
  reporter.Step();
  ASSERT_EQ(transport.sent.size(), 1u);
  EXPECT_EQ(transport.sent[0].command(), "python train.py '--name=my run' 'it'\\''s'");
  EXPECT_EQ(transport.sent[0].min_nodes(), 2);
  EXPECT_EQ(transport.sent[0].max_nodes(), 4);
  EXPECT_EQ(transport.sent[0].join_deadline_unix_ms(), deadline);
  // Delivered once: later reports leave the command out; running, no
  // deadline.
  clock_.Advance(absl::Seconds(3));
  reporter.Update(Running(1));
  clock_.Advance(kMinReportGap);
  reporter.Step();
  ASSERT_EQ(transport.sent.size(), 2u);
  EXPECT_TRUE(transport.sent[1].command().empty());
  EXPECT_EQ(transport.sent[1].join_deadline_unix_ms(), 0);
  EXPECT_EQ(transport.sent[1].min_nodes(), 2);
  // Where the node sits: in every report (the controller shows its latest).
  EXPECT_EQ(transport.sent[0].topology(), "zone=z1,switch=s0");
  EXPECT_EQ(transport.sent[1].topology(), "zone=z1,switch=s0");
}

TEST_F(ReporterTest, Command_IsSentAgainUntilAReportCarryingItIsAnswered) {
  ReporterOptions o = Options();
  o.command = "python train.py";
  FakeTransport transport;
  transport.next = absl::UnavailableError("down");
  Reporter reporter(o, &transport, &clock_, &clock_);
  reporter.Update(Running(1));
  reporter.Step();
  transport.next = absl::OkStatus();
  clock_.Advance(absl::Seconds(5));
  reporter.Step();
  clock_.Advance(absl::Seconds(5));
  reporter.Step();
  ASSERT_EQ(transport.sent.size(), 3u);
  EXPECT_EQ(transport.sent[0].command(), "python train.py");
  EXPECT_EQ(transport.sent[1].command(), "python train.py");
  EXPECT_TRUE(transport.sent[2].command().empty());
}

// ---- Preflight (issue 29): the API the agent calls.

// A preflight of `round` as the agent builds it (another node id and
// incarnation than the reporter's: they become its own).
v1::PreflightReport Preflight(uint64_t round, const std::vector<std::string>& failed = {}) {
  v1::PreflightReport p;
  p.set_node_id("whoever");
  p.set_incarnation(99);
  p.set_round(round);
  *p.add_results() = preflight::MakeResult("shm_size", v1::CheckResult::PASS, "8 GiB");
  *p.add_results() = preflight::Skipped("gpu_ecc", "no NVML");
  for (const std::string& check : failed) {
    *p.add_results() = preflight::MakeResult(check, v1::CheckResult::FAIL, check + " is bad");
  }
  return p;
}

TEST_F(ReporterTest, Preflight_IsSentSoonThenWithEveryReport) {
  reporter_.Update(Running(1));
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 1u);
  EXPECT_FALSE(transport_.sent[0].has_preflight());
  reporter_.SetPreflight(Preflight(2));
  // As a state change: within kMinReportGap, not at the next interval.
  EXPECT_EQ(reporter_.Step(), clock_.Now() + kMinReportGap);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 2u);
  const v1::HealthReport& r = transport_.sent[1];
  ASSERT_TRUE(r.has_preflight());
  EXPECT_EQ(r.preflight().node_id(), "pod-1");
  EXPECT_EQ(r.preflight().incarnation(), 7u);
  EXPECT_EQ(r.preflight().round(), 2u);
  EXPECT_EQ(r.preflight().results_size(), 2);
  // It passed: no event.
  EXPECT_THAT(Kinds(r), ::testing::ElementsAre(v1::ReportEvent::STATE_CHANGE));
  EXPECT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);
  // Every later report carries it (a controller restarted meanwhile has it
  // at once), until another replaces it.
  clock_.Advance(absl::Seconds(5));
  reporter_.Step();
  ASSERT_EQ(transport_.sent.size(), 3u);
  EXPECT_EQ(transport_.sent[2].preflight().round(), 2u);
  reporter_.SetPreflight(Preflight(3));
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  EXPECT_EQ(transport_.sent.back().preflight().round(), 3u);
}

TEST_F(ReporterTest, Preflight_FailedCheck_IsOneEventPerNewFailure) {
  reporter_.Update(Running(1));
  reporter_.Step();
  reporter_.SetPreflight(Preflight(2, {"dns", "gpu_row_remap"}));
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  const v1::HealthReport& r = transport_.sent.back();
  ASSERT_THAT(Kinds(r),
              ::testing::ElementsAre(v1::ReportEvent::STATE_CHANGE, v1::ReportEvent::PREFLIGHT));
  EXPECT_EQ(r.events(1).round(), 2u);
  EXPECT_EQ(r.events(1).cause(),
            "preflight: 2 failed: dns (dns is bad); gpu_row_remap (gpu_row_remap is bad)");
  EXPECT_GT(r.events(1).id(), 0u);
  EXPECT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);

  auto preflight_events = [&] {
    int n = 0;
    for (const v1::HealthReport& sent : transport_.sent) {
      for (const v1::ReportEvent& e : sent.events()) n += e.kind() == v1::ReportEvent::PREFLIGHT;
    }
    return n;
  };
  auto set_and_send = [&](v1::PreflightReport p) {
    reporter_.SetPreflight(std::move(p));
    clock_.Advance(kMinReportGap);
    reporter_.Step();
  };
  // The same failure again in the same round (a quarantined node checked
  // again): no new event.
  set_and_send(Preflight(2, {"dns", "gpu_row_remap"}));
  EXPECT_EQ(preflight_events(), 1);
  // Another set of checks, or the next round: a new one each.
  set_and_send(Preflight(2, {"dns"}));
  EXPECT_EQ(preflight_events(), 2);
  set_and_send(Preflight(3, {"dns"}));
  EXPECT_EQ(preflight_events(), 3);
  // Passed, then the same failure again: new.
  set_and_send(Preflight(3));
  set_and_send(Preflight(3, {"dns"}));
  EXPECT_EQ(preflight_events(), 4);
}

// A preflight the controller would refuse never costs the report: it goes
// without it (TrimToLimits), and the controller takes the rest.
TEST_F(ReporterTest, Preflight_OverItsCaps_IsDroppedNotTheReport) {
  reporter_.Update(Running(1));
  reporter_.Step();
  v1::PreflightReport bad = Preflight(2);
  bad.mutable_results(0)->set_check("Not A Label");
  reporter_.SetPreflight(bad);
  clock_.Advance(kMinReportGap);
  reporter_.Step();
  const v1::HealthReport& r = transport_.sent.back();
  EXPECT_FALSE(r.has_preflight());
  EXPECT_EQ(r.round(), 1u);
  EXPECT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);
}

TEST(GpuReports, FatalWhenNvmlSaysSo) {
  v1::NodeProbe probe;
  v1::Gpu* ok = probe.add_gpus();
  ok->set_index(0);
  ok->mutable_health()->set_ecc_known(true);
  v1::Gpu* reset = probe.add_gpus();
  reset->set_index(1);
  reset->mutable_health()->set_recovery_action_known(true);
  reset->mutable_health()->set_recovery_action(2);
  v1::Gpu* dbe = probe.add_gpus();
  dbe->set_index(2);
  dbe->mutable_health()->set_ecc_known(true);
  dbe->mutable_health()->set_ecc_dbe_volatile(4);
  v1::HealthReport r;
  AddGpuReports(probe, &r);
  ASSERT_EQ(r.gpus_size(), 3);
  EXPECT_FALSE(r.gpus(0).fatal());
  EXPECT_TRUE(r.gpus(1).fatal());
  EXPECT_THAT(r.gpus(1).reason(), HasSubstr("recovery action 2"));
  EXPECT_TRUE(r.gpus(2).fatal());
  EXPECT_THAT(r.gpus(2).reason(), HasSubstr("uncorrectable"));
}

TEST(CoordinatorView, MembersRoundsLostNodesAndRestartsWithinTheBounds) {
  rendezvous::Coordinator::Snapshot snap;
  snap.members = 3;
  snap.round = 25;
  for (int i = 0; i < 70; ++i) snap.lost_nodes.push_back(absl::StrCat("pod-", i));
  for (int i = 0; i < 20; ++i) {
    snap.restarts.push_back({static_cast<uint64_t>(i + 2), absl::StrCat("node pod-", i, " lost")});
  }
  snap.restarts.back().reason = std::string(3000, 'x');  // past the report's 1 KiB.
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id("pod-0");
  r.set_incarnation(1);
  r.set_sequence(1);
  AddCoordinatorView(snap, &r);
  controller::TrimToLimits(&r);
  ASSERT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);
  const v1::CoordinatorView& v = r.coordinator();
  EXPECT_EQ(v.members(), 3);
  EXPECT_EQ(v.rounds(), 25u);
  // The newest of each, oldest first.
  ASSERT_EQ(v.lost_nodes_size(), controller::kMaxLostNodes);
  EXPECT_EQ(v.lost_nodes(0), "pod-6");
  EXPECT_EQ(v.lost_nodes(controller::kMaxLostNodes - 1), "pod-69");
  ASSERT_EQ(v.restarts_size(), controller::kMaxRestartReasons);
  EXPECT_EQ(v.restarts(0).round(), 6u);
  EXPECT_EQ(v.restarts(0).reason(), "node pod-4 lost");
  EXPECT_EQ(v.restarts(controller::kMaxRestartReasons - 1).round(), 21u);
  EXPECT_LE(v.restarts(controller::kMaxRestartReasons - 1).reason().size(),
            controller::kMaxTextLength);

  v1::HealthReport empty;
  AddCoordinatorView(rendezvous::Coordinator::Snapshot{}, &empty);
  EXPECT_EQ(empty.coordinator().gives_up_unix_ms(), 0);
  EXPECT_TRUE(empty.has_coordinator());
  EXPECT_EQ(empty.coordinator().lost_nodes_size(), 0);
  EXPECT_EQ(empty.coordinator().restarts_size(), 0);
}

TEST(CoordinatorView, PhaseVerdictGatheringAndWhenItGivesUp) {
  rendezvous::Coordinator::Snapshot snap;
  snap.phase = rendezvous::Phase::kGathering;
  snap.round = 3;
  snap.gathering = 1;
  snap.min_nodes = 2;
  snap.max_nodes = 3;
  snap.gives_up_in = absl::Seconds(290);
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  v1::HealthReport r;
  AddCoordinatorView(snap, &r, now);
  const v1::CoordinatorView& v = r.coordinator();
  EXPECT_EQ(v.phase(), v1::CoordinatorView::GATHERING);
  EXPECT_EQ(v.gathering(), 1);
  EXPECT_EQ(v.min_nodes(), 2);
  EXPECT_EQ(v.max_nodes(), 3);
  EXPECT_EQ(v.gives_up_unix_ms(), absl::ToUnixMillis(now + absl::Seconds(290)));
  snap.phase = rendezvous::Phase::kFailed;
  snap.verdict = "only 1 of the 2 nodes needed re-joined within 5m";
  snap.gives_up_in = absl::InfiniteDuration();
  v1::HealthReport failed;
  AddCoordinatorView(snap, &failed, now);
  EXPECT_EQ(failed.coordinator().phase(), v1::CoordinatorView::FAILED);
  EXPECT_EQ(failed.coordinator().verdict(), snap.verdict);
  EXPECT_EQ(failed.coordinator().gives_up_unix_ms(), 0);
}

TEST(CoordinatorView, SlowNodesWithTheirEvidence) {
  rendezvous::Coordinator::Snapshot snap;
  snap.round = 2;
  rendezvous::SlowNode n;
  n.node_id = "pod-3";
  n.cause = "cpu";
  n.evidence = "node pod-3 is slow (cpu): its workers waited for a CPU 48% of the last 30s";
  n.since = absl::FromUnixMillis(1800000000123);
  n.slowdown_percent = 88;
  snap.slow_nodes.push_back(n);
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id("pod-0");
  r.set_incarnation(1);
  r.set_sequence(1);
  AddCoordinatorView(snap, &r);
  ASSERT_TRUE(controller::ValidateHealthReport(r).ok()) << controller::ValidateHealthReport(r);
  ASSERT_EQ(r.coordinator().slow_nodes_size(), 1);
  const v1::SlowNodeView& v = r.coordinator().slow_nodes(0);
  EXPECT_EQ(v.node_id(), "pod-3");
  EXPECT_EQ(v.cause(), "cpu");
  EXPECT_EQ(v.evidence(), n.evidence);
  EXPECT_EQ(v.since_unix_ms(), 1800000000123);
  EXPECT_EQ(v.slowdown_percent(), 88);
}

TEST(AgentRss, IsReadFromProc) { EXPECT_GT(AgentRssBytes(), 1u << 20); }

}  // namespace
}  // namespace trainlet::agent

#include "kubeflow/trainer_status.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kubeflow/testing/fake_trainer_server.h"

namespace trainlet::kubeflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

constexpr char kUrl[] =
    "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama/status";

std::map<std::string, std::string> TrainerEnv() {
  return {{kServerUrlEnv, kUrl},
          {kCaCertEnv, "/var/run/secrets/kubeflow/trainer/ca.crt"},
          {kTokenEnv, "/var/run/secrets/kubeflow/trainer/token"}};
}

// ---- The pod's variables.

TEST(EndpointFromEnv, Absent_IsNothing) {
  absl::StatusOr<std::optional<TrainerEndpoint>> e = EndpointFromEnv({{"HOME", "/root"}});
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
  e = EndpointFromEnv({{kServerUrlEnv, ""}});
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
}

TEST(EndpointFromEnv, TrainersUrl_GivesHostPortPathAndFiles) {
  absl::StatusOr<std::optional<TrainerEndpoint>> e = EndpointFromEnv(TrainerEnv());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->has_value());
  const TrainerEndpoint& t = **e;
  EXPECT_EQ(t.target.host, "kubeflow-trainer-controller-manager.kubeflow-system.svc");
  EXPECT_EQ(t.target.port, 10443);
  EXPECT_EQ(t.target.path,
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama/status");
  EXPECT_EQ(t.target.ca_file, "/var/run/secrets/kubeflow/trainer/ca.crt");
  EXPECT_EQ(t.token_file, "/var/run/secrets/kubeflow/trainer/token");
}

TEST(EndpointFromEnv, Ipv6AndDefaultPort) {
  auto env = TrainerEnv();
  env[kServerUrlEnv] = "https://[fd00::1]/x";
  auto e = EndpointFromEnv(env);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->target.host, "fd00::1");
  EXPECT_EQ((*e)->target.port, 443);
}

TEST(EndpointFromEnv, BadUrlOrNoToken_NamesTheVariable) {
  for (const char* url :
       {"http://trainer:10443/status", "https://trainer:10443", "https://trainer:0/status",
        "https://tra iner/status", "https://trainer/st atus", "https://[fd00::1/x"}) {
    auto env = TrainerEnv();
    env[kServerUrlEnv] = url;
    auto e = EndpointFromEnv(env);
    ASSERT_FALSE(e.ok()) << url;
    EXPECT_THAT(e.status().message(), HasSubstr("KUBEFLOW_TRAINER_SERVER_URL=")) << url;
  }
  auto env = TrainerEnv();
  env.erase(kTokenEnv);
  auto e = EndpointFromEnv(env);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("KUBEFLOW_TRAINER_SERVER_TOKEN"));
}

// ---- The body.

TEST(TrainerStatusJson, EveryField_InTrainersNames) {
  TrainerStatus s;
  s.progress_percentage = 45;
  s.estimated_remaining_seconds = 795649;
  s.metrics = {{"loss", "0.2347"}, {"lr", "1e-4"}};
  s.last_updated = absl::FromUnixSeconds(1737628245);  // 2025-01-23T10:30:45Z
  EXPECT_EQ(TrainerStatusJson(s),
            R"({"trainerStatus":{"progressPercentage":45,"estimatedRemainingSeconds":795649,)"
            R"("metrics":[{"name":"loss","value":"0.2347"},{"name":"lr","value":"1e-4"}],)"
            R"("lastUpdatedTime":"2025-01-23T10:30:45Z"}})");
  EXPECT_EQ(testing::TrainerBodyError(TrainerStatusJson(s)), "");
}

TEST(TrainerStatusJson, UnknownFieldsLeftOut_TimeAlwaysThere) {
  TrainerStatus s;
  s.last_updated = absl::FromUnixSeconds(0) + absl::Milliseconds(999);
  EXPECT_EQ(TrainerStatusJson(s),
            R"({"trainerStatus":{"lastUpdatedTime":"1970-01-01T00:00:00Z"}})");
  EXPECT_EQ(testing::TrainerBodyError(TrainerStatusJson(s)), "");
}

TEST(TrainerStatusJson, QuotesInValuesAreEscaped) {
  TrainerStatus s;
  s.metrics = {{"a", "x\"y\\z"}};
  EXPECT_THAT(TrainerStatusJson(s), HasSubstr(R"("value":"x\"y\\z")"));
  EXPECT_EQ(testing::TrainerBodyError(TrainerStatusJson(s)), "");
}

// The test server's own checks refuse what Trainer refuses (so that the
// tests above and below could fail).
TEST(TrainerBodyError, RefusesWhatTrainerRefuses) {
  const std::string t = R"("lastUpdatedTime":"2025-01-23T10:30:45Z")";
  EXPECT_EQ(testing::TrainerBodyError("{}"), "");
  EXPECT_NE(testing::TrainerBodyError("not json"), "");
  EXPECT_NE(testing::TrainerBodyError(R"({"trainerStatus":{}})"), "");  // no time.
  EXPECT_NE(testing::TrainerBodyError(R"({"trainerStatus":{"progressPercentage":45.5,)" + t + "}}"),
            "");
  EXPECT_NE(testing::TrainerBodyError(R"({"trainerStatus":{"progressPercentage":101,)" + t + "}}"),
            "");
  EXPECT_NE(
      testing::TrainerBodyError(R"({"trainerStatus":{"estimatedRemainingSeconds":-1,)" + t + "}}"),
      "");
  EXPECT_NE(testing::TrainerBodyError(
                R"({"trainerStatus":{"metrics":[{"name":"loss","value":0.5}],)" + t + "}}"),
            "");
  EXPECT_NE(testing::TrainerBodyError(R"({"trainerStatus":{"lastUpdatedTime":"yesterday"}})"), "");
  EXPECT_NE(
      testing::TrainerBodyError(R"({"trainerStatus":{"progressPercentage":4.5e1,)" + t + "}}"), "");
  EXPECT_EQ(
      testing::TrainerBodyError(R"({"trainerStatus":{"progressPercentage" : 45 ,)" + t + "}}"), "");
  EXPECT_EQ(testing::TrainerBodyError(
                R"({"trainerStatus":{"lastUpdatedTime":"2025-01-23T10:30:45.25+01:00"}})"),
            "");
  EXPECT_NE(testing::TrainerBodyError(
                R"({"trainerStatus":{"lastUpdatedTime":"2025-01-23T10:30:45+0100"}})"),
            "");
  EXPECT_NE(
      testing::TrainerBodyError(R"({"trainerStatus":{"lastUpdatedTime":"2025-01-23 10:30:45Z"}})"),
      "");
}

// ---- The estimate.

using Fields = std::vector<std::pair<std::string, std::string>>;
const absl::Time kT0 = absl::FromUnixSeconds(1000000);
const absl::Time kWall = absl::FromUnixSeconds(1737628245);

TEST(ProgressEstimate, PercentageAndRemaining_FromStepTotalAndRate) {
  ProgressEstimate e;
  e.Observe({{"step", "100"}, {"total_steps", "1000"}, {"loss", "0.5"}}, kT0);
  e.Observe({{"step", "110"}, {"total_steps", "1000"}, {"loss", "0.4"}, {"pid", "42"}},
            kT0 + absl::Seconds(5));
  EXPECT_DOUBLE_EQ(e.rate(), 2.0);
  std::optional<TrainerStatus> s = e.Status(kT0 + absl::Seconds(7), kWall, false);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->progress_percentage, 11);
  EXPECT_EQ(s->estimated_remaining_seconds, 445);  // 890 steps at 2/s.
  // Every numeric field but pid, as written.
  EXPECT_THAT(s->metrics,
              ElementsAre(Pair("step", "110"), Pair("total_steps", "1000"), Pair("loss", "0.4")));
  // When the line was written, in wall time.
  EXPECT_EQ(s->last_updated, kWall - absl::Seconds(2));
}

TEST(ProgressEstimate, NoTotal_MetricsOnly) {
  ProgressEstimate e;
  EXPECT_FALSE(e.Status(kT0, kWall, false).has_value());
  e.Observe({{"step", "7"}, {"loss", "nan?"}, {"phase", "warmup"}}, kT0);
  std::optional<TrainerStatus> s = e.Status(kT0, kWall, false);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->progress_percentage.has_value());
  EXPECT_FALSE(s->estimated_remaining_seconds.has_value());
  EXPECT_THAT(s->metrics, ElementsAre(Pair("step", "7")));
}

// Fields carry over from line to line: a progress file whose script
// writes the step on some lines and the loss or an evaluation's metrics on
// others, while each request replaces Trainer's whole trainerStatus, would
// otherwise drop the percentage or the loss every other time. A line
// without a step changes neither the step nor the total.
TEST(ProgressEstimate, FieldsCarryOver_StepAndLossFromDifferentLines) {
  ProgressEstimate e;
  e.Observe({{"step", "50"}, {"total", "500"}}, kT0);
  e.Observe({{"loss", "0.6931"}, {"learning_rate", "4.5e-05"}, {"epoch", "0.1"}},
            kT0 + absl::Seconds(1));
  std::optional<TrainerStatus> s = e.Status(kT0 + absl::Seconds(1), kWall, false);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->progress_percentage, 10);
  EXPECT_THAT(s->metrics,
              ElementsAre(Pair("step", "50"), Pair("total", "500"), Pair("loss", "0.6931"),
                          Pair("learning_rate", "4.5e-05"), Pair("epoch", "0.1")));
  EXPECT_EQ(s->last_updated, kWall);  // the latest line's time.
  e.Observe({{"step", "60"}, {"total", "500"}}, kT0 + absl::Seconds(2));
  e.Observe({{"total", "40"}, {"eval_loss", "0.7"}}, kT0 + absl::Seconds(3));
  s = e.Status(kT0 + absl::Seconds(3), kWall, false);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->progress_percentage, 12);
  EXPECT_THAT(s->metrics, ElementsAre(Pair("step", "60"), Pair("total", "40"),
                                      Pair("loss", "0.6931"), Pair("learning_rate", "4.5e-05"),
                                      Pair("epoch", "0.1"), Pair("eval_loss", "0.7")));
}

TEST(ProgressEstimate, TotalKeys_TotalStepsBeatsMaxStepsBeatsTotal) {
  ProgressEstimate e;
  e.Observe({{"step", "50"}, {"total", "400"}, {"max_steps", "200"}}, kT0);
  EXPECT_EQ(e.Status(kT0, kWall, false)->progress_percentage, 25);
  e.Observe({{"step", "50"}, {"total", "400"}}, kT0 + absl::Seconds(1));
  EXPECT_EQ(e.Status(kT0, kWall, false)->progress_percentage, 12);
  e.Observe({{"step", "50"}, {"total_steps", "100"}, {"max_steps", "200"}}, kT0 + absl::Seconds(2));
  EXPECT_EQ(e.Status(kT0, kWall, false)->progress_percentage, 50);
}

TEST(ProgressEstimate, StepPastTotal_Is100AndZero_Finished_Is100) {
  ProgressEstimate e;
  e.Observe({{"step", "1200"}, {"total_steps", "1000"}}, kT0);
  EXPECT_EQ(e.Status(kT0, kWall, false)->progress_percentage, 100);
  EXPECT_EQ(e.Status(kT0, kWall, false)->estimated_remaining_seconds, 0);
  ProgressEstimate f;
  f.Observe({{"step", "10"}, {"total_steps", "1000"}}, kT0);
  std::optional<TrainerStatus> s = f.Status(kT0 + absl::Seconds(3), kWall, /*finished=*/true);
  EXPECT_EQ(s->progress_percentage, 100);
  EXPECT_EQ(s->estimated_remaining_seconds, 0);
  EXPECT_EQ(s->last_updated, kWall);
}

TEST(ProgressEstimate, HugeSteps_NoOverflow) {
  ProgressEstimate e;
  e.Observe({{"step", "9000000000000000000"}, {"total_steps", "9200000000000000000"}}, kT0);
  EXPECT_EQ(e.Status(kT0, kWall, false)->progress_percentage, 97);
}

TEST(ProgressEstimate, StepGoesBack_RateStartsOver) {
  ProgressEstimate e;
  e.Observe({{"step", "100"}, {"total_steps", "1000"}}, kT0);
  e.Observe({{"step", "200"}, {"total_steps", "1000"}}, kT0 + absl::Seconds(10));
  EXPECT_DOUBLE_EQ(e.rate(), 10.0);
  // A restart from the checkpoint at step 150.
  e.Observe({{"step", "150"}, {"total_steps", "1000"}}, kT0 + absl::Seconds(60));
  EXPECT_EQ(e.rate(), -1);
  EXPECT_FALSE(e.Status(kT0, kWall, false)->estimated_remaining_seconds.has_value());
  e.Observe({{"step", "160"}, {"total_steps", "1000"}}, kT0 + absl::Seconds(65));
  EXPECT_DOUBLE_EQ(e.rate(), 2.0);
}

TEST(ProgressEstimate, RateOverTheLastWindowOnly) {
  ProgressEstimate e;
  // Slow for 10 minutes (1 step/s), then fast (10 steps/s) for 10 minutes.
  int64_t step = 0;
  absl::Time t = kT0;
  for (int i = 0; i < 60; ++i, t += absl::Seconds(10)) {
    e.Observe({{"step", absl::StrCat(step += 10)}}, t);
  }
  for (int i = 0; i < 60; ++i, t += absl::Seconds(10)) {
    e.Observe({{"step", absl::StrCat(step += 100)}}, t);
  }
  EXPECT_NEAR(e.rate(), 10.0, 1e-9);
}

// A line every 100 ms, the step moving by 100 every 10 s (a framework that
// reports what its logging interval saw): the rate is the window's
// 10 steps/s, not the last few lines' 0 or 1000.
TEST(ProgressEstimate, FrequentLines_TheWindowStillSpansMinutes) {
  ProgressEstimate e;
  absl::Time t = kT0;
  for (int i = 0; i < 3600; ++i, t += absl::Milliseconds(100)) {
    e.Observe({{"step", absl::StrCat(100 * (i / 100))}}, t);
  }
  EXPECT_NEAR(e.rate(), 10.0, 0.5);
}

// ---- The sender, on a simulated clock.

// Records every Post; answers with the scripted statuses (200 once they
// run out), or blocks until Cancel when told.
class FakePoster : public HttpsPoster {
 public:
  struct Call {
    HttpsTarget target;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    absl::Time at;
  };
  explicit FakePoster(Clock* clock) : clock_(clock) {}

  absl::StatusOr<HttpAnswer> Post(const HttpsTarget& target,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  absl::string_view body, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({target, headers, std::string(body), clock_->Now()});
    if (block_) {
      entered_.Notify();
      mu_.Await(absl::Condition(&cancelled_));
      return absl::CancelledError("cancelled");
    }
    if (script_.empty()) return HttpAnswer{200, "{}"};
    absl::StatusOr<HttpAnswer> a = script_.front();
    script_.pop_front();
    return a;
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void Reset() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = false;
  }

  void Script(absl::StatusOr<HttpAnswer> a) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(a));
  }
  void BlockNext() {
    absl::MutexLock lock(&mu_);
    block_ = true;
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  absl::Notification entered_;

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::StatusOr<HttpAnswer>> script_ ABSL_GUARDED_BY(mu_);
  bool block_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class SenderTest : public ::testing::Test {
 protected:
  SenderTest() : poster_(&clock_) {
    options_.endpoint = **EndpointFromEnv(TrainerEnv());
    options_.endpoint.token_file = root_.Write("token", "eyJhbGciOi.token-1\n");
  }

  // The agent's status with node rank `node_rank` whose global rank 0
  // wrote `line` now.
  agent::AgentStatus Status(int node_rank, const std::string& line) {
    agent::AgentStatus s;
    s.state = agent::RoundState::kRunning;
    s.node_rank = node_rank;
    agent::WorkerProgress p;
    p.local_rank = 0;
    p.global_rank = node_rank * 2;
    p.line = line;
    p.updated = clock_.Now();
    s.progress.push_back(p);
    agent::WorkerProgress q = p;  // a higher rank further ahead: not the one shown.
    q.local_rank = 1;
    q.global_rank = p.global_rank + 1;
    q.line = "step=999999 total_steps=1000000";
    s.progress.push_back(q);
    return s;
  }

  trainlet::testing::TempRoot root_;
  SimulatedClock clock_;
  SimulatedClock wall_{absl::FromUnixSeconds(1737628245)};
  FakePoster poster_;
  SenderOptions options_;
};

TEST_F(SenderTest, NodeZero_SendsTheLowestRanksProgress_WithTheToken) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=10 total_steps=100 loss=0.5"));
  sender.Step();
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].target.host, "kubeflow-trainer-controller-manager.kubeflow-system.svc");
  EXPECT_EQ(calls[0].target.path,
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama/status");
  EXPECT_THAT(calls[0].headers, ElementsAre(Pair("Authorization", "Bearer eyJhbGciOi.token-1")));
  EXPECT_EQ(calls[0].body,
            R"({"trainerStatus":{"progressPercentage":10,)"
            R"("metrics":[{"name":"step","value":"10"},{"name":"total_steps","value":"100"},)"
            R"({"name":"loss","value":"0.5"}],"lastUpdatedTime":"2025-01-23T10:30:45Z"}})");
  EXPECT_EQ(sender.stats().sent, 1);
}

TEST_F(SenderTest, OtherNodes_AndNoProgress_SendNothing) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(1, "step=10 total_steps=100"));
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  agent::AgentStatus none;
  none.node_rank = 0;
  sender.Update(none);
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  sender.Update(Status(0, "phase=warmup"));  // nothing numeric: nothing to show.
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  EXPECT_TRUE(poster_.calls().empty());
}

// Node rank 0 moves to another node in a later round: this node stops
// sending (its retry too); when it has rank 0 again it starts over, with
// nothing carried over from before (no stale loss, no old rate).
TEST_F(SenderTest, RankZeroMoves_StopsSending_StartsOverWhenBack) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=10 total_steps=100 loss=1.5"));
  sender.Step();
  poster_.Script(absl::UnavailableError("refused"));
  clock_.Advance(absl::Seconds(5));
  sender.Update(Status(0, "step=20 total_steps=100 loss=1.2"));
  sender.Step();  // fails: a retry is due after the backoff.
  ASSERT_EQ(poster_.calls().size(), 2u);
  sender.Update(Status(1, "step=30 total_steps=100 loss=1.1"));
  clock_.Advance(absl::Minutes(10));
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  EXPECT_EQ(poster_.calls().size(), 2u);
  sender.Update(Status(0, "step=5 total_steps=100"));  // back, from a checkpoint.
  sender.Step();
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_THAT(calls[2].body, HasSubstr(R"("progressPercentage":5,"metrics":[{"name":"step")"));
  EXPECT_THAT(calls[2].body, Not(HasSubstr("loss")));
  EXPECT_THAT(calls[2].body, Not(HasSubstr("estimatedRemainingSeconds")));
}

TEST_F(SenderTest, AtMostOneRequestPer5s_TheLatestProgress) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  // A line every 250 ms for 30 s, the sender stepped after each.
  for (int i = 1; i <= 120; ++i) {
    sender.Update(Status(0, absl::StrCat("step=", i, " total_steps=1000")));
    sender.Step();
    clock_.Advance(absl::Milliseconds(250));
  }
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 6u);  // t = 0, 5, 10, 15, 20, 25 s.
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].at - calls[i - 1].at, absl::Seconds(5)) << i;
  }
  // Each carries the line of its moment: step 101 at 25 s, 4 steps/s.
  EXPECT_THAT(calls.back().body, HasSubstr(R"("progressPercentage":10,)"));
  EXPECT_THAT(calls.back().body, HasSubstr(R"("estimatedRemainingSeconds":225,)"));
  EXPECT_THAT(calls.back().body, HasSubstr(R"({"name":"step","value":"101"})"));
}

TEST_F(SenderTest, Failing_OneWarning_BackoffDoublesToFiveMinutes_SuccessResets) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  for (int i = 0; i < 9; ++i) poster_.Script(HttpAnswer{503, R"({"message":"busy"})"});
  poster_.Script(absl::UnavailableError("trainer:10443: connect: Connection refused"));
  sender.Update(Status(0, "step=1 total_steps=100"));
  std::vector<absl::Duration> gaps;
  absl::Time last = clock_.Now();
  for (int i = 0; i < 10; ++i) {
    const absl::Time next = sender.Step();
    ASSERT_NE(next, absl::InfiniteFuture()) << i;
    gaps.push_back(next - last);
    last = next;
    clock_.Advance(next - clock_.Now());
  }
  EXPECT_THAT(
      gaps, ElementsAre(absl::Seconds(10), absl::Seconds(20), absl::Seconds(40), absl::Seconds(80),
                        absl::Seconds(160), absl::Seconds(300), absl::Seconds(300),
                        absl::Seconds(300), absl::Seconds(300), absl::Seconds(300)));
  // The 11th try works: nothing is left to send.
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  EXPECT_EQ(poster_.calls().size(), 11u);
  EXPECT_EQ(sender.stats().failed, 10);
  EXPECT_EQ(sender.stats().warnings, 1);
  EXPECT_EQ(sender.stats().sent, 1);
  EXPECT_EQ(sender.stats().backoff, absl::ZeroDuration());
  // Nothing new: nothing more. A later outage warns once again.
  EXPECT_EQ(sender.Step(), absl::InfiniteFuture());
  poster_.Script(HttpAnswer{500, ""});
  clock_.Advance(absl::Seconds(5));
  sender.Update(Status(0, "step=2 total_steps=100"));
  sender.Step();
  EXPECT_EQ(sender.stats().warnings, 2);
}

TEST_F(SenderTest, MissingToken_FailsLikeAnEndpoint) {
  options_.endpoint.token_file = root_.path() + "/no-such-token";
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=1"));
  EXPECT_EQ(sender.Step(), clock_.Now() + absl::Seconds(10));
  EXPECT_TRUE(poster_.calls().empty());
  EXPECT_EQ(sender.stats().warnings, 1);
}

// The token path naming a FIFO or a device fails like a missing token, at
// once: a read that blocks would hold the sender's thread, and with it the
// agent's exit (Stop joins it), forever. Kubelet's links (token ->
// ..data/token) still work.
TEST_F(SenderTest, TokenAFifoOrDevice_FailsAtOnce_LinksStillWork) {
  const std::string fifo = root_.path() + "/token.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  options_.endpoint.token_file = fifo;
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=1"));
  absl::Notification done;
  std::thread step([&] {
    sender.Step();
    done.Notify();
  });
  const bool in_time = done.WaitForNotificationWithTimeout(absl::Seconds(30));
  if (!in_time) close(open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));  // unblock it.
  step.join();
  EXPECT_TRUE(in_time) << "the sender blocked on a FIFO token";
  EXPECT_TRUE(poster_.calls().empty());
  EXPECT_EQ(sender.stats().failed, 1);

  options_.endpoint.token_file = "/dev/zero";
  TrainerStatusSender zero(options_, &poster_, &clock_, &wall_);
  zero.Update(Status(0, "step=1"));
  zero.Step();
  EXPECT_TRUE(poster_.calls().empty());
  EXPECT_EQ(zero.stats().failed, 1);

  root_.Write("..2026_11_29/token", "eyJhbGciOi.token-3\n");
  ASSERT_EQ(symlink("..2026_11_29", (root_.path() + "/..data").c_str()), 0);
  ASSERT_EQ(symlink("..data/token", (root_.path() + "/linked-token").c_str()), 0);
  options_.endpoint.token_file = root_.path() + "/linked-token";
  TrainerStatusSender linked(options_, &poster_, &clock_, &wall_);
  linked.Update(Status(0, "step=1"));
  linked.Step();
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THAT(calls[0].headers, ElementsAre(Pair("Authorization", "Bearer eyJhbGciOi.token-3")));
}

TEST_F(SenderTest, TokenReReadForEveryRequest) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=1"));
  sender.Step();
  root_.Write("token", "eyJhbGciOi.token-2");  // kubelet rotated it.
  clock_.Advance(absl::Seconds(5));
  sender.Update(Status(0, "step=2"));
  sender.Step();
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_THAT(calls[1].headers, ElementsAre(Pair("Authorization", "Bearer eyJhbGciOi.token-2")));
}

TEST_F(SenderTest, JobSucceeded_StopSends100Percent_WhenTheGapAllows) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=98 total_steps=100"));
  sender.Step();
  clock_.Advance(absl::Seconds(6));
  agent::AgentStatus done = Status(0, "step=98 total_steps=100");
  done.state = agent::RoundState::kDone;
  done.exit_code = 0;
  sender.Update(done);
  sender.Stop(absl::Seconds(1));
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_THAT(calls[1].body,
              HasSubstr(R"("progressPercentage":100,"estimatedRemainingSeconds":0,)"));
}

TEST_F(SenderTest, Stop_WithinTheGap_SendsNothingMore) {
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=98 total_steps=100"));
  sender.Step();
  clock_.Advance(absl::Seconds(2));
  sender.Update(Status(0, "step=99 total_steps=100"));
  sender.Stop(absl::Seconds(1));
  EXPECT_EQ(poster_.calls().size(), 1u);
}

// A job that succeeded within the gap of the last request: Stop waits out
// the rest of the gap (and no more) and sends the 100%, so that the
// TrainJob does not stay at the last percentage sent.
TEST_F(SenderTest, JobSucceeded_WithinTheGap_WaitsOutTheGapThenSends100Percent) {
  std::vector<absl::Duration> slept;
  options_.sleep = [&](absl::Duration d) {
    slept.push_back(d);
    clock_.Advance(d);
  };
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=98 total_steps=100"));
  sender.Step();
  clock_.Advance(absl::Seconds(2));
  agent::AgentStatus done = Status(0, "step=100 total_steps=100");
  done.state = agent::RoundState::kDone;
  done.exit_code = 0;
  sender.Update(done);
  sender.Stop(absl::Seconds(1));
  EXPECT_THAT(slept, ElementsAre(absl::Seconds(3)));
  std::vector<FakePoster::Call> calls = poster_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_GE(calls[1].at - calls[0].at, kMinSendGap);
  EXPECT_THAT(calls[1].body,
              HasSubstr(R"("progressPercentage":100,"estimatedRemainingSeconds":0,)"));
}

// A job that did not succeed (a SIGTERM, a failure) never waits: the exit
// is not held for a percentage that is not final.
TEST_F(SenderTest, JobFailed_WithinTheGap_NeitherWaitsNorSends) {
  std::vector<absl::Duration> slept;
  options_.sleep = [&](absl::Duration d) { slept.push_back(d); };
  TrainerStatusSender sender(options_, &poster_, &clock_, &wall_);
  sender.Update(Status(0, "step=98 total_steps=100"));
  sender.Step();
  clock_.Advance(absl::Seconds(2));
  agent::AgentStatus failed = Status(0, "step=99 total_steps=100");
  failed.state = agent::RoundState::kDone;
  failed.exit_code = 143;
  sender.Update(failed);
  sender.Stop(absl::Seconds(1));
  EXPECT_THAT(slept, ElementsAre());
  EXPECT_EQ(poster_.calls().size(), 1u);
}

// The agent's loop calls Update while a request hangs: it returns at once
// (were it to wait for the request, this test would hang), and Stop
// cancels the request.
TEST_F(SenderTest, HangingEndpoint_NeverBlocksUpdate_StopCancels) {
  TrainerStatusSender sender(options_, &poster_, Clock::Monotonic(), &wall_);
  poster_.BlockNext();
  sender.Start();
  agent::AgentStatus s = Status(0, "step=1 total_steps=10");
  s.progress[0].updated = Clock::Monotonic()->Now();
  sender.Update(s);
  poster_.entered_.WaitForNotification();
  for (int i = 2; i < 1000; ++i) {
    s.progress[0].line = absl::StrCat("step=", i, " total_steps=10000");
    sender.Update(s);
  }
  sender.Stop(absl::ZeroDuration());
  EXPECT_EQ(poster_.calls().size(), 1u);
  EXPECT_EQ(sender.stats().failed, 1);
}

}  // namespace
}  // namespace trainlet::kubeflow

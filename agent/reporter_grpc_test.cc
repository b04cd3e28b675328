// The reporter against a real controller over gRPC on 127.0.0.1, with its
// sender thread.
#include "agent/reporter_grpc.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "agent/reporter.h"
#include "controller/controller_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

// Waits (real time, bounded) for `done`.
template <typename F>
bool Eventually(F done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::unique_ptr<controller::ControllerHost> StartController(const std::string& token) {
  controller::ControllerHostOptions o;
  o.token = token;
  o.listen = {"127.0.0.1", 0};
  auto host = controller::ControllerHost::Start(o);
  EXPECT_TRUE(host.ok()) << host.status();
  return host.ok() ? std::move(*host) : nullptr;
}

ReporterOptions Options(const std::string& node) {
  ReporterOptions o;
  o.job_id = "job";
  o.node_id = node;
  o.incarnation = 99;
  o.interval = absl::Milliseconds(200);
  o.send_timeout = absl::Milliseconds(200);
  return o;
}

AgentStatus Running(uint64_t round) {
  AgentStatus s;
  s.state = RoundState::kRunning;
  s.round = round;
  s.node_rank = 0;
  s.nnodes = 1;
  s.world_size = 1;
  s.workers_running = 1;
  return s;
}

TEST(ReporterGrpcTest, ReportsReachTheControllerWithTheRestartCause) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "tok", {},
                                absl::Milliseconds(200));
  Reporter reporter(Options("pod-0"), &transport, Clock::Monotonic());
  reporter.Start();
  reporter.Update(Running(1));
  AgentStatus second = Running(2);
  second.last_failure = "local worker 0 exited with code 1";
  ASSERT_TRUE(Eventually([&] { return host->core().stats().reports >= 1; }));
  reporter.Update(second);
  ASSERT_TRUE(Eventually([&] {
    auto s = host->core().GetStatus("job");
    return s.ok() && s->summary().restarts() == 1;
  }));
  reporter.Stop();
  auto status = host->core().GetStatus("job");
  ASSERT_TRUE(status.ok());
  bool found = false;
  for (const auto& e : status->history()) {
    if (e.kind() == v1::HistoryEntry::RESTART) {
      found = true;
      EXPECT_EQ(e.cause(), "local worker 0 exited with code 1");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(reporter.stats().failed, 0);
}

TEST(ReporterGrpcTest, WrongToken_OnlyCountsAsNotDelivered) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "other", {},
                                absl::Milliseconds(200));
  Reporter reporter(Options("pod-0"), &transport, Clock::Monotonic());
  reporter.Start();
  reporter.Update(Running(1));
  ASSERT_TRUE(Eventually([&] { return reporter.stats().failed >= 1; }));
  reporter.Stop();
  EXPECT_EQ(host->core().stats().jobs, 0);
}

TEST(ReporterGrpcTest, ControllerDown_NeverBlocksUpdateAndStopIsQuick) {
  // A port nobody listens on: bind a controller, note its port, stop it.
  int port;
  {
    auto host = StartController("");
    ASSERT_NE(host, nullptr);
    port = host->port();
  }
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", port), "", {}, absl::Milliseconds(200));
  Reporter reporter(Options("pod-0"), &transport, Clock::Monotonic());
  reporter.Start();
  const absl::Time start = absl::Now();
  for (uint64_t round = 1; round <= 1000; ++round) reporter.Update(Running(round));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  ASSERT_TRUE(Eventually([&] { return reporter.stats().failed >= 1; }));
  EXPECT_LE(reporter.stats().pending_events, kMaxPendingEvents);
  const absl::Time stop = absl::Now();
  reporter.Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
}

}  // namespace
}  // namespace trainlet::agent

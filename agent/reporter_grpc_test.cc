// The reporter against a real controller over gRPC on 127.0.0.1, with its
// sender thread.
#include "agent/reporter_grpc.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

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
  o.tokens = controller::JobTokens::AnyJob(token);
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

// The whole reporting path: what the agent hands the reporter reaches the
// controller's answer (the node's preflight, the PREFLIGHT history entry)
// and its metrics.
TEST(ReporterGrpcTest, Preflight_ReachesTheControllerAndItsHistory) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "tok", {},
                                absl::Milliseconds(200));
  Reporter reporter(Options("pod-0"), &transport, Clock::Monotonic());
  reporter.Start();
  reporter.Update(Running(1));
  v1::PreflightReport p;
  p.set_round(1);
  v1::CheckResult* dns = p.add_results();
  dns->set_check("dns");
  dns->set_outcome(v1::CheckResult::FAIL);
  dns->set_reason("1 of 2 names do not resolve: pod-1 (Domain name not found)");
  reporter.SetPreflight(p);
  ASSERT_TRUE(Eventually([&] {
    auto s = host->core().GetStatus("job");
    return s.ok() && s->summary().nodes_preflight_failed() == 1;
  }));
  reporter.Stop();
  auto status = host->core().GetStatus("job");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_EQ(status->nodes(0).report().preflight().results(0).check(), "dns");
  bool found = false;
  for (const auto& e : status->history()) {
    if (e.kind() != v1::HistoryEntry::PREFLIGHT) continue;
    found = true;
    EXPECT_EQ(e.cause(),
              "preflight: 1 failed: dns (1 of 2 names do not resolve: pod-1 (Domain name not "
              "found))");
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(host->core().stats().reports_rejected, 0);
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

v1::HealthReport Report(const std::string& node, uint64_t incarnation, uint64_t sequence) {
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id(node);
  r.set_incarnation(incarnation);
  r.set_sequence(sequence);
  r.set_round(1);
  r.set_state(v1::HealthReport::RUNNING);
  r.set_report_interval_ms(200);
  return r;
}

// A TCP port that accepts connections (the kernel's backlog) and never
// speaks: a black-holed controller. Closed on destruction.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~SilentPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ReportStreamTest, ReportsWithEvents_AreAcknowledgedCalls_PeriodicOnesStreamed) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "tok", {},
                                absl::Milliseconds(200));
  auto with_event = [](v1::HealthReport r, v1::ReportEvent::Kind kind) {
    v1::ReportEvent* e = r.add_events();
    e->set_kind(kind);
    e->set_id(r.sequence());
    e->set_round(1);
    return r;
  };
  v1::HealthReport first = with_event(Report("pod-0", 5, 1), v1::ReportEvent::STATE_CHANGE);
  EXPECT_TRUE(NeedsAcknowledgement(first));
  ASSERT_TRUE(transport.Send(first, absl::Seconds(5)).ok());
  // Acknowledged: in the controller's core when Send returns.
  EXPECT_EQ(host->core().stats().reports, 1);
  EXPECT_EQ(transport.unary_sent(), 1);
  EXPECT_EQ(transport.streams_opened(), 0);
  v1::HealthReport periodic = with_event(Report("pod-0", 5, 2), v1::ReportEvent::PERIODIC);
  EXPECT_FALSE(NeedsAcknowledgement(periodic));
  ASSERT_TRUE(transport.Send(periodic, absl::Seconds(5)).ok());
  EXPECT_EQ(transport.unary_sent(), 1);
  EXPECT_EQ(transport.streams_opened(), 1);
  // Hang evidence, or a pending event beside PERIODIC: acknowledged.
  v1::HealthReport hang = with_event(Report("pod-0", 5, 3), v1::ReportEvent::PERIODIC);
  hang.set_hang_evidence("worker 0: no progress for 10m");
  EXPECT_TRUE(NeedsAcknowledgement(hang));
  v1::HealthReport restart = with_event(periodic, v1::ReportEvent::RESTART);
  EXPECT_TRUE(NeedsAcknowledgement(restart));
  // A refused acknowledged report fails its own Send, at once.
  v1::HealthReport invalid = first;
  invalid.set_incarnation(0);
  absl::Status s = transport.Send(invalid, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ASSERT_TRUE(transport.Close(absl::Seconds(5)).ok());
  EXPECT_EQ(host->core().stats().reports, 2);
}

TEST(ReportStreamTest, ManyReports_OneStream_AllProcessedOnceClosed) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "tok", {},
                                absl::Milliseconds(200));
  for (uint64_t seq = 1; seq <= 30; ++seq) {
    ASSERT_TRUE(transport.Send(Report("pod-0", 5, seq), absl::Seconds(5)).ok()) << seq;
  }
  // Close returns once the controller answered the stream's end: every
  // report is in its core, not only written.
  ASSERT_TRUE(transport.Close(absl::Seconds(5)).ok());
  EXPECT_EQ(host->core().stats().reports, 30);
  EXPECT_EQ(transport.streams_opened(), 1);
  // A Send after Close opens a new stream.
  ASSERT_TRUE(transport.Send(Report("pod-0", 5, 31), absl::Seconds(5)).ok());
  ASSERT_TRUE(transport.Close(absl::Seconds(5)).ok());
  EXPECT_EQ(host->core().stats().reports, 31);
  EXPECT_EQ(transport.streams_opened(), 2);
}

TEST(ReportStreamTest, RefusedReport_IsTheNextSendsErrorOnce_ThenANewStreamWorks) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", host->port()), "tok", {},
                                absl::Milliseconds(200));
  ASSERT_TRUE(transport.Send(Report("pod-0", 5, 1), absl::Seconds(5)).ok());
  // Invalid (no incarnation): written, then refused by the controller,
  // which ends the stream.
  ASSERT_TRUE(transport.Send(Report("pod-0", 0, 2), absl::Seconds(5)).ok());
  ASSERT_TRUE(Eventually([&] { return host->core().stats().reports >= 1; }));
  absl::Status s;
  ASSERT_TRUE(Eventually([&] {
    s = transport.Send(Report("pod-0", 5, 3), absl::Seconds(5));
    return !s.ok();
  }));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("incarnation"));
  ASSERT_TRUE(transport.Send(Report("pod-0", 5, 4), absl::Seconds(5)).ok());
  ASSERT_TRUE(transport.Close(absl::Seconds(5)).ok());
  EXPECT_EQ(transport.streams_opened(), 2);
}

TEST(ReportStreamTest, ControllerRestarted_OneSendFails_ThenReportsReachTheNewOne) {
  auto host = StartController("tok");
  ASSERT_NE(host, nullptr);
  const int port = host->port();
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", port), "tok", {},
                                absl::Milliseconds(200));
  ASSERT_TRUE(transport.Send(Report("pod-0", 5, 1), absl::Seconds(5)).ok());
  host.reset();
  controller::ControllerHostOptions o;
  o.tokens = controller::JobTokens::AnyJob("tok");
  o.listen = {"127.0.0.1", port};
  auto again = controller::ControllerHost::Start(o);
  ASSERT_TRUE(again.ok()) << again.status();
  uint64_t seq = 2;
  ASSERT_TRUE(Eventually([&] {
    return transport.Send(Report("pod-0", 5, seq++), absl::Milliseconds(500)).ok() &&
           transport.Close(absl::Seconds(5)).ok();
  }));
  EXPECT_GE((*again)->core().stats().reports, 1);
  EXPECT_GE(transport.streams_opened(), 2);
}

TEST(ReportStreamTest, BlackHoledController_SendTimesOut_AndCancelEndsAWaitingSend) {
  SilentPort silent;
  GrpcReportTransport transport(absl::StrCat("127.0.0.1:", silent.port()), "tok", {},
                                absl::Milliseconds(200));
  absl::Time start = absl::Now();
  absl::Status s = transport.Send(Report("pod-0", 5, 1), absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  absl::Status waited;
  absl::Notification sent;
  std::thread sender([&] {
    waited = transport.Send(Report("pod-0", 5, 2), absl::Seconds(30));
    sent.Notify();
  });
  // Until the Send is waiting, Cancel has nothing to end: repeat it.
  start = absl::Now();
  while (!sent.WaitForNotificationWithTimeout(absl::Milliseconds(50))) transport.Cancel();
  sender.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // A Send that timed out cancelled its stream: Close has nothing to wait for.
  EXPECT_EQ(transport.Send(Report("pod-0", 5, 3), absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  start = absl::Now();
  EXPECT_TRUE(transport.Close(absl::Seconds(5)).ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(transport.streams_opened(), 3);
}

}  // namespace
}  // namespace trainlet::agent

// GrpcRendezvousClient against a real in-process gRPC server whose
// Rendezvous service the test controls: reports and leaves go out in order
// from one sender thread, heartbeats queued behind a slow coordinator are
// coalesced, nothing blocks the caller, and shutdown is bounded even when
// the coordinator never answers.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {
namespace {

// Answers Report and Leave; a Report waits while `hold` is set.
class ScriptedService final : public v1::Rendezvous::CallbackService {
 public:
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::ReportRequest* request, v1::ReportResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(
          absl::StrCat("report:", request->state(), ":", request->message(),
                       request->has_slow() ? absl::StrCat(":slow", request->slow().seq()) : "",
                       request->has_preflight() ? ":preflight" : ""));
      mu_.Await(absl::Condition(
          +[](bool* hold) { return !*hold; }, &hold_));
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const v1::LeaveRequest* request,
                                  v1::LeaveResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(absl::StrCat("leave:", request->reason()));
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool AwaitCalls(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", port_);
    o.report_timeout = absl::Seconds(30);
    client_ = std::make_unique<GrpcRendezvousClient>(o);
  }
  void TearDown() override {
    service_.Hold(false);
    client_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  v1::ReportRequest Report(v1::ReportRequest::State state, const std::string& note) {
    v1::ReportRequest r;
    r.set_round(1);
    r.set_state(state);
    r.set_message(note);
    return r;
  }

  ScriptedService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcRendezvousClient> client_;
};

TEST_F(ClientTest, ReportsAndLeaveGoOutInOrderWithoutBlockingTheCaller) {
  std::atomic<int> answered{0};
  auto done = [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    ++answered;
  };
  client_->Report(Report(v1::ReportRequest::RUNNING, "a"), done);
  client_->Report(Report(v1::ReportRequest::FAILED, "b"), done);
  v1::LeaveRequest leave;
  leave.set_reason("bye");
  client_->Leave(leave, done);
  EXPECT_TRUE(client_->Flush(absl::Seconds(10)));
  EXPECT_EQ(answered.load(), 3);
  EXPECT_EQ(service_.calls(), (std::vector<std::string>{"report:1:a", "report:3:b", "leave:bye"}));
}

TEST_F(ClientTest, HeartbeatsQueuedBehindASlowCoordinatorAreCoalesced) {
  service_.Hold(true);
  std::atomic<int> answered{0};
  auto done = [&](const absl::Status&) { ++answered; };
  client_->Report(Report(v1::ReportRequest::RUNNING, "in-flight"), done);
  ASSERT_TRUE(service_.AwaitCalls(1, absl::Seconds(10)));
  const absl::Time before = absl::Now();
  for (int i = 0; i < 50; ++i) {
    client_->Report(Report(v1::ReportRequest::RUNNING, absl::StrCat("beat", i)), done);
  }
  EXPECT_LT(absl::Now() - before, absl::Seconds(1)) << "Report() must not block the caller";
  service_.Hold(false);
  ASSERT_TRUE(client_->Flush(absl::Seconds(10)));
  // The one in flight, then only the newest heartbeat; every callback ran.
  EXPECT_EQ(service_.calls(), (std::vector<std::string>{"report:1:in-flight", "report:1:beat49"}));
  EXPECT_EQ(answered.load(), 51);
}

// A coalesced heartbeat keeps what only an older one carried: a preflight
// report, and the newest of the slow-node signals.
TEST_F(ClientTest, CoalescedHeartbeats_KeepTheOlderOnesPreflightAndSlowSignals) {
  service_.Hold(true);
  client_->Report(Report(v1::ReportRequest::RUNNING, "in-flight"), nullptr);
  ASSERT_TRUE(service_.AwaitCalls(1, absl::Seconds(10)));
  v1::ReportRequest first = Report(v1::ReportRequest::RUNNING, "signals");
  first.mutable_slow()->set_seq(7);
  first.mutable_preflight();
  client_->Report(first, nullptr);
  client_->Report(Report(v1::ReportRequest::RUNNING, "beat"), nullptr);
  v1::ReportRequest newer = Report(v1::ReportRequest::RUNNING, "newer");
  newer.mutable_slow()->set_seq(8);
  client_->Report(newer, nullptr);
  client_->Report(Report(v1::ReportRequest::RUNNING, "last"), nullptr);
  service_.Hold(false);
  ASSERT_TRUE(client_->Flush(absl::Seconds(10)));
  EXPECT_EQ(service_.calls(),
            (std::vector<std::string>{"report:1:in-flight", "report:1:last:slow8:preflight"}));
}

TEST_F(ClientTest, ShutdownIsBoundedWhenTheCoordinatorNeverAnswers) {
  service_.Hold(true);
  absl::Notification answered;
  absl::Status status;
  client_->Report(Report(v1::ReportRequest::RUNNING, "stuck"), [&](const absl::Status& s) {
    status = s;
    answered.Notify();
  });
  ASSERT_TRUE(service_.AwaitCalls(1, absl::Seconds(10)));
  EXPECT_FALSE(client_->Flush(absl::Milliseconds(200)));
  const absl::Time before = absl::Now();
  client_.reset();  // cancels the call in flight (its deadline is 30 s)
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  ASSERT_TRUE(answered.HasBeenNotified());
  EXPECT_FALSE(status.ok());
}

TEST_F(ClientTest, JoinIsCancelledBySignal) {
  // Nothing listens on this port: the join keeps retrying until cancelled.
  int dead_port = 0;
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    dead_port = ntohs(addr.sin_port);
    close(fd);
  }
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", dead_port);
  GrpcRendezvousClient client(o);
  absl::Notification done;
  absl::Status status;
  client.Join(v1::JoinRequest(), absl::Minutes(1), [&](absl::StatusOr<v1::Assignment> r) {
    status = r.status();
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(100));
  client.CancelJoin();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
}

// A TCP socket bound to a free loopback port and not listening: connects
// to it are refused until Listen().
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~ClosedPort() { close(fd_); }
  void Listen() { ASSERT_EQ(listen(fd_, 16), 0); }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Small jobs watch every 5 ms; the period grows with the job so that all
// its agents together connect at most 3,200 times a second.
TEST(PortWatchTest, IntervalGrowsWithTheJob_AtMost3200ConnectsASecond) {
  EXPECT_EQ(PortWatchInterval(1), absl::Milliseconds(5));
  EXPECT_EQ(PortWatchInterval(4), absl::Milliseconds(5));
  EXPECT_EQ(PortWatchInterval(16), absl::Milliseconds(5));
  EXPECT_EQ(PortWatchInterval(32), absl::Milliseconds(10));
  EXPECT_EQ(PortWatchInterval(kPortWatchMaxNodes), absl::Milliseconds(20));
  EXPECT_EQ(PortWatchInterval(1000), absl::Milliseconds(20));
  EXPECT_EQ(PortWatchInterval(0), absl::Milliseconds(5));
  for (int n = 1; n <= kPortWatchMaxNodes; ++n) {
    EXPECT_LE(n / absl::ToDoubleSeconds(PortWatchInterval(n)), 3200.0 + 1e-6) << n;
  }
}

TEST(PortWatchTest, CallsOnOpenOnceThePortOpens) {
  ClosedPort port;
  std::atomic<int> calls{0};
  absl::Notification opened;
  PortWatch watch(port.target(), absl::Milliseconds(5), [&] {
    ++calls;
    opened.Notify();
  });
  // Refused dials do not count as open.
  EXPECT_FALSE(opened.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  port.Listen();
  ASSERT_TRUE(opened.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 1);  // once, then the watch is done.
}

TEST(PortWatchTest, NeverCallsOnOpenOnceDestroyed) {
  ClosedPort port;
  std::atomic<int> calls{0};
  {
    PortWatch watch(port.target(), absl::Milliseconds(5), [&] { ++calls; });
  }
  port.Listen();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(calls.load(), 0);
}

TEST(PortWatchTest, ATargetThatIsNotHostAndPortIsLeftAlone) {
  std::atomic<int> calls{0};
  {
    PortWatch watch("unix-socket-without-port", absl::Milliseconds(5), [&] { ++calls; });
  }
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace trainlet::rendezvous

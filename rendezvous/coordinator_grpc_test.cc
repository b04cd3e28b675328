// In-process tests over real gRPC: a real server on 127.0.0.1:0 with the
// coordinator service, called with the real client. (Jobs of real agents
// over it are agent/job_grpc_test.cc and agent/elastic_grpc_test.cc: they
// need agent/, which rendezvous/ must not depend on.)
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/periodic.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_server.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

class GrpcCoordinatorTest : public ::testing::Test {
 protected:
  void Start(int nnodes, const std::string& token = "tok") {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = o.max_nodes = nnodes;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Minutes(5);
    o.incarnation = NewIncarnation();
    core_ = std::make_unique<Coordinator>(o);
    service_ = std::make_unique<CoordinatorService>(core_.get(), token);
    auto server = GrpcServer::Start({"127.0.0.1:0"}, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port(0));
  }
  void TearDown() override {
    if (core_) core_->Shutdown("test over");
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  std::unique_ptr<CoordinatorClient> Client(const std::string& token = "tok") {
    return std::make_unique<CoordinatorClient>(ClientOptions{target_, token});
  }

  static v1::JoinRequest Req(const std::string& node, uint64_t inc, int hint = -1) {
    v1::JoinRequest r;
    r.mutable_member()->set_node_id(node);
    r.mutable_member()->set_incarnation(inc);
    r.set_job_id("job");
    r.set_protocol_version(kProtocolVersion);
    r.set_rank_hint(hint);
    r.set_local_world_size(2);
    r.set_master_port(29500);
    return r;
  }

  template <typename Pred>
  bool WaitFor(Pred pred, absl::Duration timeout = absl::Seconds(10)) {
    absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return pred();
  }

  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::string target_;
};

TEST_F(GrpcCoordinatorTest, Join_WrongToken_IsRejectedWithoutRetry) {
  Start(2, "right");
  auto res = Client("wrong")->Join(Req("a", 1), absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(res.status().message(), HasSubstr("--token-file"));
  auto none = Client("")->Join(Req("a", 1), absl::Now() + absl::Seconds(10));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(core_->GetSnapshot().gathering, 0);
}

TEST_F(GrpcCoordinatorTest, Join_OversizedRequest_IsRejected) {
  Start(2);
  auto req = Req("a", 1);
  req.mutable_topology()->add_gpu_uuids(std::string(2 << 20, 'x'));
  auto res = Client()->Join(req, absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(GrpcCoordinatorTest, AgentGoneWhileParked_IsDroppedFromTheRound) {
  Start(2);
  auto client = Client();
  std::thread t([&] {
    auto res = client->Join(Req("a", 1), absl::Now() + absl::Seconds(20));
    EXPECT_EQ(res.status().code(), absl::StatusCode::kCancelled);
  });
  ASSERT_TRUE(WaitFor([&] { return core_->GetSnapshot().gathering == 1; }));
  client->CancelJoin();
  t.join();
  EXPECT_TRUE(WaitFor([&] { return core_->GetSnapshot().gathering == 0; }));
}

TEST_F(GrpcCoordinatorTest, Join_AnsweredByTheCoordinatorBeforeTheCallersDeadline) {
  // The server takes no timer of its own for a call's deadline (it would
  // cost every parked Join one in gRPC's timer table): the coordinator reads
  // the caller's deadline and answers before it, saying what the round lacks.
  Start(2);
  absl::StatusOr<v1::Assignment> res;
  absl::Duration took;
  {
    // The coordinator's ticker, as CoordinatorHost runs it.
    PeriodicThread ticker(kCoordinatorTickEvery, [&] { core_->Tick(); });
    const absl::Time start = absl::Now();
    res = Client()->Join(Req("a", 1, 0), start + absl::Seconds(2));
    took = absl::Now() - start;
  }
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(
      res.status().message(),
      HasSubstr("did not close before the join's deadline: 1/2 joined; waiting for rank 1"));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_EQ(core_->GetSnapshot().gathering, 0);
}

TEST_F(GrpcCoordinatorTest, Join_Unreachable_FailsAtDeadlineNamingTheAddress) {
  // A port nobody listens on: bind one and close it.
  Start(1);
  std::string dead = target_;
  server_->Shutdown(absl::ZeroDuration());
  CoordinatorClient client(ClientOptions{dead, "tok"});
  absl::Time start = absl::Now();
  auto res = client.Join(Req("a", 1), absl::Now() + absl::Milliseconds(800));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(res.status().message(), HasSubstr(dead));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(GrpcCoordinatorTest, Join_UnresolvableName_RetriesThenNamesTheAddress) {
  CoordinatorClient client(ClientOptions{"no-such-host.invalid:29400", ""});
  auto res = client.Join(Req("a", 1), absl::Now() + absl::Milliseconds(800));
  ASSERT_FALSE(res.ok());
  EXPECT_THAT(res.status().message(), HasSubstr("no-such-host.invalid:29400"));
}

TEST(GrpcServerTest, PortInUse_IsAClearError) {
  auto first = GrpcServer::Start({"127.0.0.1:0"}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  std::string addr = absl::StrCat("127.0.0.1:", (*first)->port(0));
  auto second = GrpcServer::Start({addr}, {});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr(addr));
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  EXPECT_TRUE(IsAddressInUse(second.status()));
}

}  // namespace
}  // namespace trainlet::rendezvous

namespace trainlet::rendezvous {
namespace {

TEST(GrpcServerTest, HealthCheck_ReflectsServingState) {
  auto server = GrpcServer::Start({"127.0.0.1:0"}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port(0)),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  auto check = [&](const std::string& service, grpc::health::v1::HealthCheckResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    return stub->Check(&ctx, req, resp);
  };
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(check("", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  (*server)->SetServing(true);
  ASSERT_TRUE(check("", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(check("nope", &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace trainlet::rendezvous

namespace trainlet::rendezvous {
namespace {

TEST(RoundAnswerTrackerTest, ReportsOnceWhenTheRoundsLastAnswerIsSent) {
  SimulatedClock clock;
  RoundAnswerTracker t(&clock);
  t.Answered(1, 3);
  t.Answered(1, 3);
  t.Answered(1, 3);
  clock.Advance(absl::Milliseconds(4));
  EXPECT_EQ(t.Sent(1), std::nullopt);
  EXPECT_EQ(t.Sent(1), std::nullopt);
  clock.Advance(absl::Milliseconds(3));
  EXPECT_EQ(t.Sent(1), absl::Milliseconds(7));
  EXPECT_EQ(t.Sent(1), std::nullopt);  // a straggler: no second line.
}

TEST(RoundAnswerTrackerTest, ANewRoundStartsOverAndLateSendsOfTheOldOneAreIgnored) {
  SimulatedClock clock;
  RoundAnswerTracker t(&clock);
  t.Answered(1, 2);
  t.Answered(1, 2);
  EXPECT_EQ(t.Sent(1), std::nullopt);
  clock.Advance(absl::Seconds(1));
  t.Answered(2, 1);
  EXPECT_EQ(t.Sent(1), std::nullopt);  // round 1's last, after round 2 began.
  clock.Advance(absl::Milliseconds(2));
  EXPECT_EQ(t.Sent(2), absl::Milliseconds(2));
}

}  // namespace
}  // namespace trainlet::rendezvous

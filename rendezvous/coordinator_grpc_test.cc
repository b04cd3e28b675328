// In-process tests over real gRPC: a real server on 127.0.0.1:0 with the
// coordinator service, and simulated agents as threads using the real client.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// A simulated agent: join, watch, report, wait for the verdict.
struct SimAgent {
  v1::Assignment assignment;
  absl::Status join_status;
  absl::Mutex mu;
  std::vector<v1::Directive> directives ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;
  absl::Status end_status ABSL_GUARDED_BY(mu);
};

TEST_F(GrpcCoordinatorTest, EightAgentsAsThreads_JoinRunAndFinish) {
  constexpr int kNodes = 8;
  Start(kNodes);
  std::vector<std::unique_ptr<SimAgent>> agents;
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) agents.push_back(std::make_unique<SimAgent>());
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      auto client = Client();
      SimAgent& a = *agents[i];
      auto req = Req(absl::StrCat("node-", i), 100 + i, (kNodes - 1) - i);
      auto res = client->Join(req, absl::Now() + absl::Seconds(20));
      a.join_status = res.status();
      if (!res.ok()) return;
      a.assignment = *res;
      v1::WatchRequest w;
      *w.mutable_member() = req.member();
      w.set_job_id("job");
      w.set_round(res->round());
      auto stream = client->Watch(
          w,
          [&a](const v1::Directive& d) {
            absl::MutexLock l(&a.mu);
            a.directives.push_back(d);
          },
          [&a](const absl::Status& s) {
            absl::MutexLock l(&a.mu);
            a.ended = true;
            a.end_status = s;
          });
      v1::ReportRequest rep;
      *rep.mutable_member() = req.member();
      rep.set_job_id("job");
      rep.set_round(res->round());
      rep.set_state(v1::ReportRequest::SUCCEEDED);
      // The watch must be attached before the verdict can reach it.
      absl::SleepFor(absl::Milliseconds(50));
      EXPECT_TRUE(client->Report(rep, absl::Seconds(5)).ok());
      absl::MutexLock l(&a.mu);
      a.mu.AwaitWithTimeout(absl::Condition(&a.ended), absl::Seconds(10));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> ranks;
  for (int i = 0; i < kNodes; ++i) {
    SimAgent& a = *agents[i];
    ASSERT_TRUE(a.join_status.ok()) << a.join_status;
    EXPECT_EQ(a.assignment.node_rank(), (kNodes - 1) - i) << "rank hints are honoured";
    EXPECT_EQ(a.assignment.world_size(), 2 * kNodes);
    EXPECT_EQ(a.assignment.master_addr(), "127.0.0.1");
    ranks.insert(a.assignment.node_rank());
    absl::MutexLock l(&a.mu);
    EXPECT_TRUE(a.ended);
    ASSERT_EQ(a.directives.size(), 1u);
    EXPECT_TRUE(a.directives[0].has_job_finished());
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(kNodes));
  EXPECT_TRUE(core_->AwaitDrained(absl::Seconds(5)));
}

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

TEST_F(GrpcCoordinatorTest, WatchStreamBreak_FailsTheJobForOthers) {
  Start(2);
  auto c0 = Client(), c1 = Client();
  auto r0 = Req("a", 1, 0), r1 = Req("b", 2, 1);
  absl::StatusOr<v1::Assignment> a0, a1;
  std::thread t([&] { a1 = c1->Join(r1, absl::Now() + absl::Seconds(10)); });
  a0 = c0->Join(r0, absl::Now() + absl::Seconds(10));
  t.join();
  ASSERT_TRUE(a0.ok() && a1.ok());
  SimAgent s0;
  auto watch = [&](CoordinatorClient* c, const v1::JoinRequest& r, SimAgent* s) {
    v1::WatchRequest w;
    *w.mutable_member() = r.member();
    w.set_job_id("job");
    w.set_round(1);
    return c->Watch(
        w,
        [s](const v1::Directive& d) {
          absl::MutexLock l(&s->mu);
          s->directives.push_back(d);
        },
        [s](const absl::Status& st) {
          absl::MutexLock l(&s->mu);
          s->ended = true;
        });
  };
  SimAgent s1;
  auto w0 = watch(c0.get(), r0, &s0);
  auto w1 = watch(c1.get(), r1, &s1);
  ASSERT_TRUE(WaitFor([&] { return core_->GetSnapshot().members == 2; }));
  absl::SleepFor(absl::Milliseconds(100));
  w1.reset();  // agent b vanishes: its stream is cancelled.
  // Lost once kStreamLossGrace passed without a re-opened stream (this test
  // has no ticker: it ticks the real clock itself).
  ASSERT_TRUE(WaitFor([&] {
    core_->Tick();
    absl::MutexLock l(&s0.mu);
    return s0.ended;
  }));
  absl::MutexLock l(&s0.mu);
  ASSERT_EQ(s0.directives.size(), 1u);
  EXPECT_TRUE(s0.directives[0].has_job_failed());
  EXPECT_EQ(s0.directives[0].job_failed().failed_node_id(), "b");
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

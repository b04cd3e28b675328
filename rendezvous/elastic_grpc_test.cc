// A new round after losing one of 1,000 members, over real gRPC: a real
// server on 127.0.0.1 with the coordinator service on a SimulatedClock, and
// 1,000 joins and streams through the async stubs (no thread per member).
// The elastic failure suite with real agents is agent/elastic_grpc_test.cc
// (it needs agent/, which rendezvous/ must not depend on).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_server.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous {
namespace {

constexpr char kToken[] = "tok";
constexpr absl::Duration kWait = absl::Seconds(10);

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout = kWait) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return pred();
}

class ElasticGrpcTest : public ::testing::Test {
 protected:
  void StartCoordinator(int min_nodes, int max_nodes, int max_restarts) {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.max_restarts = max_restarts;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Seconds(60);
    o.incarnation = NewIncarnation();
    o.clock = &clock_;
    core_ = std::make_unique<Coordinator>(o);
    service_ = std::make_unique<CoordinatorService>(core_.get(), kToken);
    auto server = GrpcServer::Start({"127.0.0.1:0"}, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port(0));
  }
  void TearDown() override {
    if (core_) core_->Shutdown("test over");
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  void AdvanceAndTick(absl::Duration d) {
    clock_.Advance(d);
    core_->Tick();
  }

  SimulatedClock clock_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::string target_;
};

// 1,000 simulated agents over gRPC, without a thread each: joins go through
// the callback API, directive streams through the client's reactor. Measures
// from the loss of one member (its stream breaks) to every survivor holding
// its round-2 assignment: directives out, 999 re-joins in, round closed,
// assignments back.
TEST_F(ElasticGrpcTest, ThousandAgents_NewRoundAfterLosingOne) {
  constexpr int kAgents = 1000;
  StartCoordinator(kAgents / 2, kAgents, 3);
  // 8 agents per connection: the server allows kMaxStreamsPerConnection
  // concurrent streams on one (a real agent has its own connection).
  constexpr int kChannels = kAgents / 8;
  static_assert(kAgents / kChannels <= kMaxStreamsPerConnection);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(
        grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Rendezvous::NewStub(channels.back()));
    clients.push_back(std::make_unique<CoordinatorClient>(ClientOptions{target_, kToken}));
  }
  struct Agent {
    v1::JoinRequest request;
    std::unique_ptr<grpc::ClientContext> ctx;
    v1::JoinResponse response;
    v1::Assignment assignment;
    std::unique_ptr<WatchStream> stream;
  };
  std::vector<Agent> agents(kAgents);
  absl::Mutex mu;
  int joined = 0, failed = 0;
  std::atomic<int> rejoins{0};
  auto join = [&](int i) {
    Agent& a = agents[i];
    a.ctx = std::make_unique<grpc::ClientContext>();
    a.ctx->AddMetadata(kTokenMetadataKey, kToken);
    a.ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    stubs[i % kChannels]->async()->Join(a.ctx.get(), &a.request, &a.response,
                                        [&, i](grpc::Status s) {
                                          absl::MutexLock l(&mu);
                                          if (s.ok()) {
                                            agents[i].assignment = agents[i].response.assignment();
                                            ++joined;
                                          } else {
                                            ++failed;
                                          }
                                        });
  };
  for (int i = 0; i < kAgents; ++i) {
    v1::JoinRequest& r = agents[i].request;
    r.mutable_member()->set_node_id(absl::StrCat("node-", i));
    r.mutable_member()->set_incarnation(1000 + i);
    r.set_job_id("job");
    r.set_protocol_version(kProtocolVersion);
    r.set_rank_hint(i);
    r.set_local_world_size(8);
    r.set_master_port(29500);
    join(i);
  }
  {
    absl::MutexLock l(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kAgents; }, &joined),
                                    absl::Seconds(60)))
        << joined << " joined, " << failed << " failed";
    joined = 0;
  }
  // Every survivor re-joins the moment its Rejoin arrives (on a gRPC thread).
  for (int i = 0; i < kAgents; ++i) {
    v1::WatchRequest w;
    *w.mutable_member() = agents[i].request.member();
    w.set_job_id("job");
    w.set_round(1);
    agents[i].stream = clients[i % kChannels]->Watch(
        w,
        [&, i](const v1::Directive& d) {
          if (!d.has_rejoin()) return;
          agents[i].request.set_last_round(1);
          rejoins.fetch_add(1);
          join(i);
        },
        [](const absl::Status&) {});
  }
  ASSERT_TRUE(WaitFor([&] { return core_->GetSnapshot().watching == kAgents; }, absl::Seconds(30)));

  const absl::Time lost_at = absl::Now();
  agents[kAgents / 2].stream.reset();  // one member vanishes.
  // The coordinator sees the stream close; the stream-loss grace (150 ms,
  // simulated here, so not part of the figure) passes without a re-open.
  ASSERT_TRUE(WaitFor([&] { return core_->GetSnapshot().watching < kAgents; }));
  AdvanceAndTick(kStreamLossGrace);
  {
    absl::MutexLock l(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kAgents - 1; }, &joined),
                                    absl::Seconds(30)))
        << joined << " re-joined, " << rejoins.load() << " rejoins sent, " << failed << " failed";
  }
  const absl::Duration took = absl::Now() - lost_at;
  std::cout << "[ measure  ] 1000 agents: new round after losing one in "
            << absl::FormatDuration(took) << "\n";
  RecordProperty("new_round_ms", static_cast<int>(absl::ToInt64Milliseconds(took)));
  // Ranks: contiguous, survivors in their old order.
  for (int i = 0; i < kAgents; ++i) {
    if (i == kAgents / 2) continue;
    const v1::Assignment& a = agents[i].assignment;
    EXPECT_EQ(a.round(), 2u);
    EXPECT_EQ(a.nnodes(), kAgents - 1);
    EXPECT_EQ(a.node_rank(), i < kAgents / 2 ? i : i - 1);
  }
  // Generous bound for a loaded 2-core CI box; the figure itself is in
  // docs/elastic.md (target 300 ms).
  EXPECT_LT(took, absl::Seconds(3));
  for (Agent& a : agents) a.stream.reset();
}

}  // namespace
}  // namespace trainlet::rendezvous

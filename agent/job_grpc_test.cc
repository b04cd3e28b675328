// A whole job of real agents over real gRPC (agent/testing/grpc_job.h): a
// coordinator on 127.0.0.1:0 and N real agents as threads, each the round
// machine and its executor with the real client and a FakeWorkerGroup.
//
// These were rendezvous/coordinator_grpc_test.cc's cases with a test copy
// of the agent's protocol; they live in agent/ because rendezvous/ must not
// depend on agent/. The client and server cases without agents stay there.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/testing/grpc_job.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"

namespace trainlet::agent {
namespace {

using testing::GrpcJob;
using testing::JobAgent;
using testing::JobAgentOptions;
using testing::WaitFor;

class JobGrpcTest : public ::testing::Test {
 protected:
  void Start(int nnodes) {
    rendezvous::CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = o.max_nodes = nnodes;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Minutes(5);
    o.incarnation = rendezvous::NewIncarnation();
    absl::Status started = job_.StartCoordinator(o);
    ASSERT_TRUE(started.ok()) << started;
    nnodes_ = nnodes;
  }
  JobAgent* AddAgent(const std::string& node, uint64_t incarnation, int hint) {
    JobAgentOptions o;
    o.node = node;
    o.incarnation = incarnation;
    o.rank_hint = hint;
    o.min_nodes = o.max_nodes = nnodes_;
    return job_.AddAgent(o);
  }

  GrpcJob job_;
  int nnodes_ = 1;
};

TEST_F(JobGrpcTest, EightAgentsAsThreads_JoinRunAndFinish) {
  constexpr int kNodes = 8;
  Start(kNodes);
  std::vector<JobAgent*> agents;
  for (int i = 0; i < kNodes; ++i) {
    agents.push_back(AddAgent(absl::StrCat("node-", i), 100 + i, (kNodes - 1) - i));
  }
  for (JobAgent* a : agents) {
    absl::StatusOr<v1::Assignment> joined = a->AwaitJoin();
    ASSERT_TRUE(joined.ok()) << a->node() << ": " << joined.status();
  }
  // Each agent's stream is attached before its workers finish (the
  // verdict goes down the streams).
  ASSERT_TRUE(job_.AwaitWatching(kNodes));
  for (JobAgent* a : agents) a->ExitWorkers(0);
  std::set<int> ranks;
  for (int i = 0; i < kNodes; ++i) {
    JobAgent& a = *agents[i];
    const v1::Assignment assignment = a.assignment();
    EXPECT_EQ(assignment.node_rank(), (kNodes - 1) - i) << "rank hints are honoured";
    EXPECT_EQ(assignment.world_size(), 2 * kNodes);
    EXPECT_EQ(assignment.master_addr(), "127.0.0.1");
    ranks.insert(assignment.node_rank());
    EXPECT_EQ(a.AwaitExit(), kExitSuccess) << a.node();
    EXPECT_TRUE(a.AwaitStreamEnd().has_value());
    std::optional<v1::Directive> d = a.AwaitDirective();
    ASSERT_TRUE(d.has_value());
    EXPECT_TRUE(d->has_job_finished());
    EXPECT_FALSE(a.HasDirective()) << "exactly one directive";
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(kNodes));
  EXPECT_TRUE(job_.core()->AwaitDrained(absl::Seconds(5)));
}

TEST_F(JobGrpcTest, WatchStreamBreak_FailsTheJobForOthers) {
  Start(2);
  JobAgent* a = AddAgent("a", 1, 0);
  JobAgent* b = AddAgent("b", 2, 1);
  for (JobAgent* s : {a, b}) ASSERT_TRUE(s->AwaitJoin().ok());
  ASSERT_TRUE(job_.AwaitWatching(2));
  b->Vanish();  // agent b vanishes: its stream is cancelled.
  // Lost once kStreamLossGrace passed without a re-opened stream.
  ASSERT_TRUE(WaitFor([&] { return job_.core()->GetSnapshot().watching == 1; }));
  job_.AdvanceAndTick(rendezvous::kStreamLossGrace);
  std::optional<v1::Directive> d = a->AwaitDirective();
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->has_job_failed());
  EXPECT_EQ(d->job_failed().failed_node_id(), "b");
  EXPECT_FALSE(a->HasDirective()) << "exactly one directive";
  EXPECT_EQ(a->AwaitExit(), kExitPeerFailed);
}

}  // namespace
}  // namespace trainlet::agent

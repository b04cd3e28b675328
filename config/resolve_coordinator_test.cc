#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::RunSteps;

using Env = std::map<std::string, std::string>;
const Env kTrainerPod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                         {"PET_NNODES", "2"},
                         {"PET_NODE_RANK", "1"},
                         {"PET_MASTER_ADDR", "t-node-0-0.t"}};

TEST(ResolveCoordinatorAddress, KubernetesGivesAHost_ThePortStaysOurs) {
  RunSteps steps({}, kTrainerPod);
  ASSERT_TRUE(steps.Through(&ResolveCoordinatorAddress).ok());
  EXPECT_EQ(steps.config().coordinator_host, "t-node-0-0.t");
  EXPECT_EQ(steps.config().coordinator_port, kDefaultCoordinatorPort);
  EXPECT_EQ(steps.config().node_rank_hint, 1);
  EXPECT_TRUE(steps.inputs().coordinator_configured);
  ASSERT_TRUE(steps.inputs().rank_value.has_value());
  EXPECT_EQ(steps.inputs().rank_value->origin, "PET_NODE_RANK");
  EXPECT_THAT(steps.config().discovery_notes, Contains("node rank 1 from PET_NODE_RANK"));

  RunSteps flag({"--coordinator=[::1]:1234", "--nnodes=2"});
  ASSERT_TRUE(flag.Through(&ResolveCoordinatorAddress).ok());
  EXPECT_EQ(flag.config().coordinator_host, "::1");
  EXPECT_EQ(flag.config().coordinator_port, 1234);
}

TEST(ResolveCoordinatorAddress, EveryNodeButTheHostMustFindIt) {
  RunSteps lost({"--nnodes=2", "--node-rank=1"});
  absl::Status s = lost.Through(&ResolveCoordinatorAddress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node rank 1 (from --node-rank) joins the coordinator"));

  RunSteps no_rank({"--nnodes=3"});
  s = no_rank.Through(&ResolveCoordinatorAddress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("nnodes is 3 (from --nnodes)"));

  RunSteps too_high({"--nnodes=2", "--node-rank=2", "--coordinator=head"});
  s = too_high.Through(&ResolveCoordinatorAddress);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("must be below nnodes 2"));

  RunSteps host0({"--nnodes=2", "--node-rank=0"});
  EXPECT_TRUE(host0.Through(&ResolveCoordinatorAddress).ok()) << "rank 0 hosts it";
}

TEST(ResolveCoordinatorHost, NothingConfiguredRunsItInsideTheAgent) {
  RunSteps steps({});
  ASSERT_TRUE(steps.Through(&ResolveCoordinatorHost).ok());
  EXPECT_TRUE(steps.inputs().single_local);
  EXPECT_TRUE(steps.config().in_process_coordinator);
  EXPECT_EQ(steps.config().host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(steps.config().node_rank_hint, 0);
  EXPECT_EQ(steps.config().coordinator_port, 0) << "any free port";
  EXPECT_EQ(steps.config().bind_addr, "127.0.0.1");
  EXPECT_EQ(steps.config().health_bind_addr, "127.0.0.1");
}

TEST(ResolveCoordinatorHost, WhoHostsIt_AndWhereItListens) {
  RunSteps rank0({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(rank0.Through(&ResolveCoordinatorHost).ok());
  EXPECT_EQ(rank0.config().host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(rank0.config().coordinator_host, "127.0.0.1") << "it dials its own";
  EXPECT_EQ(rank0.config().bind_addr, "0.0.0.0") << "its peers dial it";

  RunSteps shared({"--nnodes=2", "--coordinator=[::1]:29400"});
  ASSERT_TRUE(shared.Through(&ResolveCoordinatorHost).ok());
  EXPECT_EQ(shared.config().host_coordinator, HostCoordinator::kIfPortFree);
  EXPECT_EQ(shared.config().bind_addr, "::1");

  RunSteps remote({"--nnodes=2", "--coordinator=10.0.0.9"});
  ASSERT_TRUE(remote.Through(&ResolveCoordinatorHost).ok());
  EXPECT_EQ(remote.config().host_coordinator, HostCoordinator::kNo);

  RunSteps pod({}, kTrainerPod);
  ASSERT_TRUE(pod.Through(&ResolveCoordinatorHost).ok());
  EXPECT_EQ(pod.config().host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(pod.config().health_bind_addr, "0.0.0.0") << "kubelet probes the pod IP";

  RunSteps bound({"--nnodes=2", "--node-rank=0", "--bind-addr=[::]"});
  ASSERT_TRUE(bound.Through(&ResolveCoordinatorHost).ok());
  EXPECT_EQ(bound.config().bind_addr, "::");
  EXPECT_EQ(bound.config().health_bind_addr, "::");
}

}  // namespace
}  // namespace trainlet::agent

#include "absl/strings/str_join.h"
#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::RunSteps;

TEST(ResolveTopology, NnodesFromKubernetes_AndWhereItCameFromForLaterSteps) {
  RunSteps steps({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"PET_NNODES", "3"}});
  ASSERT_TRUE(steps.Through(&ResolveTopology).ok());
  EXPECT_EQ(steps.config().nnodes.max, 3);
  EXPECT_EQ(steps.inputs().nnodes_value.origin, "PET_NNODES");
  EXPECT_TRUE(steps.inputs().multi_node);
  EXPECT_TRUE(steps.inputs().k8s.in_kubernetes);
  EXPECT_THAT(steps.config().discovery_notes, Contains("nnodes 3 from PET_NNODES"));

  RunSteps flag({"--nnodes=3"}, {{"PET_NNODES", "5"}});
  ASSERT_TRUE(flag.Through(&ResolveTopology).ok());
  EXPECT_EQ(flag.config().nnodes.max, 3) << "a flag beats discovery";
  EXPECT_TRUE(flag.config().discovery_notes.empty());
}

TEST(ResolveTopology, StandaloneDropsWhatThePodSaysOfOtherNodes) {
  RunSteps steps({"--standalone"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                    {"PET_NNODES", "4"},
                                    {"PET_NODE_RANK", "2"},
                                    {"PET_MASTER_ADDR", "head"}});
  ASSERT_TRUE(steps.Through(&ResolveTopology).ok());
  EXPECT_EQ(steps.config().nnodes.max, 1);
  EXPECT_FALSE(steps.inputs().multi_node);
  EXPECT_FALSE(steps.inputs().k8s.node_rank.has_value());
  EXPECT_FALSE(steps.inputs().k8s.coordinator_host.has_value());

  RunSteps conflict({"--standalone", "--nnodes=2"});
  absl::Status s = conflict.Through(&ResolveTopology);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("conflicts with --nnodes=2"));
}

TEST(ResolveTopology, TheMpiLauncherIsOneNodeMore_AndMpiJobsAreNotElastic) {
  RunSteps launcher({"--nnodes=2"}, {}, testing::Workstation(), MpiRole::kLauncher);
  ASSERT_TRUE(launcher.Through(&ResolveTopology).ok());
  EXPECT_EQ(launcher.config().nnodes.min, 3);
  EXPECT_EQ(launcher.config().nnodes.max, 3);

  RunSteps elastic({"--nnodes=1:2"}, {}, testing::Workstation(), MpiRole::kLauncher);
  absl::Status s = elastic.Through(&ResolveTopology);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("fixed number of worker pods"));
}

TEST(ResolveTopology, TorchrunsC10dBackendIsANote_AnEtcdServerAUsageError) {
  RunSteps c10d({"--rdzv-backend=C10D"});
  ASSERT_TRUE(c10d.Through(&ResolveTopology).ok());
  EXPECT_THAT(absl::StrJoin(c10d.config().notes, "\n"), HasSubstr("--rdzv-backend=c10d"));

  RunSteps etcd({"--rdzv-backend=etcd-v2"});
  absl::Status s = etcd.Through(&ResolveTopology);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cannot use an etcd server"));
}

TEST(ResolveTopology, AJobSetPodWithoutANodeCountIsRefused) {
  RunSteps steps({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                      {"JOB_COMPLETION_INDEX", "1"},
                      {"PET_NODE_RANK", "1"}});
  absl::Status s = steps.Through(&ResolveTopology);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no node count is set"));
}

}  // namespace
}  // namespace trainlet::agent

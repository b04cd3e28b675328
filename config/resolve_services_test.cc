#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::RunSteps;

TEST(ResolveServices, MasterPort_AFreeOneForASingleNodeRun) {
  RunSteps single({});
  ASSERT_TRUE(single.Through(&ResolveServices).ok());
  EXPECT_EQ(single.config().master_port, 0) << "picked at start";
  RunSteps multi({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(multi.Through(&ResolveServices).ok());
  EXPECT_EQ(multi.config().master_port, kDefaultMasterPort);
  RunSteps pet({"--nnodes=2", "--node-rank=0"}, {{"PET_MASTER_PORT", "23456"}});
  ASSERT_TRUE(pet.Through(&ResolveServices).ok());
  EXPECT_EQ(pet.config().master_port, 23456);
  EXPECT_THAT(pet.config().discovery_notes, Contains("master port 23456 from PET_MASTER_PORT"));
}

TEST(ResolveServices, HealthServerInKubernetes_ControllerOnItsDefaultPort) {
  RunSteps outside({"--controller=ctl"});
  ASSERT_TRUE(outside.Through(&ResolveServices).ok());
  EXPECT_EQ(outside.config().health_port, 0);
  EXPECT_EQ(outside.config().controller, "ctl:29600");
  EXPECT_EQ(outside.config().report_interval, absl::Seconds(5)) << "the table's default";
  RunSteps pod({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}});
  ASSERT_TRUE(pod.Through(&ResolveServices).ok());
  EXPECT_EQ(pod.config().health_port, kKubernetesHealthPort);

  RunSteps slow({"--report-interval=2h"});
  EXPECT_THAT(slow.Through(&ResolveServices).message(), HasSubstr("at most 1h"));
}

TEST(ResolveServices, PortsThisNodeListensOnMustDiffer) {
  RunSteps clash({"--nnodes=2", "--node-rank=0", "--health-port=29400"});
  absl::Status s = clash.Through(&ResolveServices);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--health-port: port 29400 is also the coordinator port"));
  // A node that does not host the coordinator does not listen on its port.
  RunSteps joins({"--nnodes=2", "--node-rank=1", "--coordinator=head", "--health-port=29400"});
  EXPECT_TRUE(joins.Through(&ResolveServices).ok());
  RunSteps same({"--health-port=7000", "--master-port=7000"});
  EXPECT_THAT(same.Through(&ResolveServices).message(), HasSubstr("is also --master-port"));
}

TEST(ResolveServices, PreflightGpu_OffByDefault_MinBusbwChecked) {
  RunSteps plain({});
  ASSERT_TRUE(plain.Through(&ResolveServices).ok());
  EXPECT_FALSE(plain.config().preflight_gpu);
  EXPECT_EQ(plain.config().preflight_min_gpu_busbw, 0);
  RunSteps on({"--preflight-gpu", "--preflight-min-gpu-busbw=150"});
  ASSERT_TRUE(on.Through(&ResolveServices).ok());
  EXPECT_TRUE(on.config().preflight_gpu);
  EXPECT_EQ(on.config().preflight_min_gpu_busbw, 150);
  RunSteps env({}, {{"TRAINLET_PREFLIGHT_GPU", "true"}});
  ASSERT_TRUE(env.Through(&ResolveServices).ok());
  EXPECT_TRUE(env.config().preflight_gpu);
  RunSteps bad({"--preflight-min-gpu-busbw=-1"});
  EXPECT_THAT(bad.Through(&ResolveServices).message(), HasSubstr("--preflight-min-gpu-busbw"));
}

}  // namespace
}  // namespace trainlet::agent

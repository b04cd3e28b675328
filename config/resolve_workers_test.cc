#include <memory>

#include "absl/strings/str_join.h"
#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using testing::RunSteps;

// A machine whose agent runs the node probe (main's AgentSystemInfo).
SystemInfo Probing(bool deferrable, int gpu_devices = 0) {
  SystemInfo sys = testing::Workstation();
  sys.node_probe_available = true;
  sys.node_probe_deferrable = deferrable;
  sys.gpu_devices = gpu_devices;
  sys.gpu_count = gpu_devices;
  return sys;
}

NodeProbeTiming TimingFor(std::vector<std::string> flags, const SystemInfo& sys) {
  RunSteps steps(std::move(flags), {}, sys);
  EXPECT_TRUE(steps.Through(&ResolveWorkers).ok());
  return steps.config().node_probe_timing;
}

TEST(ResolveWorkers, PlansTheProbeWhereItsAnswerCanChangeTheWorkers) {
  EXPECT_EQ(TimingFor({}, testing::Workstation()), NodeProbeTiming::kOff) << "no probe to run";
  EXPECT_EQ(TimingFor({"--probe-timeout=0"}, Probing(true)), NodeProbeTiming::kOff);
  EXPECT_EQ(TimingFor({}, Probing(true)), NodeProbeTiming::kOnceWorkersRun);
  EXPECT_EQ(TimingFor({}, Probing(false)), NodeProbeTiming::kBeforeWorkers)
      << "a probe that loads NVML: its GPUs may be the count";
  EXPECT_EQ(TimingFor({}, Probing(true, /*gpu_devices=*/2)), NodeProbeTiming::kBeforeWorkers);
  EXPECT_EQ(TimingFor({"--bind-numa"}, Probing(true)), NodeProbeTiming::kBeforeWorkers);
  EXPECT_EQ(TimingFor({"--nnodes=2"}, Probing(true)), NodeProbeTiming::kBeforeWorkers)
      << "NCCL advice for a multi-node job";
}

TEST(ResolveWorkers, TheCountWaitsForAProbeBeforeTheWorkers_UnlessItIsFixed) {
  RunSteps waits({}, {}, Probing(false));
  ASSERT_TRUE(waits.Through(&ResolveWorkers).ok());
  EXPECT_EQ(waits.config().nproc_per_node, 0);
  EXPECT_EQ(waits.config().probe_timeout, absl::Seconds(2)) << "the table's default";

  RunSteps fixed({"--nproc-per-node=3"}, {}, Probing(false));
  ASSERT_TRUE(fixed.Through(&ResolveWorkers).ok());
  EXPECT_EQ(fixed.config().nproc_per_node, 3);

  RunSteps bad({"--nproc-per-node=many"}, {}, Probing(false));
  EXPECT_EQ(bad.Through(&ResolveWorkers).code(), absl::StatusCode::kInvalidArgument)
      << "the syntax is checked before any probe";
}

TEST(ResolveWorkerCount, EachKindOverTheGpuFacts) {
  RunSteps steps({"--nproc-per-node=auto"});
  ASSERT_TRUE(steps.Through(&ResolveWorkers).ok());
  RunConfig c = steps.config();
  ASSERT_TRUE(ResolveWorkerCount(16, 4, "4 GPUs", &c).ok());
  EXPECT_EQ(c.nproc_per_node, 4);
  ASSERT_TRUE(ResolveWorkerCount(16, 0, "", &c).ok());
  EXPECT_EQ(c.nproc_per_node, 16);
  ASSERT_TRUE(ResolveWorkerCount(5000, 0, "", &c).ok());
  EXPECT_EQ(c.nproc_per_node, kMaxNprocPerNode);

  RunSteps cpu({"--nproc-per-node=cpu"});
  ASSERT_TRUE(cpu.Through(&ResolveWorkers).ok());
  EXPECT_EQ(cpu.config().nproc_per_node, 8) << "the workstation's CPUs";

  // No probe to wait for: counted at once, and no GPU is an error at once.
  RunSteps gpu({"--nproc-per-node=gpu"});
  absl::Status s = gpu.Through(&ResolveWorkers);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--nproc-per-node=gpu: no GPU found"));
}

TEST(ResolveWithNodeProbe, TheProbesGpusCountWhereItSawTheContainersView) {
  auto nvml = std::make_shared<v1::NodeProbe>();
  nvml->mutable_nvml()->set_status(v1::Source::OK);
  nvml->set_visible_gpu_count(4);
  nvml->set_visibility_note("4 GPUs (NVML)");
  const SystemInfo sys = Probing(false);
  RunSteps steps({}, {}, sys);
  ASSERT_TRUE(steps.Through(&ResolveWorkers).ok());
  RunConfig c = steps.config();
  ASSERT_TRUE(ResolveWithNodeProbe(nvml, "", {}, sys, &c).ok());
  EXPECT_EQ(c.nproc_per_node, 4);
  EXPECT_EQ(c.node_probe, nvml);
  EXPECT_THAT(absl::StrJoin(c.discovery_notes, "; "), HasSubstr("(default: 4 GPUs (NVML))"));

  // Without NVML (or the driver's procfs) the probe's GPUs are the whole
  // node's: /dev/nvidia* stays the count.
  auto sysfs_only = std::make_shared<v1::NodeProbe>();
  sysfs_only->set_visible_gpu_count(8);
  RunConfig d = steps.config();
  ASSERT_TRUE(ResolveWithNodeProbe(sysfs_only, "", {}, sys, &d).ok());
  EXPECT_EQ(d.nproc_per_node, 1);

  // Too slow: a warning, and the count from /dev/nvidia*.
  RunConfig slow = steps.config();
  ASSERT_TRUE(ResolveWithNodeProbe(nullptr, "did not finish within 2s", {}, sys, &slow).ok());
  EXPECT_EQ(slow.node_probe, nullptr);
  EXPECT_EQ(slow.nproc_per_node, 1);
  EXPECT_THAT(absl::StrJoin(slow.warnings, "; "),
              HasSubstr("node probe: did not finish within 2s; going on without it"));

  // --nproc-per-node=gpu needs the probe's answer before it can fail.
  RunSteps gpu({"--nproc-per-node=gpu"}, {}, sys);
  ASSERT_TRUE(gpu.Through(&ResolveWorkers).ok());
  RunConfig g = gpu.config();
  ASSERT_TRUE(ResolveWithNodeProbe(nvml, "", {}, sys, &g).ok());
  EXPECT_EQ(g.nproc_per_node, 4);
  RunConfig none = gpu.config();
  absl::Status s = ResolveWithNodeProbe(sysfs_only, "", {}, sys, &none);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--nproc-per-node=gpu: no GPU found"));
}

}  // namespace
}  // namespace trainlet::agent

#include "agent/node_probe.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

TEST(AgentProbeOptions, ReadsTheKnobsAndNeverLoadsNccl) {
  topology::ProbeOptions o = AgentProbeOptions({{"TRAINLET_NVML_LIBRARY", "/opt/libnvidia-ml.so.1"},
                                                {"TRAINLET_SYSFS_ROOT", "/fixture/sys"},
                                                {"CUDA_VISIBLE_DEVICES", "1"}});
  EXPECT_EQ(o.nvml.library, "/opt/libnvidia-ml.so.1");
  EXPECT_EQ(o.nvml.absent_reason, "") << "a library named on purpose is always tried";
  EXPECT_EQ(o.sysfs_root, "/fixture/sys");
  EXPECT_EQ(o.nccl_library, "");
  EXPECT_EQ(o.env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(AgentProbeOptions({{"TRAINLET_NVML_LIBRARY", "none"}}).nvml.library, "");
}

TEST(AgentProbeOptions, ProbeRootStandsInForSysProcAndDev) {
  topology::ProbeOptions o = AgentProbeOptions({{"TRAINLET_PROBE_ROOT", "/nonexistent/root"}});
  EXPECT_EQ(o.sysfs_root, "/nonexistent/root/sys");
  EXPECT_EQ(o.proc_root, "/nonexistent/root/proc");
  EXPECT_EQ(o.dev_root, "/nonexistent/root/dev");
  EXPECT_THAT(o.nvml.absent_reason, HasSubstr("no /nonexistent/root/dev/nvidiactl"));
  o = AgentProbeOptions(
      {{"TRAINLET_PROBE_ROOT", "/nonexistent/root"}, {"TRAINLET_SYSFS_ROOT", "/other/sys"}});
  EXPECT_EQ(o.sysfs_root, "/other/sys");
  EXPECT_EQ(o.proc_root, "/nonexistent/root/proc");
}

TEST(ProbeReadsThisMachine, OnlyWithoutATreeStandingIn) {
  EXPECT_TRUE(ProbeReadsThisMachine(AgentProbeOptions({})));
  EXPECT_TRUE(ProbeReadsThisMachine(AgentProbeOptions({{"TRAINLET_PROBE_ROOT", ""}})));
  EXPECT_FALSE(ProbeReadsThisMachine(AgentProbeOptions({{"TRAINLET_PROBE_ROOT", "/fixture"}})));
  EXPECT_FALSE(ProbeReadsThisMachine(AgentProbeOptions({{"TRAINLET_SYSFS_ROOT", "/fixture/sys"}})));
}

TEST(ProbeSummaryLine, SaysWhenGpusCameFromTheDriversProcfs) {
  v1::NodeProbe p;
  p.mutable_nvml()->set_status(v1::Source::ABSENT);
  p.mutable_nvml()->set_reason("NVML unavailable: static build");
  p.mutable_nvidia_procfs()->set_status(v1::Source::OK);
  p.mutable_nvidia_procfs()->set_version("550.54.15\x1b");
  p.set_visible_gpu_count(2);
  EXPECT_THAT(ProbeSummaryLine(p),
              HasSubstr("NVML unavailable: static build; GPUs from the NVIDIA driver's procfs, "
                        "driver 550.54.15\\x1b"));
}

// The summary spells NVML's status without the proto's reflection (which would build the
// descriptors on every run's path), so check it against the proto for every value.
TEST(ProbeSummaryLine, NamesEveryNvmlStatusAsTheProtoDoes) {
  const google::protobuf::EnumDescriptor* statuses = v1::Source::Status_descriptor();
  ASSERT_GT(statuses->value_count(), 1);
  for (int i = 0; i < statuses->value_count(); ++i) {
    v1::NodeProbe p;
    p.mutable_nvml()->set_status(static_cast<v1::Source::Status>(statuses->value(i)->number()));
    EXPECT_THAT(ProbeSummaryLine(p), HasSubstr("(NVML " + statuses->value(i)->name()))
        << statuses->value(i)->name();
  }
  v1::NodeProbe unknown;
  unknown.mutable_nvml()->set_status(static_cast<v1::Source::Status>(99));
  EXPECT_THAT(ProbeSummaryLine(unknown), HasSubstr("(NVML UNKNOWN"));
}

TEST(AgentProbeOptions, WithoutTheDriversDeviceNvmlIsNotTried) {
  topology::ProbeOptions o = AgentProbeOptions({});
  if (access("/dev/nvidiactl", F_OK) == 0) {
    EXPECT_EQ(o.nvml.absent_reason, "");
    EXPECT_EQ(o.nvml.library, "libnvidia-ml.so.1");
  } else {
    EXPECT_THAT(o.nvml.absent_reason, HasSubstr("no /dev/nvidiactl"));
    v1::NodeProbe p = topology::ProbeNode(o);
    EXPECT_EQ(p.nvml().status(), v1::Source::ABSENT);
  }
}

TEST(ProbeNodeBounded, ReturnsTheProbe) {
  topology::ProbeOptions o;
  o.sysfs_root = "/nonexistent";
  o.nccl_library.clear();
  o.read_nvml = [](const topology::NvmlOptions&, v1::NodeProbe* probe, std::vector<v1::Gpu>*) {
    probe->mutable_nvml()->set_status(v1::Source::OK);
  };
  std::string note;
  auto probe = ProbeNodeBounded(o, absl::Seconds(30), &note);
  ASSERT_NE(probe, nullptr);
  EXPECT_EQ(probe->nvml().status(), v1::Source::OK);
  EXPECT_EQ(note, "");
}

TEST(ProbeNodeBounded, AHungDriverCostsOnlyTheTimeout) {
  auto release = std::make_shared<absl::Notification>();
  auto finished = std::make_shared<absl::Notification>();
  topology::ProbeOptions o;
  o.sysfs_root = "/nonexistent";
  o.nccl_library.clear();
  o.read_nvml = [release, finished](const topology::NvmlOptions&, v1::NodeProbe*,
                                    std::vector<v1::Gpu>*) {
    release->WaitForNotification();
    finished->Notify();
  };
  std::string note;
  const absl::Time start = absl::Now();
  auto probe = ProbeNodeBounded(o, absl::Milliseconds(50), &note);
  EXPECT_EQ(probe, nullptr);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(note, HasSubstr("did not finish within 50ms"));
  // The probe's thread owns its state: it finishes after the caller left.
  release->Notify();
  EXPECT_TRUE(finished->WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST(WhenNodeProbeDone, CalledOnceTheProbeEnds_OrAtOnceAfterIt) {
  auto release = std::make_shared<absl::Notification>();
  topology::ProbeOptions o;
  o.sysfs_root = "/nonexistent";
  o.nccl_library.clear();
  o.read_nvml = [release](const topology::NvmlOptions&, v1::NodeProbe* probe,
                          std::vector<v1::Gpu>*) {
    release->WaitForNotification();
    probe->mutable_nvml()->set_status(v1::Source::OK);
  };
  std::shared_ptr<NodeProbeRun> run = StartNodeProbe(o);
  absl::Mutex mu;
  std::vector<std::shared_ptr<const v1::NodeProbe>> got;
  auto record = [&](std::shared_ptr<const v1::NodeProbe> p) {
    absl::MutexLock lock(&mu);
    got.push_back(std::move(p));
  };
  // Registering never waits for a probe still running.
  const absl::Time start = absl::Now();
  WhenNodeProbeDone(*run, record);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(got.empty());
  }
  release->Notify();
  std::string note;
  ASSERT_NE(AwaitNodeProbe(*run, absl::Seconds(30), &note), nullptr);
  {
    // The probe's thread calls it right after the result is published.
    absl::MutexLock lock(&mu);
    auto one = [&got] { return got.size() == 1; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&one), absl::Seconds(30)));
    EXPECT_EQ(got[0]->nvml().status(), v1::Source::OK);
  }
  // After the end: at once, on this thread.
  WhenNodeProbeDone(*run, record);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1], got[0]);
}

// What main gives the config: the probe is the agent's to run, and may wait
// for the workers only where it loads no driver and reads this machine.
TEST(AgentSystemInfo, SaysWhetherTheProbeMayWaitForTheWorkers) {
  const SystemInfo plain = AgentSystemInfo({{"TRAINLET_NVML_LIBRARY", "none"}});
  EXPECT_TRUE(plain.node_probe_available);
  EXPECT_TRUE(plain.node_probe_deferrable);
  EXPECT_FALSE(
      AgentSystemInfo({{"TRAINLET_NVML_LIBRARY", "libnvidia-ml.so.1"}}).node_probe_deferrable)
      << "a probe that loads NVML may hang in the driver";
  EXPECT_FALSE(
      AgentSystemInfo({{"TRAINLET_NVML_LIBRARY", "none"}, {"TRAINLET_PROBE_ROOT", "/nonexistent"}})
          .node_probe_deferrable)
      << "a fixture tree is not this machine";
}

// A config that plans the probe before its workers gets their count (and
// NCCL's config files) only from the agent's probe; any other plan is left
// alone.
TEST(ProbeNodeBeforeWorkers, ResolvesTheWorkerCountWithTheProbesAnswer) {
  trainlet::testing::TempRoot root;
  root.Write("etc/nccl.conf", "NCCL_IB_HCA=mlx5_4\n");
  const std::map<std::string, std::string> env = {{"TRAINLET_NVML_LIBRARY", "none"},
                                                  {"TRAINLET_PROBE_ROOT", root.path() + "/none"}};
  SystemInfo sys;
  sys.hostname = "node-a";
  sys.cpu_count = 4;
  sys.root = root.path();
  sys.node_probe_available = true;
  absl::StatusOr<RunConfig> c =
      ParseRunConfig({"--nnodes=2", "--coordinator=head", "--", "train"}, env, sys);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->node_probe_timing, NodeProbeTiming::kBeforeWorkers);
  EXPECT_EQ(c->nproc_per_node, 0) << "the count waits for the probe";
  ASSERT_TRUE(ProbeNodeBeforeWorkers(env, sys, &*c).ok());
  EXPECT_NE(c->node_probe, nullptr);
  EXPECT_EQ(c->nproc_per_node, 1);
  EXPECT_EQ(c->nccl_conf_vars.at("NCCL_IB_HCA"), "mlx5_4");

  absl::StatusOr<RunConfig> off = ParseRunConfig(
      {"--nnodes=2", "--coordinator=head", "--probe-timeout=0", "--", "train"}, env, sys);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->node_probe_timing, NodeProbeTiming::kOff);
  ASSERT_TRUE(ProbeNodeBeforeWorkers(env, sys, &*off).ok());
  EXPECT_EQ(off->node_probe, nullptr);
  EXPECT_EQ(off->nproc_per_node, 1);
  EXPECT_TRUE(off->nccl_conf_vars.empty());
}

TEST(StartNodeProbeOnceWorkersRun, StartsOnlyTheProbeTheConfigPlansForThen) {
  const std::map<std::string, std::string> env = {{"TRAINLET_NVML_LIBRARY", "none"},
                                                  {"TRAINLET_PROBE_ROOT", "/nonexistent"}};
  absl::Mutex mu;
  int calls = 0;
  std::shared_ptr<const v1::NodeProbe> got;
  auto record = [&](std::shared_ptr<const v1::NodeProbe> p) {
    absl::MutexLock lock(&mu);
    ++calls;
    got = std::move(p);
  };
  RunConfig config;
  config.node_probe_timing = NodeProbeTiming::kBeforeWorkers;  // the agent probed already
  StartNodeProbeOnceWorkersRun(config, env, record);
  config.node_probe_timing = NodeProbeTiming::kOnceWorkersRun;
  StartNodeProbeOnceWorkersRun(config, env, record);
  absl::MutexLock lock(&mu);
  auto called = [&calls] { return calls > 0; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&called), absl::Seconds(30)));
  EXPECT_NE(got, nullptr);
  EXPECT_EQ(calls, 1);
}

TEST(ProbeSummaryLine, SaysWhatTheNodeHasAndEscapes) {
  v1::NodeProbe p;
  p.set_visible_gpu_count(1);
  v1::Gpu* g = p.add_gpus();
  g->set_visible(true);
  g->set_name("H100\n\x1b[31m");
  p.mutable_nvml()->set_status(v1::Source::OK);
  p.mutable_nvml()->set_version("550.54.15");
  p.set_shm_bytes(uint64_t{64} << 30);
  p.set_probe_micros(3100);
  const std::string line = ProbeSummaryLine(p);
  EXPECT_THAT(line, HasSubstr("1 GPUs visible"));
  EXPECT_THAT(line, HasSubstr("NVML OK 550.54.15"));
  EXPECT_THAT(line, HasSubstr("/dev/shm 64.0 GiB"));
  EXPECT_THAT(line, ::testing::Not(HasSubstr("ms")));  // a timing is DEBUG (run_agent)
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
}

TEST(FatalGpuHealth, NamesEachFatalProblemOfAVisibleGpu_AndNothingUnknown) {
  v1::NodeProbe probe;
  v1::Gpu* healthy = probe.add_gpus();
  healthy->set_index(0);
  healthy->set_visible(true);
  healthy->mutable_health()->set_ecc_known(true);
  healthy->mutable_health()->set_ecc_sbe_volatile(12);  // correctable: not fatal
  healthy->mutable_health()->set_recovery_action_known(true);
  healthy->mutable_health()->set_recovery_action(0);
  v1::Gpu* unknown = probe.add_gpus();  // nothing known: not fatal either
  unknown->set_index(1);
  unknown->set_visible(true);
  unknown->mutable_health()->set_ecc_dbe_volatile(3);  // without ecc_known
  EXPECT_TRUE(FatalGpuHealth(probe).empty());

  v1::Gpu* bad = probe.add_gpus();
  bad->set_index(2);
  bad->set_pci_bus_id("0000:3b:00.0");
  bad->set_visible(true);
  bad->mutable_health()->set_ecc_known(true);
  bad->mutable_health()->set_ecc_dbe_volatile(2);
  bad->mutable_health()->set_recovery_action_known(true);
  bad->mutable_health()->set_recovery_action(2);
  bad->mutable_health()->set_remap_known(true);
  bad->mutable_health()->set_remap_pending(true);
  v1::Gpu* others = probe.add_gpus();  // another pod's GPU
  others->set_index(3);
  others->set_visible(false);
  others->mutable_health()->set_recovery_action_known(true);
  others->mutable_health()->set_recovery_action(1);
  std::vector<std::string> reasons = FatalGpuHealth(probe);
  ASSERT_EQ(reasons.size(), 3u);
  EXPECT_EQ(reasons[0], "GPU 2 (0000:3b:00.0): NVML's recovery action asks for a node reboot");
  EXPECT_EQ(reasons[1],
            "GPU 2 (0000:3b:00.0): 2 uncorrectable ECC error(s) since the driver loaded");
  EXPECT_EQ(reasons[2], "GPU 2 (0000:3b:00.0): a row remap waits for a GPU reset");
}

}  // namespace
}  // namespace trainlet::agent

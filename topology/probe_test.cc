#include "topology/probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/testing/fake_read_nvml.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/testing/test_util.h"

namespace trainlet::topology {
namespace {

using testing::AbsentNvml;
using testing::BuildCloudVm;
using testing::BuildCpuOnly;
using testing::BuildDgxH100;
using testing::DgxGpuBusIds;
using testing::DgxOptions;
using ::testing::ElementsAre;
using testing::ExpectGolden;
using testing::FakeH100Nvml;
using testing::FixtureTree;
using ::testing::HasSubstr;
using testing::ProbeJson;
using testing::Stable;

TEST(ProbeNode, DgxWithNvml_NvmlOrderCompletedFromSysfs) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = FakeH100Nvml(DgxGpuBusIds());
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.nvml().status(), v1::Source::OK);
  EXPECT_EQ(probe.sysfs().status(), v1::Source::OK);
  EXPECT_EQ(probe.nccl().status(), v1::Source::SKIPPED);
  ASSERT_EQ(probe.gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const v1::Gpu& g = probe.gpus(i);
    EXPECT_EQ(g.pci_bus_id(), DgxGpuBusIds()[i]);  // Normalised from "00000000:18:00.0".
    EXPECT_EQ(g.source(), "nvml+sysfs");
    EXPECT_EQ(g.numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(g.pci_path_size(), 3);
    EXPECT_EQ(g.name(), "NVIDIA H100 80GB HBM3");
    EXPECT_TRUE(g.visible());
    EXPECT_EQ(g.visible_ordinal(), i);
  }
  EXPECT_EQ(probe.visible_gpu_count(), 8);
  EXPECT_EQ(probe.gpus(3).root_complex(), "pci0000:5a");
  ExpectGolden("dgx_h100.json", ProbeJson(Stable(probe)));
}

TEST(ProbeNode, DgxWithoutNvml_SysfsListWithAWarning) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = AbsentNvml();
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.nvml().status(), v1::Source::ABSENT);
  ASSERT_EQ(probe.gpus_size(), 8);
  EXPECT_EQ(probe.gpus(0).source(), "sysfs");
  EXPECT_EQ(probe.gpus(0).uuid(), "");
  EXPECT_EQ(probe.visible_gpu_count(), 8);
  ASSERT_FALSE(Stable(probe).warnings().empty());
  EXPECT_THAT(Stable(probe).warnings(0),
              HasSubstr("GPU list comes from sysfs, which shows the whole node (8 NVIDIA GPUs)"));
  ExpectGolden("dgx_h100_sysfs.json", ProbeJson(Stable(probe)));
}

TEST(ProbeNode, NvmlInAContainer_OnlyItsGpusAndANote) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = FakeH100Nvml({"0000:ab:00.0", "0000:db:00.0"});
  v1::NodeProbe probe = ProbeNode(options);
  ASSERT_EQ(probe.gpus_size(), 2);
  EXPECT_EQ(probe.gpus(0).uuid(), "GPU-00000000-0000-0000-0000-000000000005");
  EXPECT_EQ(probe.gpus(1).index(), 1);
  EXPECT_EQ(probe.gpus(1).numa_node(), 1);
  EXPECT_EQ(probe.visible_gpu_count(), 2);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("6 more NVIDIA GPUs on the node"));
}

TEST(ProbeNode, WithoutNvml_TheDriversProcfsGivesTheContainersGpus) {
  FixtureTree tree;
  DgxOptions dgx;
  dgx.container_gpus = {"0000:ab:00.0", "0000:9a:00.0"};  // Listed out of bus order.
  BuildDgxH100(tree.builder(), dgx);
  ProbeOptions options = tree.Options();
  options.read_nvml = AbsentNvml();
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.nvml().status(), v1::Source::ABSENT);
  EXPECT_EQ(probe.nvidia_procfs().status(), v1::Source::OK);
  EXPECT_EQ(probe.nvidia_procfs().version(), "550.54.15");
  // Only the container's GPUs, in bus order (NVML's index order), completed
  // from sysfs: NUMA node, PCI path, link, cpumap.
  ASSERT_EQ(probe.gpus_size(), 2);
  EXPECT_EQ(probe.gpus(0).pci_bus_id(), "0000:9a:00.0");
  EXPECT_EQ(probe.gpus(1).pci_bus_id(), "0000:ab:00.0");
  EXPECT_EQ(probe.gpus(0).index(), 0);
  EXPECT_EQ(probe.gpus(1).index(), 1);
  EXPECT_EQ(probe.gpus(0).uuid(), "GPU-00000000-0000-0000-0000-000000000004");
  EXPECT_EQ(probe.gpus(0).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(probe.gpus(0).minor_number(), 4);
  EXPECT_EQ(probe.gpus(0).source(), "procfs+sysfs");
  EXPECT_EQ(probe.gpus(0).numa_node(), 1);
  EXPECT_EQ(probe.gpus(0).vendor_id(), "0x10de");
  EXPECT_EQ(probe.gpus(0).link_width(), 16);
  EXPECT_FALSE(probe.gpus(0).root_complex().empty());
  EXPECT_FALSE(probe.gpus(0).cpu_affinity().empty());
  EXPECT_TRUE(probe.gpus(0).nvlinks().empty());  // NVML only.
  EXPECT_EQ(probe.visible_gpu_count(), 2);
  EXPECT_EQ(probe.gpus(0).visible_ordinal(), 0);
  EXPECT_EQ(probe.gpus(1).visible_ordinal(), 1);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("6 more NVIDIA GPUs on the node"));
  EXPECT_THAT(Stable(probe).warnings(0), HasSubstr("GPUs come from the NVIDIA driver's procfs"));
  // CUDA_VISIBLE_DEVICES by ordinal and by UUID, within the container's GPUs.
  options.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  probe = ProbeNode(options);
  EXPECT_EQ(probe.visible_gpu_count(), 1);
  EXPECT_TRUE(probe.gpus(1).visible());
  EXPECT_EQ(probe.gpus(1).visible_ordinal(), 0);
  options.env = {{"CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000005"}};
  probe = ProbeNode(options);
  EXPECT_EQ(probe.visible_gpu_count(), 1);
  EXPECT_EQ(probe.gpus(1).visible_ordinal(), 0);
  // NVIDIA_VISIBLE_DEVICES naming one of a larger view (a privileged pod).
  options.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000004"}};
  probe = ProbeNode(options);
  EXPECT_EQ(probe.visible_gpu_count(), 1);
  EXPECT_EQ(probe.gpus(0).visible_ordinal(), 0);
}

TEST(ProbeNode, WithNvml_TheDriversProcfsIsNotRead) {
  FixtureTree tree;
  DgxOptions dgx;
  dgx.container_gpus = {"0000:9a:00.0"};
  BuildDgxH100(tree.builder(), dgx);
  ProbeOptions options = tree.Options();
  options.read_nvml = FakeH100Nvml({"0000:9a:00.0"});
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.nvidia_procfs().status(), v1::Source::SKIPPED);
  ASSERT_EQ(probe.gpus_size(), 1);
  EXPECT_EQ(probe.gpus(0).source(), "nvml+sysfs");
}

TEST(ProbeNode, WithoutNvml_ProcfsGpusWithoutDeviceNodesAreAnotherPods) {
  FixtureTree tree;
  DgxOptions dgx;
  dgx.container_gpus = {"0000:18:00.0", "0000:2a:00.0"};
  BuildDgxH100(tree.builder(), dgx);
  // A pod without GPUs that still sees the host's procfs: no device nodes.
  ASSERT_EQ(unlink((tree.builder().dev() + "/nvidia0").c_str()), 0);
  ASSERT_EQ(unlink((tree.builder().dev() + "/nvidia1").c_str()), 0);
  v1::NodeProbe probe = ProbeNode(tree.Options());
  EXPECT_EQ(probe.nvidia_procfs().status(), v1::Source::OK);
  EXPECT_EQ(probe.gpus_size(), 0);
  EXPECT_EQ(probe.visible_gpu_count(), 0);
}

TEST(ProbeNode, WithoutNvmlOrProcView_DeviceNodesAreCounted) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  tree.builder().Write("/dev/nvidia0", "");
  tree.builder().Write("/dev/nvidia1", "");
  tree.builder().Write("/dev/nvidiactl", "");
  v1::NodeProbe probe = ProbeNode(tree.Options());
  EXPECT_THAT(Stable(probe).warnings(0), HasSubstr("has only 2 nvidia device nodes"));
  EXPECT_EQ(probe.visible_gpu_count(), 8);  // Which two is unknown: all stay.
}

TEST(ProbeNode, VisibilityFromTheEnvironment) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = FakeH100Nvml(DgxGpuBusIds());
  options.env = {{"CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000006,3"}};
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.visible_gpu_count(), 1);  // The list ends at "3" (not a GPU- id).
  EXPECT_EQ(probe.gpus(6).visible_ordinal(), 0);
  options.env = {{"CUDA_VISIBLE_DEVICES", "5,2"}};
  probe = ProbeNode(options);
  EXPECT_EQ(probe.visible_gpu_count(), 2);
  EXPECT_EQ(probe.gpus(5).visible_ordinal(), 0);
  EXPECT_EQ(probe.gpus(2).visible_ordinal(), 1);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("2 of 8 GPUs"));
}

TEST(ProbeNode, CloudVm) {
  FixtureTree tree;
  BuildCloudVm(tree.builder());
  v1::NodeProbe probe = ProbeNode(tree.Options());
  ASSERT_EQ(probe.gpus_size(), 1);
  EXPECT_EQ(probe.gpus(0).numa_node(), -1);
  EXPECT_EQ(probe.gpus(0).visible_ordinal(), 0);
  EXPECT_EQ(probe.cpu_vendor(), "AuthenticAMD");
  ExpectGolden("cloud_vm.json", ProbeJson(Stable(probe)));
}

TEST(ProbeNode, CpuOnlyProbesCleanly) {
  FixtureTree tree;
  BuildCpuOnly(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = AbsentNvml();
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.gpus_size(), 0);
  EXPECT_EQ(probe.visible_gpu_count(), 0);
  EXPECT_EQ(probe.nics_size(), 1);
  EXPECT_EQ(probe.numa_nodes_size(), 1);
  EXPECT_TRUE(Stable(probe).warnings().empty());
  ExpectGolden("cpu_only.json", ProbeJson(Stable(probe)));
}

TEST(ProbeNode, MissingRootsAreDataNotFailures) {
  ProbeOptions options;
  options.sysfs_root = "/nonexistent/sys";
  options.proc_root = "/nonexistent/proc";
  options.shm_path = "/nonexistent/shm";
  options.nvml.library = "";
  options.nccl_library = "";
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.sysfs().status(), v1::Source::ABSENT);
  EXPECT_THAT(probe.sysfs().reason(), HasSubstr("/nonexistent/sys/bus/pci/devices"));
  EXPECT_EQ(probe.gpus_size(), 0);
  EXPECT_EQ(probe.boot_id(), "");
  EXPECT_EQ(probe.shm_bytes(), 0u);
}

TEST(ProbeNode, PodLimitWarningsComeWithTheProbe) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.read_nvml = FakeH100Nvml(DgxGpuBusIds());
  v1::NodeProbe probe = ProbeNode(options);
  // The memlock warning is there exactly when this process has a limit.
  bool memlock_warned =
      std::any_of(probe.warnings().begin(), probe.warnings().end(),
                  [](const std::string& w) { return w.find("memlock") != std::string::npos; });
  EXPECT_EQ(memlock_warned, probe.memlock_bytes() >= 0);
}

}  // namespace
}  // namespace trainlet::topology

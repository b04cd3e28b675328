#include "agent/gpu_placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/probe.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/visibility.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 8 GPUs, 4 per NUMA node, CPUs 0-3 on node 0 and 4-7 on node 1.
v1::NodeProbe EightGpus() {
  v1::NodeProbe p;
  p.mutable_nvml()->set_status(v1::Source::OK);
  for (int i = 0; i < 8; ++i) {
    v1::Gpu* g = p.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-" + std::to_string(i));
    g->set_pci_bus_id("0000:1" + std::to_string(i) + ":00.0");
    g->set_numa_node(i < 4 ? 0 : 1);
    g->set_visible(true);
    g->set_visible_ordinal(i);
    g->set_source("nvml+sysfs");
  }
  v1::NumaNode* n0 = p.add_numa_nodes();
  n0->set_id(0);
  n0->set_cpulist("0-3");
  v1::NumaNode* n1 = p.add_numa_nodes();
  n1->set_id(1);
  n1->set_cpulist("4-7");
  return p;
}

TEST(GpuPlacement, ListModeSetsTheWholeListOnlyWhenTheUserSetNone) {
  PlacementInput in;
  in.local_world_size = 8;
  auto out = PlanPlacement(EightGpus(), in);
  ASSERT_EQ(out.size(), 8u);
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(out[l].gpu_ordinal, l);
    ASSERT_TRUE(out[l].cuda_visible_devices.has_value());
    EXPECT_EQ(*out[l].cuda_visible_devices, "0,1,2,3,4,5,6,7");
    EXPECT_TRUE(out[l].cpus.empty()) << "no binding without --bind-numa";
  }
  in.env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3,4,5,6,7";
  out = PlanPlacement(EightGpus(), in);
  EXPECT_FALSE(out[0].cuda_visible_devices.has_value()) << "the user's list is never changed";
}

TEST(GpuPlacement, NoGpuNoBinding_NothingPlacedAndNothingToLog) {
  PlacementInput in;
  in.local_world_size = 2;
  auto out = PlanPlacement(v1::NodeProbe(), in);
  ASSERT_EQ(out.size(), 2u);
  for (const auto& w : out) {
    EXPECT_EQ(w.note, "") << "a bare \"local rank N\" line says nothing";
    EXPECT_LT(w.gpu_ordinal, 0);
    EXPECT_FALSE(w.cuda_visible_devices.has_value());
    EXPECT_TRUE(w.cpus.empty());
  }
}

TEST(GpuPlacement, MigDevicesVisible_NoGpuPlacement) {
  // The probe lists whole GPUs; MIG slices would be numbered differently by
  // CUDA, so ranks must not be pointed at whole-GPU ordinals.
  for (const char* var : {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    PlacementInput in;
    in.local_world_size = 2;
    in.gpu_binding = GpuBinding::kSingle;
    in.env[var] =
        "MIG-4f2e8a0b-6c3d-5e1f-9a7b-0c1d2e3f4a5b,MIG-5f2e8a0b-6c3d-5e1f-9a7b-0c1d2e3f4a5b";
    auto out = PlanPlacement(EightGpus(), in);
    ASSERT_EQ(out.size(), 2u) << var;
    for (const auto& w : out) {
      EXPECT_FALSE(w.cuda_visible_devices.has_value()) << var;
      EXPECT_LT(w.gpu_ordinal, 0) << var;
    }
  }
}

TEST(GpuPlacement, ListModeNamesTheGpusWhenTheAgentNarrowedTheSet) {
  // NVIDIA_VISIBLE_DEVICES=GPU-5,GPU-6 in a privileged pod that sees all 8:
  // CUDA would see 8, so the workers are told which two.
  v1::NodeProbe p = EightGpus();
  for (int i = 0; i < 8; ++i) {
    p.mutable_gpus(i)->set_visible(i == 5 || i == 6);
    p.mutable_gpus(i)->set_visible_ordinal(i == 5 ? 0 : i == 6 ? 1 : -1);
  }
  PlacementInput in;
  in.local_world_size = 2;
  in.bind_numa = true;
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(*out[0].cuda_visible_devices, "GPU-5,GPU-6");
  EXPECT_EQ(out[0].gpu_ordinal, 0);
  EXPECT_EQ(out[0].numa_node, 1);
  // Without UUIDs: their PCI-order ordinals among all the GPUs.
  for (int i = 0; i < 8; ++i) p.mutable_gpus(i)->clear_uuid();
  out = PlanPlacement(p, in);
  EXPECT_EQ(*out[1].cuda_visible_devices, "5,6");
  in.gpu_binding = GpuBinding::kSingle;
  out = PlanPlacement(p, in);
  EXPECT_EQ(*out[1].cuda_visible_devices, "6");
}

TEST(GpuPlacement, SingleModeNamesTheGpuAsTheUserDidElseByUuid) {
  v1::NodeProbe p = EightGpus();
  PlacementInput in;
  in.local_world_size = 2;
  in.gpu_binding = GpuBinding::kSingle;
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(*out[1].cuda_visible_devices, "GPU-1");
  // The user narrowed to physical GPUs 5 and 6: those are ordinals 0 and 1.
  for (int i = 0; i < 8; ++i) {
    p.mutable_gpus(i)->set_visible(i == 5 || i == 6);
    p.mutable_gpus(i)->set_visible_ordinal(i == 5 ? 0 : i == 6 ? 1 : -1);
  }
  in.env["CUDA_VISIBLE_DEVICES"] = "5, 6";
  out = PlanPlacement(p, in);
  EXPECT_EQ(*out[0].cuda_visible_devices, "5");
  EXPECT_EQ(*out[1].cuda_visible_devices, "6");
  EXPECT_EQ(out[1].gpu_bus_id, "0000:16:00.0");
}

TEST(GpuPlacement, WithoutNvmlTheSysfsListIsNotPlaced) {
  v1::NodeProbe p = EightGpus();
  p.mutable_nvml()->set_status(v1::Source::ABSENT);
  PlacementInput in;
  in.local_world_size = 2;
  in.bind_numa = true;
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(out[0].gpu_ordinal, -1);
  EXPECT_FALSE(out[0].cuda_visible_devices.has_value());
  EXPECT_EQ(out[1].numa_node, 1) << "bound as on a node without GPUs";
}

TEST(GpuPlacement, WithoutNvmlTheDriversProcfsListIsPlaced) {
  // A static build: NVML absent, the driver's procfs names the container's
  // GPUs, which are placed as NVML's would be.
  v1::NodeProbe p = EightGpus();
  p.mutable_nvml()->set_status(v1::Source::ABSENT);
  p.mutable_nvidia_procfs()->set_status(v1::Source::OK);
  for (int i = 0; i < 8; ++i) p.mutable_gpus(i)->set_source("procfs+sysfs");
  PlacementInput in;
  in.local_world_size = 2;
  in.bind_numa = true;
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(out[1].gpu_ordinal, 1);
  EXPECT_EQ(*out[1].cuda_visible_devices, "0,1,2,3,4,5,6,7");
  EXPECT_EQ(out[1].numa_node, 0) << "GPU 1's node, not a spread";
  EXPECT_TRUE(topology::HasContainerGpuView(p));
  p.mutable_nvidia_procfs()->set_status(v1::Source::ABSENT);
  EXPECT_FALSE(topology::HasContainerGpuView(p));
  EXPECT_EQ(PlanPlacement(p, in)[1].gpu_ordinal, -1);
}

// The whole chain on a fixture: a pod given 2 of a DGX's 8 GPUs by the
// container toolkit, probed without NVML, then placed.
TEST(GpuPlacement, StaticBuildPlacesTheProcfsGpusOfAProbedFixture) {
  topology::testing::ScopedTempDir dir;
  topology::testing::SysfsBuilder b(dir.path());
  topology::testing::DgxOptions dgx;
  dgx.container_gpus = {"0000:ab:00.0", "0000:2a:00.0"};
  topology::testing::BuildDgxH100(b, dgx);
  topology::ProbeOptions options;
  options.sysfs_root = b.sys();
  options.proc_root = b.proc();
  options.dev_root = b.dev();
  options.shm_path = dir.path();
  options.nvml.absent_reason = "NVML unavailable: static build";
  options.nccl_library = "";
  PlacementInput in;
  in.local_world_size = 2;
  in.gpu_binding = GpuBinding::kSingle;
  in.bind_numa = true;
  v1::NodeProbe probe = topology::ProbeNode(options);
  ASSERT_EQ(probe.visible_gpu_count(), 2) << probe.visibility_note();
  auto out = PlanPlacement(probe, in);
  EXPECT_EQ(out[0].gpu_bus_id, "0000:2a:00.0");
  EXPECT_EQ(*out[0].cuda_visible_devices, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(out[0].numa_node, 0);
  EXPECT_THAT(out[0].cpus, ::testing::SizeIs(56));
  EXPECT_EQ(out[1].gpu_bus_id, "0000:ab:00.0");
  EXPECT_EQ(*out[1].cuda_visible_devices, "GPU-00000000-0000-0000-0000-000000000005");
  EXPECT_EQ(out[1].numa_node, 1);
  // --gpu-binding=list: the container's two GPUs, as ordinals.
  in.gpu_binding = GpuBinding::kList;
  EXPECT_EQ(*PlanPlacement(probe, in)[1].cuda_visible_devices, "0,1");
  // CUDA_VISIBLE_DEVICES=1 (the user's): one worker GPU, the list untouched.
  options.env = in.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  probe = topology::ProbeNode(options);
  out = PlanPlacement(probe, in);
  EXPECT_EQ(out[0].gpu_bus_id, "0000:ab:00.0");
  EXPECT_EQ(out[1].gpu_bus_id, "0000:ab:00.0");
  EXPECT_FALSE(out[0].cuda_visible_devices.has_value());
  // The join names them by UUID.
  EXPECT_THAT(JoinTopology(probe).gpu_uuids(),
              ElementsAre("GPU-00000000-0000-0000-0000-000000000005"));
}

TEST(GpuPlacement, MoreWorkersThanGpusWrapAround) {
  PlacementInput in;
  in.local_world_size = 3;
  v1::NodeProbe p = EightGpus();
  p.mutable_gpus()->DeleteSubrange(2, 6);
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(out[2].gpu_ordinal, 0);
}

TEST(GpuPlacement, BindNumaUsesTheGpusNodeIntersectedWithAllowedCpus) {
  PlacementInput in;
  in.local_world_size = 8;
  in.bind_numa = true;
  in.allowed_cpus = {0, 1, 2, 3, 4, 5};
  auto out = PlanPlacement(EightGpus(), in);
  EXPECT_THAT(out[0].cpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(out[0].numa_node, 0);
  EXPECT_THAT(out[7].cpus, ElementsAre(4, 5));
  EXPECT_EQ(out[7].numa_node, 1);
  EXPECT_THAT(out[7].note, HasSubstr("NUMA node 1 (CPUs 4-5)"));
  in.allowed_cpus = {0, 1};
  out = PlanPlacement(EightGpus(), in);
  EXPECT_TRUE(out[5].cpus.empty());
  EXPECT_EQ(out[5].numa_node, 1);
  EXPECT_THAT(out[5].note, HasSubstr("CPUs not bound"));
}

TEST(GpuPlacement, UnknownNumaNodeIsNotBound) {
  v1::NodeProbe p = EightGpus();
  p.mutable_gpus(0)->set_numa_node(-1);
  PlacementInput in;
  in.bind_numa = true;
  auto out = PlanPlacement(p, in);
  EXPECT_TRUE(out[0].cpus.empty());
  EXPECT_EQ(out[0].numa_node, -1);
  EXPECT_THAT(out[0].note, HasSubstr("not bound"));
}

TEST(GpuPlacement, CpuOnlyNodeSpreadsWorkersOverNumaNodes) {
  v1::NodeProbe p = EightGpus();
  p.clear_gpus();
  PlacementInput in;
  in.local_world_size = 4;
  in.bind_numa = true;
  auto out = PlanPlacement(p, in);
  EXPECT_EQ(out[0].numa_node, 0);
  EXPECT_EQ(out[1].numa_node, 0);
  EXPECT_EQ(out[2].numa_node, 1);
  EXPECT_EQ(out[3].numa_node, 1);
  EXPECT_FALSE(out[0].cuda_visible_devices.has_value());
  in.bind_numa = false;
  out = PlanPlacement(p, in);
  EXPECT_TRUE(out[3].cpus.empty());
}

TEST(JoinTopology, SummarisesAndLeavesOutWhatTheCoordinatorWouldRefuse) {
  v1::NodeProbe p = EightGpus();
  p.set_visible_gpu_count(8);
  p.set_boot_id("3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  p.set_ipc_namespace("ipc:[4026531839]");
  p.mutable_nccl()->set_version("2.28.9");
  v1::Topology t = JoinTopology(p);
  EXPECT_EQ(t.gpu_count(), 8);
  ASSERT_EQ(t.gpu_uuids_size(), 8);
  EXPECT_EQ(t.gpu_uuids(7), "GPU-7");
  EXPECT_EQ(t.boot_id(), "3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  EXPECT_EQ(t.numa_nodes(), 2);
  EXPECT_EQ(t.nccl_version(), "2.28.9");
  // A strange machine never fails the join: bad values are dropped.
  p.set_boot_id(std::string(100, 'b'));
  p.set_ipc_namespace("ipc: [1]");
  p.mutable_gpus(3)->set_uuid("GPU\n3");
  t = JoinTopology(p);
  EXPECT_EQ(t.boot_id(), "");
  EXPECT_EQ(t.ipc_namespace(), "");
  EXPECT_EQ(t.gpu_uuids_size(), 0) << "all UUIDs or none: their order is the CUDA order";
  EXPECT_EQ(t.gpu_count(), 8);
}

TEST(JoinTopology, NvlinkClique_OnlyWhenEveryVisibleGpuSharesIt) {
  v1::NodeProbe p = EightGpus();
  p.set_visible_gpu_count(8);
  for (v1::Gpu& g : *p.mutable_gpus())
    g.set_nvlink_clique("01234567-89ab-cdef-0123-456789abcdef.7");
  EXPECT_EQ(JoinTopology(p).nvlink_clique(), "01234567-89ab-cdef-0123-456789abcdef.7");
  p.mutable_gpus(5)->set_nvlink_clique("01234567-89ab-cdef-0123-456789abcdef.8");
  EXPECT_EQ(JoinTopology(p).nvlink_clique(), "");
  p.mutable_gpus(5)->clear_nvlink_clique();
  EXPECT_EQ(JoinTopology(p).nvlink_clique(), "");
}

TEST(SetEnvVar, InsertsInNameOrderAndRespectsOverwrite) {
  std::vector<std::string> env = {"A0=1", "A=2", "B=3"};
  SetEnvVar(&env, "A", "x", /*overwrite=*/false);
  EXPECT_THAT(env, ElementsAre("A0=1", "A=2", "B=3"));
  SetEnvVar(&env, "A", "x", /*overwrite=*/true);
  EXPECT_THAT(env, ElementsAre("A0=1", "A=x", "B=3"));
  std::vector<std::string> sorted = {"A=1", "C=3"};
  SetEnvVar(&sorted, "B", "2", false);
  SetEnvVar(&sorted, "D", "4", false);
  EXPECT_THAT(sorted, ElementsAre("A=1", "B=2", "C=3", "D=4"));
}

TEST(CpuList, ParsesAndFormats) {
  EXPECT_THAT(*ParseCpuList("0-3,8,10-11\n"), ElementsAre(0, 1, 2, 3, 8, 10, 11));
  EXPECT_TRUE(ParseCpuList("")->empty());
  for (const char* bad : {"a", "3-1", "-1", "0-99999999", "1,,2", "1-2-3"}) {
    EXPECT_FALSE(ParseCpuList(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatCpuList({8, 0, 1, 2, 3, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
}

}  // namespace
}  // namespace trainlet::agent

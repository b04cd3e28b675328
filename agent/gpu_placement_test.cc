#include "agent/gpu_placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 8 GPUs, 4 per NUMA node, CPUs 0-3 on node 0 and 4-7 on node 1.
v1::NodeProbe EightGpus() {
  v1::NodeProbe p;
  for (int i = 0; i < 8; ++i) {
    v1::Gpu* g = p.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-" + std::to_string(i));
    g->set_pci_bus_id("0000:1" + std::to_string(i) + ":00.0");
    g->set_numa_node(i < 4 ? 0 : 1);
    g->set_visible(true);
    g->set_visible_ordinal(i);
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

TEST(GpuPlacement, ParseGpuBinding) {
  EXPECT_EQ(*ParseGpuBinding(" Single ", "--gpu-binding"), GpuBinding::kSingle);
  auto bad = ParseGpuBinding("each", "TRAINLET_GPU_BINDING");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("TRAINLET_GPU_BINDING"));
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

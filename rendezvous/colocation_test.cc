#include "rendezvous/colocation.h"

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

v1::NodeAssignment Node(const std::string& boot_id, const std::string& ipc) {
  v1::NodeAssignment na;
  na.mutable_topology()->set_boot_id(boot_id);
  na.mutable_topology()->set_ipc_namespace(ipc);
  return na;
}

// Each node's own `topology` field given as its topology (as the tests build
// them; the coordinator keeps the topologies apart from the assignments).
void MarkColocatedByOwnTopology(std::vector<v1::NodeAssignment>& nodes) {
  std::vector<const v1::Topology*> topologies;
  for (const v1::NodeAssignment& na : nodes) topologies.push_back(&na.topology());
  MarkColocated(topologies, absl::MakeSpan(nodes));
}

TEST(Colocation, PodsSharingMachineAndIpcGetOneHostId) {
  std::vector<v1::NodeAssignment> nodes = {Node("boot-a", "ipc:[1]"), Node("boot-b", "ipc:[1]"),
                                           Node("boot-a", "ipc:[1]"), Node("boot-c", "ipc:[9]")};
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].colocated(), 2);
  EXPECT_EQ(nodes[2].colocated(), 2);
  EXPECT_EQ(nodes[0].nccl_hostid(), "boot-a");
  EXPECT_EQ(nodes[2].nccl_hostid(), "boot-a");
  // Alone on its machine: NCCL's own host hash is right.
  EXPECT_EQ(nodes[1].colocated(), 1);
  EXPECT_EQ(nodes[1].nccl_hostid(), "");
  EXPECT_EQ(nodes[3].colocated(), 1);
  EXPECT_EQ(nodes[3].nccl_hostid(), "");
}

TEST(Colocation, SeparateIpcNamespacesAreCountedButGetNoHostId) {
  std::vector<v1::NodeAssignment> nodes = {Node("boot-a", "ipc:[1]"), Node("boot-a", "ipc:[2]"),
                                           Node("boot-a", "")};
  MarkColocatedByOwnTopology(nodes);
  for (const auto& na : nodes) {
    EXPECT_EQ(na.colocated(), 3);
    EXPECT_EQ(na.nccl_hostid(), "");
  }
}

TEST(Colocation, TwoOfThreeShareIpc) {
  std::vector<v1::NodeAssignment> nodes = {Node("boot-a", "ipc:[1]"), Node("boot-a", "ipc:[2]"),
                                           Node("boot-a", "ipc:[1]")};
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].nccl_hostid(), "boot-a");
  EXPECT_EQ(nodes[1].nccl_hostid(), "");
  EXPECT_EQ(nodes[2].nccl_hostid(), "boot-a");
}

v1::NodeAssignment WithGpus(const std::string& boot_id, std::vector<std::string> uuids,
                            int count = -1) {
  v1::NodeAssignment na = Node(boot_id, "ipc:[1]");
  for (const auto& u : uuids) na.mutable_topology()->add_gpu_uuids(u);
  na.mutable_topology()->set_gpu_count(count >= 0 ? count : static_cast<int>(uuids.size()));
  return na;
}

TEST(Colocation, PodsWithDisjointGpusGetNoHostId) {
  // A device plugin gave each pod its own GPUs: NCCL could not open the
  // other pod's, so no common host id.
  std::vector<v1::NodeAssignment> nodes = {WithGpus("boot-a", {"GPU-0", "GPU-1"}),
                                           WithGpus("boot-a", {"GPU-2", "GPU-3"})};
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].colocated(), 2);
  EXPECT_EQ(nodes[0].nccl_hostid(), "");
  EXPECT_EQ(nodes[1].nccl_hostid(), "");
  // Pods that see every GPU of the node (privileged, NVIDIA_VISIBLE_DEVICES=all).
  nodes = {WithGpus("boot-a", {"GPU-0", "GPU-1"}), WithGpus("boot-a", {"GPU-1", "GPU-0"})};
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].nccl_hostid(), "boot-a");
  EXPECT_EQ(nodes[1].nccl_hostid(), "boot-a");
  // GPUs without UUIDs (no NVML): cannot tell, so no.
  nodes = {WithGpus("boot-a", {}, 2), WithGpus("boot-a", {}, 2)};
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].nccl_hostid(), "");
}

TEST(Colocation, NoBootIdMeansUnknownAndStaleValuesAreCleared) {
  std::vector<v1::NodeAssignment> nodes = {Node("", "ipc:[1]"), Node("", "ipc:[1]")};
  nodes[0].set_nccl_hostid("stale");
  nodes[0].set_colocated(5);
  MarkColocatedByOwnTopology(nodes);
  EXPECT_EQ(nodes[0].colocated(), 0);
  EXPECT_EQ(nodes[0].nccl_hostid(), "");
  EXPECT_EQ(nodes[1].colocated(), 0);
}

TEST(Colocation, ReadsTheTopologiesGiven_ManyMachinesAloneAndOnePairSharing) {
  // The coordinator's form: each node's topology stays in its join request;
  // the assignments carry none.
  constexpr int kNodes = 1000;
  std::vector<v1::Topology> topologies(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    topologies[i].set_boot_id("boot-" + std::to_string(i));
    topologies[i].set_ipc_namespace("ipc:[" + std::to_string(i) + "]");
    topologies[i].add_gpu_uuids("GPU-" + std::to_string(i));
    topologies[i].set_gpu_count(1);
  }
  // Nodes 10 and 500: one machine, one IPC namespace, both see both GPUs.
  for (int i : {10, 500}) {
    topologies[i].set_boot_id("boot-shared");
    topologies[i].set_ipc_namespace("ipc:[7]");
    topologies[i].clear_gpu_uuids();
    topologies[i].add_gpu_uuids("GPU-a");
    topologies[i].add_gpu_uuids("GPU-b");
    topologies[i].set_gpu_count(2);
  }
  topologies[20].clear_boot_id();
  std::vector<const v1::Topology*> views;
  for (const v1::Topology& t : topologies) views.push_back(&t);
  std::vector<v1::NodeAssignment> nodes(kNodes);
  nodes[30].set_nccl_hostid("stale");
  MarkColocated(views, absl::MakeSpan(nodes));
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_FALSE(nodes[i].has_topology());
    if (i == 10 || i == 500) {
      EXPECT_EQ(nodes[i].colocated(), 2);
      EXPECT_EQ(nodes[i].nccl_hostid(), "boot-shared");
    } else {
      EXPECT_EQ(nodes[i].colocated(), i == 20 ? 0 : 1) << i;
      EXPECT_EQ(nodes[i].nccl_hostid(), "") << i;
    }
  }
}

TEST(Colocation, AnAssignmentPastTheTopologiesIsUnknown) {
  v1::Topology t;
  t.set_boot_id("boot-a");
  std::vector<const v1::Topology*> views = {&t};
  std::vector<v1::NodeAssignment> nodes(2);
  nodes[1].set_colocated(3);
  nodes[1].set_nccl_hostid("stale");
  MarkColocated(views, absl::MakeSpan(nodes));
  EXPECT_EQ(nodes[0].colocated(), 1);
  EXPECT_EQ(nodes[1].colocated(), 0);
  EXPECT_EQ(nodes[1].nccl_hostid(), "");
}

}  // namespace
}  // namespace trainlet::rendezvous

#include "rendezvous/colocation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

v1::NodeAssignment Node(const std::string& boot_id, const std::string& ipc) {
  v1::NodeAssignment na;
  na.mutable_topology()->set_boot_id(boot_id);
  na.mutable_topology()->set_ipc_namespace(ipc);
  return na;
}

TEST(Colocation, PodsSharingMachineAndIpcGetOneHostId) {
  std::vector<v1::NodeAssignment> nodes = {Node("boot-a", "ipc:[1]"), Node("boot-b", "ipc:[1]"),
                                           Node("boot-a", "ipc:[1]"), Node("boot-c", "ipc:[9]")};
  MarkColocated(nodes);
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
  MarkColocated(nodes);
  for (const auto& na : nodes) {
    EXPECT_EQ(na.colocated(), 3);
    EXPECT_EQ(na.nccl_hostid(), "");
  }
}

TEST(Colocation, TwoOfThreeShareIpc) {
  std::vector<v1::NodeAssignment> nodes = {Node("boot-a", "ipc:[1]"), Node("boot-a", "ipc:[2]"),
                                           Node("boot-a", "ipc:[1]")};
  MarkColocated(nodes);
  EXPECT_EQ(nodes[0].nccl_hostid(), "boot-a");
  EXPECT_EQ(nodes[1].nccl_hostid(), "");
  EXPECT_EQ(nodes[2].nccl_hostid(), "boot-a");
}

TEST(Colocation, NoBootIdMeansUnknownAndStaleValuesAreCleared) {
  std::vector<v1::NodeAssignment> nodes = {Node("", "ipc:[1]"), Node("", "ipc:[1]")};
  nodes[0].set_nccl_hostid("stale");
  nodes[0].set_colocated(5);
  MarkColocated(nodes);
  EXPECT_EQ(nodes[0].colocated(), 0);
  EXPECT_EQ(nodes[0].nccl_hostid(), "");
  EXPECT_EQ(nodes[1].colocated(), 0);
}

}  // namespace
}  // namespace trainlet::rendezvous

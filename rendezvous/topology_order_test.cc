#include "rendezvous/topology_order.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/rank_assignment.h"

namespace trainlet::rendezvous {
namespace {
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A node named `id` with domains "k0=v0,k1=v1,..." (widest first); an empty
// value is a level the node does not have.
RankCandidate Node(std::string id, std::vector<TopologyDomainPair> domains, int hint = -1,
                   int previous = -1, bool from_index = true) {
  RankCandidate c;
  c.node_id = std::move(id);
  c.hint = hint;
  c.previous_rank = previous;
  c.hint_from_index = from_index;
  for (auto& d : domains) {
    if (!d.second.empty()) c.domains.push_back(std::move(d));
  }
  return c;
}

// Node ids in rank order.
std::vector<std::string> ByRank(const std::vector<RankCandidate>& c, bool honor_hints,
                                RankOrder order = RankOrder::kTopology) {
  std::vector<int> ranks = AssignRanks(c, honor_hints, order);
  std::vector<std::string> ids(c.size());
  for (size_t i = 0; i < c.size(); ++i) ids[ranks[i]] = c[i].node_id;
  return ids;
}

TEST(TopologyOrder, TwoSwitches_InterleavedIndices_AreGroupedBySwitch) {
  // Index order alternates switches (the benchmark's layout).
  std::vector<RankCandidate> c;
  for (int i = 0; i < 6; ++i) {
    c.push_back(Node("n-" + std::to_string(i), {{"switch", i % 2 ? "s1" : "s0"}}, i));
  }
  EXPECT_THAT(ByRank(c, /*honor_hints=*/true),
              ElementsAre("n-0", "n-2", "n-4", "n-1", "n-3", "n-5"));
  // The same nodes by index: pinned to their index.
  EXPECT_THAT(ByRank(c, true, RankOrder::kIndex),
              ElementsAre("n-0", "n-1", "n-2", "n-3", "n-4", "n-5"));
}

TEST(TopologyOrder, TwoLevels_GroupsInsideGroups) {
  std::vector<RankCandidate> c = {
      Node("a", {{"zone", "z1"}, {"rack", "r1"}}, 0),
      Node("b", {{"zone", "z2"}, {"rack", "r3"}}, 1),
      Node("c", {{"zone", "z1"}, {"rack", "r2"}}, 2),
      Node("d", {{"zone", "z2"}, {"rack", "r4"}}, 3),
      Node("e", {{"zone", "z1"}, {"rack", "r1"}}, 4),
      Node("f", {{"zone", "z2"}, {"rack", "r3"}}, 5),
  };
  // z1 (first member a) before z2 (b); inside z1, r1 (a, e) before r2 (c).
  EXPECT_THAT(ByRank(c, true), ElementsAre("a", "e", "c", "b", "f", "d"));
}

TEST(TopologyOrder, ThreeLevels_BlockSubblockHost) {
  const std::string b = "cloud.google.com/gce-topology-block";
  const std::string sb = "cloud.google.com/gce-topology-subblock";
  const std::string h = "cloud.google.com/gce-topology-host";
  std::vector<RankCandidate> c = {
      Node("p0", {{b, "B1"}, {sb, "S2"}, {h, "H3"}}, 0),
      Node("p1", {{b, "B1"}, {sb, "S1"}, {h, "H1"}}, 1),
      Node("p2", {{b, "B2"}, {sb, "S3"}, {h, "H5"}}, 2),
      Node("p3", {{b, "B1"}, {sb, "S2"}, {h, "H4"}}, 3),
      Node("p4", {{b, "B1"}, {sb, "S1"}, {h, "H2"}}, 4),
      Node("p5", {{b, "B1"}, {sb, "S2"}, {h, "H3"}}, 5),
      Node("p6", {{b, "B2"}, {sb, "S3"}, {h, "H5"}}, 6),
  };
  // B1: S2 (p0) {H3: p0 p5, H4: p3}, S1 (p1) {H1: p1, H2: p4}; B2: S3 {H5: p2 p6}.
  EXPECT_THAT(ByRank(c, true), ElementsAre("p0", "p5", "p3", "p1", "p4", "p2", "p6"));
}

TEST(TopologyOrder, FourLevels_EksLayersAndMachine) {
  auto eks = [](const std::string& l1, const std::string& l2, const std::string& l3,
                const std::string& boot) {
    return std::vector<TopologyDomainPair>{{"topology.k8s.aws/network-node-layer-1", l1},
                                           {"topology.k8s.aws/network-node-layer-2", l2},
                                           {"topology.k8s.aws/network-node-layer-3", l3},
                                           {"boot_id", boot}};
  };
  std::vector<RankCandidate> c = {
      Node("w0", eks("nn1", "nn2", "nn4", "k1"), 0), Node("w1", eks("nn1", "nn3", "nn6", "k4"), 1),
      Node("w2", eks("nn1", "nn2", "nn5", "k3"), 2), Node("w3", eks("nn1", "nn2", "nn4", "k2"), 3),
      Node("w4", eks("nn1", "nn2", "nn4", "k1"), 4), Node("w5", eks("nn1", "nn3", "nn6", "k5"), 5),
  };
  // nn2 {nn4 {k1: w0 w4, k2: w3}, nn5: w2}, nn3 {nn6: w1 w5}.
  EXPECT_THAT(ByRank(c, true), ElementsAre("w0", "w4", "w3", "w2", "w1", "w5"));
  std::vector<NodeDomains> d;
  for (const RankCandidate& x : c) d.push_back(x.domains);
  const std::vector<int> ring = {0, 4, 3, 2, 1, 5};
  RingSharing s = CountRingSharing(d, ring, MergeLevels(d, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(s.pairs, 6);
  EXPECT_THAT(s.shared, ElementsAre(6, 4, 3, 1));
  EXPECT_EQ(DescribeRingSharing(s),
            "topology.k8s.aws/network-node-layer-1 6/6, topology.k8s.aws/network-node-layer-2 4/6, "
            "topology.k8s.aws/network-node-layer-3 3/6, boot_id 1/6");
}

TEST(TopologyOrder, MissingLabels_GroupedTogetherAndSplitByNarrowerLevels) {
  std::vector<RankCandidate> c = {
      Node("a", {{"zone", "z1"}, {"boot_id", "m1"}}, 0),
      Node("b", {{"zone", ""}, {"boot_id", "m2"}}, 1),
      Node("c", {{"zone", "z1"}, {"boot_id", "m3"}}, 2),
      Node("d", {{"zone", ""}, {"boot_id", "m4"}}, 3),
      Node("e", {{"zone", ""}, {"boot_id", "m2"}}, 4),
  };
  // z1 {a, c}; no zone {b, e (same machine m2), d}.
  EXPECT_THAT(ByRank(c, true), ElementsAre("a", "c", "b", "e", "d"));
}

TEST(TopologyOrder, NoDomainsAtAll_KeepsTodaysOrder) {
  std::vector<RankCandidate> c = {Node("n-10", {}, -1), Node("n-2", {}, -1), Node("x", {}, 0)};
  EXPECT_EQ(ByRank(c, true), ByRank(c, true, RankOrder::kIndex));
  EXPECT_THAT(ByRank(c, false), ElementsAre("x", "n-2", "n-10"));
}

TEST(TopologyOrder, Ties_KeepTodaysOrderInsideADomain) {
  // Everyone in one switch: the order is today's (hints, then natural ids).
  std::vector<RankCandidate> c = {
      Node("n-3", {{"switch", "s"}}, 2), Node("n-1", {{"switch", "s"}}, 0),
      Node("n-10", {{"switch", "s"}}, -1), Node("n-2", {{"switch", "s"}}, 1)};
  EXPECT_THAT(ByRank(c, true), ElementsAre("n-1", "n-2", "n-3", "n-10"));
}

TEST(TopologyOrder, ExplicitNodeRankWins_IndexHintsOnlyOrder) {
  // x has --node-rank=3 (explicit); the others' hints are their pod index.
  std::vector<RankCandidate> c = {
      Node("a", {{"switch", "s0"}}, 0), Node("b", {{"switch", "s1"}}, 1),
      Node("c", {{"switch", "s0"}}, 2), Node("x", {{"switch", "s1"}}, 3, -1, /*from_index=*/false),
      Node("e", {{"switch", "s0"}}, 4), Node("f", {{"switch", "s1"}}, 5)};
  // Topology order a c e b x f; x pinned at 3, the rest fill 0,1,2,4,5.
  EXPECT_THAT(ByRank(c, true), ElementsAre("a", "c", "e", "x", "b", "f"));
  // In an elastic job no hint pins: x is ordered like the others.
  EXPECT_THAT(ByRank(c, false), ElementsAre("a", "c", "e", "b", "x", "f"));
}

TEST(TopologyOrder, Restart_SurvivorsKeepRelativeOrderNewcomerJoinsItsSwitch) {
  // Round 1 ordered a c b d (a, c in s0; b, d in s1); c was lost; n (s0)
  // arrives. Survivors keep a b d; n goes next to a, its switch.
  std::vector<RankCandidate> c = {
      Node("a", {{"switch", "s0"}}, 0, 0), Node("b", {{"switch", "s1"}}, 1, 2),
      Node("d", {{"switch", "s1"}}, 3, 3), Node("n", {{"switch", "s0"}}, 2, -1)};
  EXPECT_THAT(ByRank(c, false), ElementsAre("a", "n", "b", "d"));
}

// Rank 0's address is MASTER_ADDR and its agent serves the store: grouping
// never moves rank 0 off the node today's order puts first (pod 0, or the
// previous round's rank 0), even when that node is alone in its domains
// and sends its keys in another order, with a level the others lack.
TEST(TopologyOrder, RankZero_StaysTheFirstNodeOfTodaysOrder) {
  std::vector<RankCandidate> c = {Node("w1", {{"zone", "z1"}, {"switch", "s1"}}, 1),
                                  Node("w2", {{"zone", "z2"}, {"switch", "s2"}}, 2),
                                  Node("w0", {{"switch", "s9"}, {"block", "b"}, {"zone", "z3"}}, 0),
                                  Node("w3", {{"zone", "z1"}, {"switch", "s1"}}, 3)};
  EXPECT_EQ(ByRank(c, true)[0], "w0");
  EXPECT_EQ(ByRank(c, false)[0], "w0");
  // A restart where w2 was rank 0: it stays.
  for (int i = 0; i < 4; ++i) c[i].previous_rank = (i + 3) % 4;  // w1 3, w2 0, w0 1, w3 2
  EXPECT_THAT(ByRank(c, false), ElementsAre("w2", "w0", "w3", "w1"));
}

TEST(TopologyOrder, MergeLevels_UnionKeepsEachNodesOrder) {
  std::vector<NodeDomains> d = {{{"zone", "z"}, {"rack", "r"}},
                                {{"zone", "z"}, {"block", "b"}, {"rack", "r"}},
                                {{"clique", "c"}}};
  EXPECT_THAT(MergeLevels(d, {0, 1, 2}), ElementsAre("clique", "zone", "block", "rack"));
}

TEST(TopologyOrder, MergeLevels_Capped) {
  std::vector<NodeDomains> d(1);
  for (int i = 0; i < kMaxTopologyLevels + 5; ++i) d[0].push_back({"k" + std::to_string(i), "v"});
  EXPECT_EQ(MergeLevels(d, {0}).size(), static_cast<size_t>(kMaxTopologyLevels));
}

TEST(TopologyOrder, RingSharing_TwoAndOneNodes) {
  std::vector<NodeDomains> d = {{{"s", "x"}}, {{"s", "x"}}};
  EXPECT_EQ(CountRingSharing(d, {0, 1}, {"s"}).pairs, 1);
  EXPECT_THAT(CountRingSharing(d, {0, 1}, {"s"}).shared, ElementsAre(1));
  EXPECT_EQ(CountRingSharing(d, {0}, {"s"}).pairs, 0);
}

TEST(ChooseRankOrder, TodaysJob_IndexAndSilent) {
  RankOrderChoice c = ChooseRankOrder({});
  EXPECT_EQ(c.order, RankOrder::kIndex);
  EXPECT_THAT(c.why, IsEmpty());
}

TEST(ChooseRankOrder, DomainsSent_Topology) {
  RankOrderVotes v;
  v.with_domains = 3;
  EXPECT_EQ(ChooseRankOrder(v).order, RankOrder::kTopology);
}

TEST(ChooseRankOrder, SchedulerPlacement_KeepsIndexOrderAndSaysSo) {
  RankOrderVotes v;
  v.with_domains = 4;
  v.placement = "kueue.x-k8s.io/tas";
  v.placement_node = "job-0";
  RankOrderChoice c = ChooseRankOrder(v);
  EXPECT_EQ(c.order, RankOrder::kIndex);
  EXPECT_THAT(c.why, HasSubstr("scheduler's placement"));
  EXPECT_THAT(c.why, HasSubstr("kueue.x-k8s.io/tas"));
  // Asked for explicitly, topology order wins over the scheduler's.
  v.topology = 1;
  EXPECT_EQ(ChooseRankOrder(v).order, RankOrder::kTopology);
}

TEST(ChooseRankOrder, ExplicitIndexWins) {
  RankOrderVotes v;
  v.with_domains = 4;
  v.topology = 2;
  v.index = 1;
  RankOrderChoice c = ChooseRankOrder(v);
  EXPECT_EQ(c.order, RankOrder::kIndex);
  EXPECT_THAT(c.why, HasSubstr("--rank-order=index"));
}

}  // namespace
}  // namespace trainlet::rendezvous

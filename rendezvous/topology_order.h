// Rank order by network topology: pure functions, no state, no I/O.
//
// Each node may say where it sits as a list of domains, widest first
// (zone > block > switch > NVLink clique > machine), each a (level key,
// value) pair (docs/topology.md, "Rank order"). The order groups nodes
// hierarchically: at the widest level the nodes are split by their value,
// each group is split again by the next level, and so on, so that nodes
// sharing the narrowest common domain are adjacent. Groups follow their
// earliest member in the base order (today's order: survivors by previous
// rank, then hints, then node ids), and inside the narrowest group the base
// order stands, so ties keep today's order and a job without topology keeps
// it whole. A node without a level's value is grouped with the others
// without it at that level (nothing says they are apart), and split again by
// the narrower levels (clique ids and boot ids are unique on their own).
//
// NCCL and gloo build their rings in rank order and never reorder (nccl
// #1340), so adjacent ranks in the same switch are what keeps a ring off the
// slow links.
#ifndef TRAINLET_RENDEZVOUS_TOPOLOGY_ORDER_H_
#define TRAINLET_RENDEZVOUS_TOPOLOGY_ORDER_H_

#include <string>
#include <utility>
#include <vector>

namespace trainlet::rendezvous {

// (level key, value), e.g. ("topology.k8s.aws/network-node-layer-1", "nn-1a2b").
using TopologyDomainPair = std::pair<std::string, std::string>;
// One node's domains, widest first; keys distinct, values non-empty.
using NodeDomains = std::vector<TopologyDomainPair>;
// Every node's domains where they already are: the functions below take
// these or copies (at 10,000 nodes of 16 long keys, copying every domain
// cost the round's close more than ordering them).
using DomainsView = std::vector<const NodeDomains*>;

enum class RankOrder { kIndex, kTopology };

// What the members of a round asked for (JoinRequest.rank_order,
// .domains, .scheduler_placement), and the order it comes to:
//   any member --rank-order=index           -> index
//   else any member --rank-order=topology   -> topology
//   else a scheduler placed the pods by index (Kueue TAS, Volcano network
//        topology, KAI segments: scheduler_placement) -> index, the
//        scheduler's
//   else any member sent a domain           -> topology
//   else                                    -> index (today's order)
struct RankOrderVotes {
  int index = 0;     // members with --rank-order=index
  int topology = 0;  // members with --rank-order=topology
  int with_domains = 0;
  std::string placement;       // the first placement a member named ("kueue.x-k8s.io/tas")
  std::string placement_node;  // and that member
};
struct RankOrderChoice {
  RankOrder order = RankOrder::kIndex;
  // Why, for every node's log; empty when nothing about topology was said
  // (a job as before: no line).
  std::string why;
};
RankOrderChoice ChooseRankOrder(const RankOrderVotes& votes);

// Levels beyond this many distinct keys in a round are ignored (a round's
// work stays O(nodes x levels) whatever the members send).
inline constexpr int kMaxTopologyLevels = 32;

// The round's levels, widest first: every key the nodes sent, merged so that
// each node's own order holds where the nodes agree (a key first seen on a
// node goes right after that node's previous key). `base_order` lists the
// nodes in today's order; at most kMaxTopologyLevels keys.
std::vector<std::string> MergeLevels(const std::vector<NodeDomains>& domains,
                                     const std::vector<int>& base_order);
std::vector<std::string> MergeLevels(const DomainsView& domains,
                                     const std::vector<int>& base_order);

// The nodes of `base_order` regrouped by topology (see above): a
// permutation of base_order.
std::vector<int> GroupByTopology(const std::vector<NodeDomains>& domains,
                                 const std::vector<int>& base_order);
std::vector<int> GroupByTopology(const DomainsView& domains, const std::vector<int>& base_order);

// How many ring neighbours share each level: the ring runs over `ring` (node
// indices in rank order) and closes from the last back to the first, as
// NCCL's and gloo's rings do (n pairs for n > 2 nodes, 1 for 2, 0 for 1).
struct RingSharing {
  std::vector<std::string> levels;  // widest first
  std::vector<int> shared;          // shared[l]: neighbour pairs with equal values at levels[l]
  int pairs = 0;
};
RingSharing CountRingSharing(const std::vector<NodeDomains>& domains, const std::vector<int>& ring,
                             const std::vector<std::string>& levels);
RingSharing CountRingSharing(const DomainsView& domains, const std::vector<int>& ring,
                             const std::vector<std::string>& levels);

// "zone 8/8, switch 6/8, boot_id 0/8": the round's log line.
std::string DescribeRingSharing(const RingSharing& sharing);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TOPOLOGY_ORDER_H_

// Node-rank assignment for a closing round: pure function, no state.
//
// Static jobs (nnodes N) honour rank hints: a hinted node gets its hint and
// the unhinted nodes fill the remaining ranks. Elastic rounds keep survivors
// in their previous relative order, then place newcomers by hint, and every
// tie is broken by the natural order of node ids (job-node-0-2 before
// job-node-0-10), so the same membership always yields the same ranks.
//
// With RankOrder::kTopology that order is regrouped by the nodes' domains
// (topology_order.h) before the unpinned nodes fill their ranks; a hint that
// is only the pod's index (JOB_COMPLETION_INDEX, the hostname's ordinal)
// then orders without pinning, and only an explicit --node-rank pins.
#ifndef TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_
#define TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_

#include <string>
#include <vector>

#include "rendezvous/topology_order.h"

namespace trainlet::rendezvous {

struct RankCandidate {
  std::string node_id;
  int hint = -1;           // -1: none.
  int previous_rank = -1;  // rank in the previous round; -1: newcomer.
  // The hint is the pod's index found by Kubernetes discovery, not an
  // explicit --node-rank: under kTopology it orders but does not pin.
  bool hint_from_index = false;
  NodeDomains domains;  // widest first; read under kTopology only.
};

// Returns ranks[i] for candidates[i]: a permutation of 0..n-1.
// honor_hints: hints must be distinct and < n (the coordinator validates this
// at join time); pinned nodes get exactly their hint (every hinted node
// under kIndex; those whose hint is not from the pod index under kTopology).
std::vector<int> AssignRanks(const std::vector<RankCandidate>& candidates, bool honor_hints,
                             RankOrder order = RankOrder::kIndex);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_

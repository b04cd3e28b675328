// Node-rank assignment for a closing round: pure function, no state.
//
// Static jobs (nnodes N) honour rank hints: a hinted node gets its hint and
// the unhinted nodes fill the remaining ranks. Elastic rounds keep survivors
// in their previous relative order, then place newcomers by hint, and every
// tie is broken by the natural order of node ids (job-node-0-2 before
// job-node-0-10), so the same membership always yields the same ranks.
#ifndef TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_
#define TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_

#include <string>
#include <vector>

namespace trainlet::rendezvous {

struct RankCandidate {
  std::string node_id;
  int hint = -1;           // -1: none.
  int previous_rank = -1;  // rank in the previous round; -1: newcomer.
};

// Returns ranks[i] for candidates[i]: a permutation of 0..n-1.
// honor_hints: hints must be distinct and < n (the coordinator validates this
// at join time); hinted nodes get exactly their hint.
std::vector<int> AssignRanks(const std::vector<RankCandidate>& candidates, bool honor_hints);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_RANK_ASSIGNMENT_H_

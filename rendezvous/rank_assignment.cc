#include "rendezvous/rank_assignment.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "common/natural_order.h"

namespace trainlet::rendezvous {
namespace {
constexpr int kNone = std::numeric_limits<int>::max();
int OrNone(int v) { return v < 0 ? kNone : v; }
}  // namespace

std::vector<int> AssignRanks(const std::vector<RankCandidate>& candidates, bool honor_hints,
                             RankOrder rank_order) {
  const int n = static_cast<int>(candidates.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Survivors (by previous rank) first, then by hint, then by natural node id.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const RankCandidate& x = candidates[a];
    const RankCandidate& y = candidates[b];
    if (OrNone(x.previous_rank) != OrNone(y.previous_rank)) {
      return OrNone(x.previous_rank) < OrNone(y.previous_rank);
    }
    if (OrNone(x.hint) != OrNone(y.hint)) return OrNone(x.hint) < OrNone(y.hint);
    return NaturalLess(x.node_id, y.node_id);
  });
  if (rank_order == RankOrder::kTopology) {
    DomainsView domains(n);
    for (int i = 0; i < n; ++i) domains[i] = &candidates[i].domains;
    order = GroupByTopology(domains, order);
  }

  std::vector<int> ranks(n, -1);
  std::vector<bool> taken(n, false);
  if (honor_hints) {
    for (int i = 0; i < n; ++i) {
      int h = candidates[i].hint;
      if (rank_order == RankOrder::kTopology && candidates[i].hint_from_index) continue;
      if (h >= 0 && h < n && !taken[h]) {
        ranks[i] = h;
        taken[h] = true;
      }
    }
  }
  int next = 0;
  for (int i : order) {
    if (ranks[i] >= 0) continue;
    while (taken[next]) ++next;
    ranks[i] = next;
    taken[next] = true;
  }
  return ranks;
}

}  // namespace trainlet::rendezvous

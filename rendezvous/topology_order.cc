#include "rendezvous/topology_order.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainlet::rendezvous {
namespace {

// values[node][level]: the node's value at that level; empty: none (values
// are never empty, the coordinator validates them).
using LevelValues = std::vector<std::vector<absl::string_view>>;

LevelValues ValuesAtLevels(const DomainsView& domains, const std::vector<std::string>& levels) {
  absl::flat_hash_map<absl::string_view, int> level_of;
  for (size_t l = 0; l < levels.size(); ++l) level_of.emplace(levels[l], static_cast<int>(l));
  LevelValues values(domains.size(), std::vector<absl::string_view>(levels.size()));
  for (size_t i = 0; i < domains.size(); ++i) {
    for (const auto& [key, value] : *domains[i]) {
      auto it = level_of.find(key);
      if (it != level_of.end()) values[i][it->second] = value;
    }
  }
  return values;
}

// Splits `nodes` (in base order) by their value at `level`, groups in the
// order of their first member, and each group again at the next level.
void Group(const LevelValues& values, const std::vector<int>& nodes, size_t level,
           std::vector<int>* out) {
  if (nodes.size() <= 1 || level >= (values.empty() ? 0 : values[nodes[0]].size())) {
    out->insert(out->end(), nodes.begin(), nodes.end());
    return;
  }
  absl::flat_hash_map<absl::string_view, size_t> group_of;
  std::vector<std::vector<int>> groups;
  for (int i : nodes) {
    auto [it, inserted] = group_of.emplace(values[i][level], groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  for (const std::vector<int>& g : groups) Group(values, g, level + 1, out);
}

}  // namespace

RankOrderChoice ChooseRankOrder(const RankOrderVotes& v) {
  if (v.index > 0) {
    return {RankOrder::kIndex, v.topology > 0 || v.with_domains > 0 || !v.placement.empty()
                                   ? absl::StrCat("ranks in index order: ", v.index,
                                                  " node(s) ask for --rank-order=index")
                                   : ""};
  }
  if (v.topology > 0) {
    return {RankOrder::kTopology, "ranks by topology (--rank-order=topology)"};
  }
  if (!v.placement.empty()) {
    return {RankOrder::kIndex,
            absl::StrCat("ranks in index order, the scheduler's placement: node ", v.placement_node,
                         " carries ", v.placement,
                         " (--rank-order=topology would reorder by the nodes' domains)")};
  }
  if (v.with_domains > 0) {
    return {RankOrder::kTopology,
            absl::StrCat("ranks by topology: ", v.with_domains, " node(s) sent their domains")};
  }
  return {RankOrder::kIndex, ""};
}

std::vector<std::string> MergeLevels(const DomainsView& domains,
                                     const std::vector<int>& base_order) {
  std::vector<std::string> levels;
  for (int i : base_order) {
    int previous = -1;  // where this node's previous key is in `levels`
    for (const auto& [key, value] : *domains[i]) {
      auto at = std::find(levels.begin(), levels.end(), key);
      if (at != levels.end()) {
        previous = static_cast<int>(at - levels.begin());
        continue;
      }
      if (static_cast<int>(levels.size()) >= kMaxTopologyLevels) continue;
      levels.insert(levels.begin() + previous + 1, key);
      ++previous;
    }
  }
  return levels;
}

std::vector<int> GroupByTopology(const DomainsView& domains, const std::vector<int>& base_order) {
  const std::vector<std::string> levels = MergeLevels(domains, base_order);
  std::vector<int> out;
  out.reserve(base_order.size());
  if (levels.empty()) return base_order;
  Group(ValuesAtLevels(domains, levels), base_order, 0, &out);
  return out;
}

RingSharing CountRingSharing(const DomainsView& domains, const std::vector<int>& ring,
                             const std::vector<std::string>& levels) {
  RingSharing s;
  s.levels = levels;
  s.shared.assign(levels.size(), 0);
  const int n = static_cast<int>(ring.size());
  s.pairs = n > 2 ? n : n - 1;
  if (s.pairs <= 0) {
    s.pairs = 0;
    return s;
  }
  const LevelValues values = ValuesAtLevels(domains, levels);
  for (int p = 0; p < s.pairs; ++p) {
    const std::vector<absl::string_view>& a = values[ring[p]];
    const std::vector<absl::string_view>& b = values[ring[(p + 1) % n]];
    for (size_t l = 0; l < levels.size(); ++l) {
      if (!a[l].empty() && a[l] == b[l]) ++s.shared[l];
    }
  }
  return s;
}

namespace {
DomainsView ViewOf(const std::vector<NodeDomains>& domains) {
  DomainsView view;
  view.reserve(domains.size());
  for (const NodeDomains& d : domains) view.push_back(&d);
  return view;
}
}  // namespace

std::vector<std::string> MergeLevels(const std::vector<NodeDomains>& domains,
                                     const std::vector<int>& base_order) {
  return MergeLevels(ViewOf(domains), base_order);
}

std::vector<int> GroupByTopology(const std::vector<NodeDomains>& domains,
                                 const std::vector<int>& base_order) {
  return GroupByTopology(ViewOf(domains), base_order);
}

RingSharing CountRingSharing(const std::vector<NodeDomains>& domains, const std::vector<int>& ring,
                             const std::vector<std::string>& levels) {
  return CountRingSharing(ViewOf(domains), ring, levels);
}

std::string DescribeRingSharing(const RingSharing& s) {
  std::string out;
  for (size_t l = 0; l < s.levels.size(); ++l) {
    absl::StrAppend(&out, l == 0 ? "" : ", ", s.levels[l], " ", s.shared[l], "/", s.pairs);
  }
  return out;
}

}  // namespace trainlet::rendezvous

#include "preflight/ring.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/siphash.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

RingPlan PlanRings(const std::vector<std::string>& members, uint64_t round) {
  std::vector<std::string> order(members.begin(), members.end());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  // An order drawn from the round: each member's SipHash under a key made
  // of the round (ties, vanishingly rare, by name).
  SipHashKey key{};
  for (int i = 0; i < 8; ++i) key[i] = static_cast<uint8_t>(round >> (8 * i));
  auto rank = [&key](const std::string& m) {
    return SipHash24(key, reinterpret_cast<const uint8_t*>(m.data()), m.size());
  };
  std::vector<std::pair<uint64_t, std::string>> keyed;
  for (std::string& m : order) keyed.emplace_back(rank(m), std::move(m));
  std::sort(keyed.begin(), keyed.end());
  const size_t n = keyed.size();
  RingPlan plan;
  for (size_t p = 0; p < n; ++p) {
    std::vector<std::string>& targets = plan[keyed[p].second];
    for (size_t stride : {size_t{1}, size_t{2}}) {
      if (stride >= n) break;  // with 2 members, +2 is the node itself.
      targets.push_back(keyed[(p + stride) % n].second);
    }
  }
  return plan;
}

namespace {

std::string Rate(double bps) { return HumanRate(bps); }

// 0 for none.
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace

NetworkVerdict AnalyzeLinks(const std::vector<v1::LinkResult>& links,
                            const AnalysisOptions& options) {
  NetworkVerdict verdict;
  // Distinct links, the first report of each.
  std::vector<const v1::LinkResult*> distinct;
  std::set<std::pair<std::string, std::string>> seen;
  for (const v1::LinkResult& l : links) {
    if (l.from_node() == l.to_node()) continue;
    if (!seen.insert({l.from_node(), l.to_node()}).second) continue;
    distinct.push_back(&l);
  }
  verdict.links = static_cast<int>(distinct.size());

  // The job's median: over the nodes, of each node's median link. Not over
  // the links: a slow node slows all four of its links, so two slow nodes
  // in six already make most links slow, and the median theirs; a healthy
  // node keeps a healthy median while at most one of its four peers is slow.
  // Not each node's fastest link either: on a busy host the link measured
  // while the others had finished is several times faster than the rest.
  std::map<std::string, std::vector<double>> per_node;
  for (const v1::LinkResult* l : distinct) {
    const double bw = l->bandwidth_bytes_per_second();
    if (!l->error().empty() || !(bw > 0) || !std::isfinite(bw)) continue;
    per_node[l->from_node()].push_back(bw);
    per_node[l->to_node()].push_back(bw);
  }
  std::vector<double> rates;
  for (auto& [node, bws] : per_node) rates.push_back(Median(bws));
  verdict.median_bandwidth = Median(rates);
  std::set<std::string> senders;
  for (const v1::LinkResult* l : distinct) senders.insert(l->from_node());
  verdict.measuring_nodes = static_cast<int>(senders.size());
  if (options.reference_median > 0 && verdict.measuring_nodes < kOwnMedianFrom) {
    verdict.median_bandwidth = options.reference_median;
    verdict.own_median = false;
  }
  const double relative = options.median_fraction * verdict.median_bandwidth;

  // Every node's bad links, as indexes into `bad`.
  std::vector<BadLink> bad;
  std::map<std::string, int> measured;  // links each node is an end of,
  std::map<std::string, int> sends;     // of which it measured (sent on),
  std::map<std::string, int> receives;  // and was measured by.
  for (const v1::LinkResult* l : distinct) {
    ++measured[l->from_node()];
    ++measured[l->to_node()];
    ++sends[l->from_node()];
    ++receives[l->to_node()];
    const double bw = l->bandwidth_bytes_per_second();
    std::string why;
    if (!l->error().empty()) {
      why = absl::StrCat("failed: ", SafeForLog(l->error(), 120));
    } else if (options.min_bandwidth_bytes_per_second > 0 &&
               bw < options.min_bandwidth_bytes_per_second) {
      why = absl::StrCat(Rate(bw), ", under the minimum ",
                         Rate(options.min_bandwidth_bytes_per_second));
    } else if (relative > 0 && bw < relative) {
      why = absl::StrFormat("%s, under %.2g of the job's median %s", Rate(bw),
                            options.median_fraction, Rate(verdict.median_bandwidth));
    } else if (options.max_rtt_seconds > 0 && l->rtt_seconds() > options.max_rtt_seconds) {
      why = absl::StrFormat("round trip %.3f ms, over %.3f ms", l->rtt_seconds() * 1e3,
                            options.max_rtt_seconds * 1e3);
    }
    if (!why.empty()) bad.push_back({l->from_node(), l->to_node(), std::move(why)});
  }

  std::vector<bool> explained(bad.size(), false);
  while (true) {
    // Each node's unexplained bad links and their distinct peers.
    std::map<std::string, std::vector<size_t>> ends;
    for (size_t i = 0; i < bad.size(); ++i) {
      if (explained[i]) continue;
      ends[bad[i].from_node].push_back(i);
      ends[bad[i].to_node].push_back(i);
    }
    auto peers = [&bad](const std::string& node, const std::vector<size_t>& idx) {
      std::set<std::string> out;
      for (size_t i : idx) out.insert(bad[i].from_node == node ? bad[i].to_node : bad[i].from_node);
      return out.size();
    };
    // The shape of a node's own fault: most of its links bad, or every link
    // in one direction (a NIC slow to send, or to receive). Two bad links
    // one each way, among good ones, are two unlucky measurements (on a
    // busy host, its process woke late twice), not a fault.
    auto fault_shaped = [&](const std::string& node, const std::vector<size_t>& idx) {
      int out = 0, in = 0;
      for (size_t i : idx) (bad[i].from_node == node ? out : in) += 1;
      const int n = static_cast<int>(idx.size());
      return 2 * n > measured[node] || (sends[node] >= 2 && out == sends[node]) ||
             (receives[node] >= 2 && in == receives[node]);
    };
    const std::string* best = nullptr;
    size_t best_links = 0, best_peers = 0;
    for (const auto& [node, idx] : ends) {  // by name, so ties go to the first.
      const size_t p = peers(node, idx);
      if (p < 2) continue;  // one peer: either end could be the bad one.
      if (!fault_shaped(node, idx)) continue;
      if (idx.size() > best_links || (idx.size() == best_links && p > best_peers)) {
        best = &node;
        best_links = idx.size();
        best_peers = p;
      }
    }
    if (best == nullptr) break;
    FlaggedNode f;
    f.node_id = *best;
    std::vector<std::string> parts;
    for (size_t i : ends[*best]) {
      explained[i] = true;
      parts.push_back(absl::StrCat(SafeForLog(bad[i].from_node, 64), "->",
                                   SafeForLog(bad[i].to_node, 64), " ", bad[i].why));
      f.links.push_back(bad[i]);
    }
    f.reason = Truncated(
        absl::StrCat(best_links, " of its ", measured[*best], " measured links are bad, to ",
                     best_peers, " different peers: ", absl::StrJoin(parts, "; ")),
        kMaxReasonBytes);
    verdict.flagged.push_back(std::move(f));
  }
  for (size_t i = 0; i < bad.size(); ++i) {
    if (!explained[i]) verdict.unattributed.push_back(bad[i]);
  }
  return verdict;
}

}  // namespace trainlet::preflight

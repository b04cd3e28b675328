// The network measurement's two pure halves, both the coordinator's:
//
// PlanRings: who measures to whom in a round. The members, sorted, are put
// in an order drawn from the round (so neighbours change from round to
// round, and every coordinator draws the same), and the member at position
// p measures to p+1 and to p+2:
//
//     p-2 --.      .--> p+1
//            \    /
//     p-1 --> [ p ] --> p+2        each node: 2 links out, 2 in, 4 peers
//
// so each node is an end of four links with four different peers (with 5
// members or more). A slow node makes all four of its links slow, but each
// of its peers sees only one slow link among its four.
//
// AnalyzeLinks: which nodes to blame. A link is bad when it failed, is
// below the minimum bandwidth, or below a fraction (a quarter by default) of
// the job's median: the median over the nodes of each node's median link,
// which a minority of slow nodes cannot drag down (they slow four links
// each, soon most links of a small job).
//
// The blame goes to the node at the common end of the bad links, never to
// both ends of one. Repeatedly, among the nodes whose bad links not yet
// explained reach at least two different peers and have the shape of a
// fault of the node's own (most of its links, or all of them in one
// direction), the one with the most is blamed, and its links are then
// explained. A bad link left unexplained (one slow cable, a pair that only
// measured each other, two unlucky measurements of a busy host) is
// reported as a link, and no node is blamed for it.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_PREFLIGHT_RING_H_
#define TRAINLET_PREFLIGHT_RING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

// member -> the members it measures to (none with one member; one with two;
// two otherwise).
using RingPlan = std::map<std::string, std::vector<std::string>>;

// Deterministic from the set of members (order and duplicates do not
// matter) and the round.
RingPlan PlanRings(const std::vector<std::string>& members, uint64_t round);

struct AnalysisOptions {
  double min_bandwidth_bytes_per_second = 0;  // 0: no absolute minimum.
  // A link under this share of the job's median is bad; 0: no comparison.
  // A quarter, not a third: on a host whose CPUs are shared by every pod
  // (bench/preflight_network.py, 8 netns hosts on 2 busy CPUs) healthy links
  // spread 10x, and a third named a healthy node in 5 of 400 rounds, a
  // quarter in none; a link at a tenth is named either way.
  double median_fraction = 0.25;
  double max_rtt_seconds = 0;  // 0: round trips are not judged.
  // The job's median from an earlier measurement (0: none). Used instead of
  // this one's when fewer than kOwnMedianFrom nodes measured: a newcomer
  // measured against the survivors is every link of its own measurement,
  // so its own median would be its own rate.
  double reference_median = 0;
};
inline constexpr int kOwnMedianFrom = 3;

struct BadLink {
  std::string from_node;
  std::string to_node;
  std::string why;  // "12.0 MB/s, under 0.25 of the job's median 120.0 MB/s"
};

struct FlaggedNode {
  std::string node_id;
  std::string reason;          // at most kMaxReasonBytes.
  std::vector<BadLink> links;  // the bad links blamed on it.
};

struct NetworkVerdict {
  std::vector<FlaggedNode> flagged;   // in the order they were blamed.
  std::vector<BadLink> unattributed;  // bad links no node could be blamed for.
  double median_bandwidth = 0;        // over the nodes, of each one's median link.
  bool own_median = true;             // false: AnalysisOptions::reference_median was used.
  int measuring_nodes = 0;            // nodes that measured (sent on) a link.
  int links = 0;                      // distinct links considered.
};

// `links` as the members reported them (a link reported twice counts once;
// a link from a node to itself is ignored).
NetworkVerdict AnalyzeLinks(const std::vector<v1::LinkResult>& links,
                            const AnalysisOptions& options = {});

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_RING_H_

// The rank order of a closing round, from what its members' joins say
// (docs/topology.md, "Rank order"): which order (--rank-order, a
// scheduler's placement, the domains sent), the ranks, and the line every
// node logs. The checks of JoinRequest's topology fields, shared with the
// agent's configuration so that a bad --topology fails at start with the
// same words. No gRPC; the grouping itself is topology_order.h's.
#ifndef TRAINLET_RENDEZVOUS_RANK_ORDER_H_
#define TRAINLET_RENDEZVOUS_RANK_ORDER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rendezvous/rank_assignment.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// The levels the coordinator adds: the NVLink clique from NVML
// (topology.nvlink_clique), then co-located pods (equal topology.boot_id).
inline constexpr absl::string_view kNvlinkCliqueLevel = "nvlink_clique";
inline constexpr absl::string_view kBootIdLevel = "boot_id";
// The GPU operator's label for the same clique: a node that sent it has
// its NVML clique already.
inline constexpr absl::string_view kGpuCliqueLabel = "nvidia.com/gpu.clique";

// A key: 1..kMaxTopologyKeyLength bytes of [A-Za-z0-9._/-] (what a
// Kubernetes label key may hold). A value: 1..kMaxTopologyValueLength bytes
// of printable ASCII without spaces. The message says what is wrong,
// without the caller's name for the input.
absl::Status CheckTopologyKey(absl::string_view key);
absl::Status CheckTopologyValue(absl::string_view value);
// JoinRequest.domains, .scheduler_placement and .rank_order (INVALID_ARGUMENT
// naming the field).
absl::Status CheckJoinTopology(const v1::JoinRequest& r);

// A member's domains for the order: its own, widest first, then its NVLink
// clique (unless it sent nvidia.com/gpu.clique), then its boot id.
NodeDomains DomainsOf(const v1::JoinRequest& r);

struct RoundOrder {
  std::vector<int> ranks;  // ranks[i] for joins[i]
  // For every member's Assignment.rank_order_note (empty: nothing said of
  // topology), and the coordinator's log line (the note and the order).
  std::string note;
  std::string log;
};
// candidates[i] (node id, hint, previous rank) belongs to joins[i].
RoundOrder OrderRound(const std::vector<const v1::JoinRequest*>& joins,
                      std::vector<RankCandidate> candidates, bool honor_hints);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_RANK_ORDER_H_

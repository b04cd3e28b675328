#include "rendezvous/rank_order.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "rendezvous/protocol.h"

namespace trainlet::rendezvous {
namespace {

bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == '/';
}

bool IsPrintableNoSpace(absl::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// At most this many node ids in the coordinator's order line.
constexpr int kOrderIdsLogged = 16;

}  // namespace

absl::Status CheckTopologyKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxTopologyKeyLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a domain key is 1..%d bytes, got %d", kMaxTopologyKeyLength, key.size()));
  }
  for (char c : key) {
    if (!IsKeyChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "domain key \"", SafeForLog(key, 64),
          "\" holds a character other than letters, digits and . _ - / (a label key's)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTopologyValue(absl::string_view value) {
  if (value.empty() || value.size() > kMaxTopologyValueLength || !IsPrintableNoSpace(value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a domain value is 1..%d bytes of printable ASCII without spaces",
                        kMaxTopologyValueLength));
  }
  return absl::OkStatus();
}

absl::Status CheckJoinTopology(const v1::JoinRequest& r) {
  if (r.domains_size() > kMaxTopologyDomains) {
    return absl::InvalidArgumentError(absl::StrFormat("domains: at most %d entries, got %d",
                                                      kMaxTopologyDomains, r.domains_size()));
  }
  absl::flat_hash_set<absl::string_view> keys;
  for (int i = 0; i < r.domains_size(); ++i) {
    const v1::TopologyDomain& d = r.domains(i);
    absl::Status s = CheckTopologyKey(d.key());
    if (s.ok()) s = CheckTopologyValue(d.value());
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("domains[", i, "]: ", s.message()));
    const bool reserved = d.key() == kBootIdLevel || d.key() == kNvlinkCliqueLevel;
    if (reserved || !keys.insert(d.key()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "domains[", i, "]: key \"", d.key(), "\" ",
          reserved ? "is one of the coordinator's own levels (NVML's clique, co-located pods)"
                   : "appears twice"));
    }
  }
  if (r.scheduler_placement().size() > kMaxSchedulerPlacementLength ||
      !IsPrintableNoSpace(r.scheduler_placement())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("scheduler_placement: at most %d bytes of printable ASCII without spaces",
                        kMaxSchedulerPlacementLength));
  }
  if (!v1::RankOrder_IsValid(r.rank_order())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank_order: expected 0 (auto), 1 (index) or 2 (topology), got %d", r.rank_order()));
  }
  return absl::OkStatus();
}

NodeDomains DomainsOf(const v1::JoinRequest& r) {
  NodeDomains d;
  d.reserve(r.domains_size() + 1);
  bool has_clique = false;
  for (const v1::TopologyDomain& x : r.domains()) {
    d.emplace_back(x.key(), x.value());
    has_clique |= x.key() == kGpuCliqueLabel;
  }
  if (!has_clique && !r.topology().nvlink_clique().empty()) {
    d.emplace_back(std::string(kNvlinkCliqueLevel), r.topology().nvlink_clique());
  }
  if (!r.topology().boot_id().empty()) {
    d.emplace_back(std::string(kBootIdLevel), r.topology().boot_id());
  }
  return d;
}

RoundOrder OrderRound(const std::vector<const v1::JoinRequest*>& joins,
                      std::vector<RankCandidate> candidates, bool honor_hints) {
  const int n = static_cast<int>(joins.size());
  RankOrderVotes votes;
  for (const v1::JoinRequest* j : joins) {
    votes.index += j->rank_order() == v1::RANK_ORDER_INDEX;
    votes.topology += j->rank_order() == v1::RANK_ORDER_TOPOLOGY;
    votes.with_domains += j->domains_size() > 0 || !j->topology().nvlink_clique().empty();
    if (votes.placement.empty() && !j->scheduler_placement().empty()) {
      votes.placement = j->scheduler_placement();
      votes.placement_node = j->member().node_id();
    }
  }
  const RankOrderChoice choice = ChooseRankOrder(votes);
  // Each member's domains once, where the order and the count read them.
  std::vector<NodeDomains> own(n);
  DomainsView domains(n);
  for (int i = 0; i < n; ++i) {
    candidates[i].hint_from_index = joins[i]->rank_hint_from_index();
    NodeDomains* d = choice.order == RankOrder::kTopology ? &candidates[i].domains : &own[i];
    if (choice.order == RankOrder::kTopology || votes.with_domains > 0) *d = DomainsOf(*joins[i]);
    domains[i] = d;
  }
  RoundOrder out;
  out.ranks = AssignRanks(candidates, honor_hints, choice.order);
  if (choice.why.empty()) return out;

  std::vector<int> ring(n);
  for (int i = 0; i < n; ++i) ring[out.ranks[i]] = i;
  std::string note = choice.why;
  const RingSharing sharing = CountRingSharing(domains, ring, MergeLevels(domains, ring));
  if (!sharing.levels.empty() && sharing.pairs > 0) {
    absl::StrAppend(&note, "; ring neighbours sharing each level: ", DescribeRingSharing(sharing));
  }
  if (note.size() > kMaxRankOrderNoteLength) {
    note.resize(kMaxRankOrderNoteLength - 3);
    note += "...";
  }
  out.log = absl::StrCat(note, "; order:");
  for (int r = 0; r < n && r < kOrderIdsLogged; ++r) {
    absl::StrAppend(&out.log, " ", SafeForLog(candidates[ring[r]].node_id, 64));
  }
  if (n > kOrderIdsLogged) absl::StrAppend(&out.log, " and ", n - kOrderIdsLogged, " more");
  out.note = std::move(note);
  return out;
}

}  // namespace trainlet::rendezvous

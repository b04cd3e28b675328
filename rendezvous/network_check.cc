#include "rendezvous/network_check.h"

#include <algorithm>
#include <utility>

namespace trainlet::rendezvous {

absl::Duration NetworkCheckBudget(int links_per_measurer, absl::Duration per_link_transfer) {
  // link_client.h's MeasureOptions defaults: connect within 1 s, pings
  // within 0.5 s, then the transfer in 3 samples, each on a connection of
  // its own (each may take the connect timeout again); plus 1 s for the
  // calls around them.
  const absl::Duration per_link =
      absl::Seconds(1) + absl::Milliseconds(500) + 3 * absl::Seconds(1) + per_link_transfer;
  return per_link * std::max(1, links_per_measurer) + absl::Seconds(1);
}

std::map<std::string, v1::NetworkPlan> NetworkCheck::Start(const std::vector<Candidate>& candidates,
                                                           uint64_t round, uint64_t key,
                                                           uint64_t max_bytes_per_link,
                                                           absl::Duration per_link_transfer,
                                                           absl::Time deadline) {
  Abandon();
  std::map<std::string, const Candidate*> by_id;
  std::vector<std::string> ids;
  for (const Candidate& c : candidates) {
    if (c.port <= 0 || c.host.empty()) continue;
    if (by_id.emplace(c.node_id, &c).second) ids.push_back(c.node_id);
  }
  key_ = key;
  max_bytes_per_link_ = max_bytes_per_link;
  per_link_transfer_ = per_link_transfer;
  std::map<std::string, v1::NetworkPlan> plans;
  const preflight::RingPlan ring = preflight::PlanRings(ids, round);
  for (const auto& [id, targets] : ring) {
    if (!by_id.at(id)->measures || targets.empty()) continue;
    plans[id] = PlanFor(id, targets, by_id, round);
  }
  if (plans.empty()) return plans;
  active_ = true;
  round_ = round;
  deadline_ = deadline;
  measurers_ = static_cast<int>(plans.size());
  return plans;
}

v1::NetworkPlan NetworkCheck::PlanFor(const std::string& measurer,
                                      const std::vector<std::string>& targets,
                                      const std::map<std::string, const Candidate*>& by_id,
                                      uint64_t round) {
  v1::NetworkPlan plan;
  plan.set_round(round);
  plan.set_nonce(key_);
  plan.set_max_bytes_per_link(max_bytes_per_link_);
  plan.set_max_millis_per_link(absl::ToInt64Milliseconds(per_link_transfer_));
  for (const std::string& t : targets) {
    const Candidate& c = *by_id.at(t);
    v1::LinkTarget* target = plan.add_targets();
    target->set_node_id(c.node_id);
    target->set_host(c.host);
    target->set_port(c.port);
    targets_[measurer].insert(t);
  }
  waiting_.insert(measurer);
  return plan;
}

std::optional<v1::NetworkPlan> NetworkCheck::Extend(const Candidate& newcomer,
                                                    const std::vector<Candidate>& others,
                                                    absl::Time deadline) {
  if (!active_ || newcomer.port <= 0 || newcomer.host.empty() ||
      targets_.count(newcomer.node_id) > 0) {
    return std::nullopt;
  }
  std::map<std::string, const Candidate*> by_id;
  std::vector<std::string> ids;
  for (const Candidate& c : others) {
    if (c.port <= 0 || c.host.empty() || c.node_id == newcomer.node_id) continue;
    if (by_id.emplace(c.node_id, &c).second) ids.push_back(c.node_id);
  }
  by_id.emplace(newcomer.node_id, &newcomer);
  ids.push_back(newcomer.node_id);
  const preflight::RingPlan ring = preflight::PlanRings(ids, round_);
  auto mine = ring.find(newcomer.node_id);
  if (mine == ring.end() || mine->second.empty()) return std::nullopt;
  v1::NetworkPlan plan = PlanFor(newcomer.node_id, mine->second, by_id, round_);
  ++measurers_;
  deadline_ = std::max(deadline_, deadline);
  return plan;
}

bool NetworkCheck::Add(const std::string& node_id,
                       const google::protobuf::RepeatedPtrField<v1::LinkResult>& links) {
  if (!active_ || waiting_.erase(node_id) == 0) return false;
  const std::set<std::string>& targets = targets_[node_id];
  int kept = 0;
  for (const v1::LinkResult& l : links) {
    if (kept == kMaxLinksPerMeasurer) break;
    if (l.from_node() != node_id || targets.count(l.to_node()) == 0) continue;
    links_.push_back(l);
    ++kept;
  }
  return true;
}

preflight::NetworkVerdict NetworkCheck::Finish(const preflight::AnalysisOptions& options) {
  preflight::NetworkVerdict verdict = preflight::AnalyzeLinks(links_, options);
  Abandon();
  return verdict;
}

void NetworkCheck::Abandon() {
  active_ = false;
  deadline_ = absl::InfiniteFuture();
  measurers_ = 0;
  waiting_.clear();
  targets_.clear();
  links_.clear();
}

}  // namespace trainlet::rendezvous

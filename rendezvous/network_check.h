// One network measurement among a round's members, the coordinator's side
// (docs/preflight.md, "The network"): who measures to whom, the links that
// come back, and the verdict. The Coordinator holds two, under its lock:
// one that gates a gathering round (--preflight=exclude|fail) and one that
// runs beside a round's workers (warn).
//
//            Start (measurers, each given a NetworkPlan)
//   +------+ -----------------------------------------> +---------+
//   | IDLE |                                             | WAITING |--Add (a measurer's
//   +------+ <-------- Finish: AnalyzeLinks ----------- +---------+  links) / Withdraw
//                       once Complete: every measurer        ^   |
//                       answered, or the deadline passed     +---+
//
// Measurers are the members whose links are due (JoinRequest.network_due);
// targets are every member with a measurer port, in PlanRings' ring, so a
// lone newcomer measures to two of the survivors, and the job's earlier
// median judges it (AnalysisOptions::reference_median, which the
// Coordinator keeps: the last measurement with kOwnMedianFrom measurers or
// more).
//
// Bounded: links are kept only from awaited measurers, at most
// kMaxLinksPerMeasurer each (the plan gives two).
//
// Not thread-safe: the Coordinator's lock guards it.
#ifndef TRAINLET_RENDEZVOUS_NETWORK_CHECK_H_
#define TRAINLET_RENDEZVOUS_NETWORK_CHECK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "preflight/ring.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

inline constexpr int kMaxLinksPerMeasurer = 4;

// How long a measurement may take: each link is bounded by the measurer's
// connect, ping and transfer limits (preflight/link_client.h's defaults);
// a measurer's links run one after the other; plus the calls around them.
absl::Duration NetworkCheckBudget(int links_per_measurer, absl::Duration per_link_transfer);

class NetworkCheck {
 public:
  struct Candidate {
    std::string node_id;
    std::string host;  // its address, as members reach it.
    int port = 0;      // its measurer's (JoinRequest.link_port).
    bool measures = false;
  };

  bool active() const { return active_; }
  uint64_t round() const { return round_; }
  absl::Time deadline() const { return deadline_; }

  // Plans a measurement among `candidates` (those without a port are left
  // out) for `round`: each measurer's plan, keyed by node id. Empty (and
  // nothing starts) when no measurer has a target.
  std::map<std::string, v1::NetworkPlan> Start(const std::vector<Candidate>& candidates,
                                               uint64_t round, uint64_t key,
                                               uint64_t max_bytes_per_link,
                                               absl::Duration per_link_transfer,
                                               absl::Time deadline);
  // A measurer that joins a measurement already under way (a due node that
  // joined the gathering round while the others measure): its plan, to its
  // targets in the ring of `others` and itself, for this measurement's
  // round; the deadline moves out to `deadline` if later. nullopt when not
  // active, already planned, or it has no target.
  std::optional<v1::NetworkPlan> Extend(const Candidate& newcomer,
                                        const std::vector<Candidate>& others, absl::Time deadline);
  bool Awaits(const std::string& node_id) const { return waiting_.count(node_id) > 0; }
  // `node_id`'s links (only those it measured to its plan's targets count);
  // false when it was not awaited.
  bool Add(const std::string& node_id,
           const google::protobuf::RepeatedPtrField<v1::LinkResult>& links);
  // The measurer will not answer (gone).
  void Withdraw(const std::string& node_id) { waiting_.erase(node_id); }
  bool Complete(absl::Time now) const { return active_ && (waiting_.empty() || now >= deadline_); }
  int awaited() const { return static_cast<int>(waiting_.size()); }

  // The verdict on what came back; back to IDLE. The caller keeps the
  // job's reference median (a verdict with own_median and kOwnMedianFrom
  // measurers or more sets it) and passes it in `options`.
  preflight::NetworkVerdict Finish(const preflight::AnalysisOptions& options);
  // Back to IDLE without a verdict (the round it measured for is gone).
  void Abandon();

  int measurers() const { return measurers_; }

 private:
  // `measurer`'s plan to `targets`; it is then awaited.
  v1::NetworkPlan PlanFor(const std::string& measurer, const std::vector<std::string>& targets,
                          const std::map<std::string, const Candidate*>& by_id, uint64_t round);

  bool active_ = false;
  uint64_t round_ = 0;
  absl::Time deadline_ = absl::InfiniteFuture();
  int measurers_ = 0;
  std::set<std::string> waiting_;
  std::map<std::string, std::set<std::string>> targets_;  // measurer -> its plan's targets.
  std::vector<v1::LinkResult> links_;
  // Start's plan parameters, for Extend.
  uint64_t key_ = 0;
  uint64_t max_bytes_per_link_ = 0;
  absl::Duration per_link_transfer_;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_NETWORK_CHECK_H_

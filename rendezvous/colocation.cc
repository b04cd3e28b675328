#include "rendezvous/colocation.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace trainlet::rendezvous {
namespace {

struct Group {
  int members = 0;
  std::set<std::string> uuids;  // every member's GPUs.
  bool unknown_gpus = false;    // a member has GPUs but sent no UUIDs.
};

}  // namespace

void MarkColocated(absl::Span<const trainlet::v1::Topology* const> topologies,
                   absl::Span<trainlet::v1::NodeAssignment> nodes) {
  const size_t n = std::min(topologies.size(), nodes.size());
  // Members per machine; views into the topologies, which outlive this call.
  absl::flat_hash_map<absl::string_view, int> per_machine;
  per_machine.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const absl::string_view boot_id = topologies[i]->boot_id();
    if (!boot_id.empty()) ++per_machine[boot_id];
  }
  // Only machines with two or more members can share a host id: the rest
  // are counted and done with.
  using Key = std::pair<absl::string_view, absl::string_view>;  // boot_id, ipc namespace.
  std::map<Key, Group> per_ipc;
  for (size_t i = 0; i < n; ++i) {
    const auto& t = *topologies[i];
    if (t.boot_id().empty() || t.ipc_namespace().empty() || per_machine[t.boot_id()] < 2) continue;
    Group& g = per_ipc[{t.boot_id(), t.ipc_namespace()}];
    ++g.members;
    g.uuids.insert(t.gpu_uuids().begin(), t.gpu_uuids().end());
    g.unknown_gpus |= t.gpu_count() > 0 && t.gpu_uuids().empty();
  }
  // A group may share a host id only if each member sees every GPU of the
  // group: NCCL then uses P2P/IPC between them, which fails on a GPU the
  // process cannot open ("CUDA IPC mapping failed", nccl #324).
  std::map<Key, bool> shared;
  for (size_t i = 0; i < n; ++i) {
    const auto& t = *topologies[i];
    auto it = per_ipc.find({t.boot_id(), t.ipc_namespace()});
    if (t.boot_id().empty() || t.ipc_namespace().empty() || it == per_ipc.end()) continue;
    const Group& g = it->second;
    std::set<std::string> mine(t.gpu_uuids().begin(), t.gpu_uuids().end());
    const bool sees_all = !g.unknown_gpus && mine == g.uuids;
    auto [s, inserted] = shared.emplace(it->first, g.members > 1 && sees_all);
    if (!inserted) s->second = s->second && sees_all;
  }
  // Every entry of `nodes` is set: one without a topology is unknown.
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& t = i < n ? *topologies[i] : trainlet::v1::Topology::default_instance();
    auto& na = nodes[i];
    na.clear_nccl_hostid();
    if (t.boot_id().empty()) {
      na.set_colocated(0);
      continue;
    }
    na.set_colocated(per_machine[t.boot_id()]);
    if (shared.empty()) continue;
    auto s = shared.find({t.boot_id(), t.ipc_namespace()});
    if (s != shared.end() && s->second) na.set_nccl_hostid(t.boot_id());
  }
}

}  // namespace trainlet::rendezvous

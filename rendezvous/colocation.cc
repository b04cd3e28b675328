#include "rendezvous/colocation.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace trainlet::rendezvous {
namespace {

struct Group {
  int members = 0;
  std::set<std::string> uuids;  // every member's GPUs.
  bool unknown_gpus = false;    // a member has GPUs but sent no UUIDs.
};

}  // namespace

void MarkColocated(std::vector<trainlet::v1::NodeAssignment>& nodes) {
  std::map<std::string, int> per_machine;
  std::map<std::pair<std::string, std::string>, Group> per_ipc;
  for (const auto& na : nodes) {
    const auto& t = na.topology();
    if (t.boot_id().empty()) continue;
    ++per_machine[t.boot_id()];
    if (t.ipc_namespace().empty()) continue;
    Group& g = per_ipc[{t.boot_id(), t.ipc_namespace()}];
    ++g.members;
    g.uuids.insert(t.gpu_uuids().begin(), t.gpu_uuids().end());
    g.unknown_gpus |= t.gpu_count() > 0 && t.gpu_uuids().empty();
  }
  // A group may share a host id only if each member sees every GPU of the
  // group: NCCL then uses P2P/IPC between them, which fails on a GPU the
  // process cannot open ("CUDA IPC mapping failed", nccl #324).
  std::map<std::pair<std::string, std::string>, bool> shared;
  for (const auto& na : nodes) {
    const auto& t = na.topology();
    auto it = per_ipc.find({t.boot_id(), t.ipc_namespace()});
    if (t.boot_id().empty() || t.ipc_namespace().empty() || it == per_ipc.end()) continue;
    const Group& g = it->second;
    std::set<std::string> mine(t.gpu_uuids().begin(), t.gpu_uuids().end());
    const bool sees_all = !g.unknown_gpus && mine == g.uuids;
    auto [s, inserted] = shared.emplace(it->first, g.members > 1 && sees_all);
    if (!inserted) s->second = s->second && sees_all;
  }
  for (auto& na : nodes) {
    const auto& t = na.topology();
    na.clear_nccl_hostid();
    if (t.boot_id().empty()) {
      na.set_colocated(0);
      continue;
    }
    na.set_colocated(per_machine[t.boot_id()]);
    auto s = shared.find({t.boot_id(), t.ipc_namespace()});
    if (s != shared.end() && s->second) na.set_nccl_hostid(t.boot_id());
  }
}

}  // namespace trainlet::rendezvous

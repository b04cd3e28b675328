#include "rendezvous/colocation.h"

#include <map>
#include <string>
#include <utility>

namespace trainlet::rendezvous {

void MarkColocated(std::vector<trainlet::v1::NodeAssignment>& nodes) {
  std::map<std::string, int> per_machine;
  std::map<std::pair<std::string, std::string>, int> per_ipc;
  for (const auto& na : nodes) {
    const auto& t = na.topology();
    if (t.boot_id().empty()) continue;
    ++per_machine[t.boot_id()];
    if (!t.ipc_namespace().empty()) ++per_ipc[{t.boot_id(), t.ipc_namespace()}];
  }
  for (auto& na : nodes) {
    const auto& t = na.topology();
    na.clear_nccl_hostid();
    if (t.boot_id().empty()) {
      na.set_colocated(0);
      continue;
    }
    na.set_colocated(per_machine[t.boot_id()]);
    if (t.ipc_namespace().empty()) continue;
    if (per_ipc[{t.boot_id(), t.ipc_namespace()}] > 1) na.set_nccl_hostid(t.boot_id());
  }
}

}  // namespace trainlet::rendezvous

// The coordinator's rank order at a round's close (rendezvous/rank_order.h):
// OrderRound's CPU at 1,000, 6,000 and 10,000 nodes, index order against
// topology order, with EKS's labels (zone + 3 network layers + boot id) and
// with the worst a member may send (16 keys of 317 bytes, each node its own).
//   ninja -C build -j2 bench_rank_order && build/bench/bench_rank_order
#include "rendezvous/rank_order.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace {

namespace v1 = trainlet::v1;
using trainlet::rendezvous::OrderRound;
using trainlet::rendezvous::RankCandidate;

enum class Shape { kNone, kEks, kWorst };

double TimeMs(const std::vector<v1::JoinRequest>& joins_store, int repeat) {
  std::vector<const v1::JoinRequest*> joins;
  for (const auto& j : joins_store) joins.push_back(&j);
  std::vector<RankCandidate> candidates(joins.size());
  for (size_t i = 0; i < joins.size(); ++i) {
    candidates[i].node_id = joins[i]->member().node_id();
    candidates[i].hint = static_cast<int>(i);
    candidates[i].previous_rank = static_cast<int>(i);
  }
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto order = OrderRound(joins, candidates, /*honor_hints=*/false);
    const auto t1 = std::chrono::steady_clock::now();
    if (order.ranks.size() != joins.size()) std::abort();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

std::vector<v1::JoinRequest> Joins(int n, Shape shape) {
  std::vector<v1::JoinRequest> out(n);
  for (int i = 0; i < n; ++i) {
    v1::JoinRequest& j = out[i];
    j.mutable_member()->set_node_id(absl::StrCat("job-node-0-", i));
    j.mutable_topology()->set_boot_id(absl::StrCat("boot-", i / 2));
    if (shape == Shape::kEks) {
      auto add = [&](const char* k, std::string v) {
        auto* d = j.add_domains();
        d->set_key(k);
        d->set_value(std::move(v));
      };
      add("topology.kubernetes.io/zone", std::string("us-east-1") + static_cast<char>('a' + i % 3));
      add("topology.k8s.aws/network-node-layer-1", absl::StrCat("nn-l1-", i % 7));
      add("topology.k8s.aws/network-node-layer-2", absl::StrCat("nn-l2-", i % 61));
      add("topology.k8s.aws/network-node-layer-3", absl::StrCat("nn-l3-", i % 499));
    } else if (shape == Shape::kWorst) {
      for (int k = 0; k < 16; ++k) {
        auto* d = j.add_domains();
        d->set_key(absl::StrCat(std::string(300, 'k'), "/", i, "-", k));
        d->set_value(std::string(256, 'v'));
      }
    }
  }
  return out;
}

}  // namespace

int main() {
  for (int n : {1000, 6000, 10000}) {
    std::printf("%6d nodes: index %.2f ms, topology (EKS labels) %.2f ms, worst keys %.2f ms\n", n,
                TimeMs(Joins(n, Shape::kNone), 5), TimeMs(Joins(n, Shape::kEks), 5),
                TimeMs(Joins(n, Shape::kWorst), 3));
  }
}

// The coordinator orders a round's ranks by the domains its members send
// (rank_order.h, topology_order.h): a whole round on the core, no gRPC.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/rank_order.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CoordinatorRankOrderTest : public ::testing::Test {
 protected:
  void Make(int nodes) {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = nodes;
    o.max_nodes = nodes;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.incarnation = 0xC0;
    o.clock = &clock_;
    core_ = std::make_unique<Coordinator>(o);
  }

  // Node `id` with pod index `index` (a discovered hint unless `explicit_rank`)
  // on switch `sw` ("" for none).
  static v1::JoinRequest Req(const std::string& id, int index, const std::string& sw,
                             bool explicit_rank = false) {
    v1::JoinRequest r;
    r.mutable_member()->set_node_id(id);
    r.mutable_member()->set_incarnation(index + 100);
    r.set_job_id("job");
    r.set_protocol_version(kProtocolVersion);
    r.set_rank_hint(index);
    r.set_rank_hint_from_index(!explicit_rank);
    r.set_local_world_size(1);
    r.set_master_port(29500);
    if (!sw.empty()) {
      v1::TopologyDomain* d = r.add_domains();
      d->set_key("switch");
      d->set_value(sw);
    }
    return r;
  }

  // Joins them all; the node ids by rank once the round closed.
  std::vector<std::string> Round(const std::vector<v1::JoinRequest>& joins) {
    std::map<std::string, std::optional<absl::StatusOr<v1::Assignment>>> got;
    for (const v1::JoinRequest& r : joins) {
      auto* slot = &got[r.member().node_id()];
      core_->Join(r, absl::StrCat("10.0.0.", r.member().incarnation() % 256),
                  absl::InfiniteFuture(),
                  [slot](absl::StatusOr<v1::Assignment> a) { *slot = std::move(a); });
    }
    std::vector<std::string> by_rank(joins.size());
    for (auto& [id, a] : got) {
      if (!a.has_value() || !a->ok()) {
        ADD_FAILURE() << id << ": " << (a.has_value() ? a->status().ToString() : "no answer");
        continue;
      }
      by_rank.at((*a)->node_rank()) = id;
      note_ = (*a)->rank_order_note();
    }
    return by_rank;
  }

  SimulatedClock clock_;
  std::unique_ptr<Coordinator> core_;
  std::string note_;
};

TEST_F(CoordinatorRankOrderTest, Interleaved_GroupedBySwitch_NoteCountsNeighbours) {
  Make(4);
  EXPECT_THAT(
      Round({Req("p-0", 0, "s0"), Req("p-1", 1, "s1"), Req("p-2", 2, "s0"), Req("p-3", 3, "s1")}),
      ElementsAre("p-0", "p-2", "p-1", "p-3"));
  EXPECT_THAT(note_, HasSubstr("ranks by topology"));
  // Ring p-0 p-2 p-1 p-3 (p-0): two of four neighbours share a switch.
  EXPECT_THAT(note_, HasSubstr("switch 2/4"));
}

TEST_F(CoordinatorRankOrderTest, NoDomains_IndexOrderAndNoNote) {
  Make(3);
  EXPECT_THAT(Round({Req("p-2", 2, ""), Req("p-0", 0, ""), Req("p-1", 1, "")}),
              ElementsAre("p-0", "p-1", "p-2"));
  EXPECT_EQ(note_, "");
}

TEST_F(CoordinatorRankOrderTest, RankOrderIndex_KeepsPodIndexAndCountsNeighbours) {
  Make(4);
  std::vector<v1::JoinRequest> joins = {Req("p-0", 0, "s0"), Req("p-1", 1, "s1"),
                                        Req("p-2", 2, "s0"), Req("p-3", 3, "s1")};
  joins[2].set_rank_order(v1::RANK_ORDER_INDEX);
  EXPECT_THAT(Round(joins), ElementsAre("p-0", "p-1", "p-2", "p-3"));
  EXPECT_THAT(note_, HasSubstr("--rank-order=index"));
  EXPECT_THAT(note_, HasSubstr("switch 0/4"));
}

TEST_F(CoordinatorRankOrderTest, SchedulerPlacement_KeepsIndexOrder) {
  Make(4);
  std::vector<v1::JoinRequest> joins = {Req("p-0", 0, "s0"), Req("p-1", 1, "s1"),
                                        Req("p-2", 2, "s0"), Req("p-3", 3, "s1")};
  for (v1::JoinRequest& j : joins) j.set_scheduler_placement("kueue.x-k8s.io/tas");
  EXPECT_THAT(Round(joins), ElementsAre("p-0", "p-1", "p-2", "p-3"));
  EXPECT_THAT(note_, HasSubstr("the scheduler's placement"));
}

TEST_F(CoordinatorRankOrderTest, ExplicitNodeRank_Pinned) {
  Make(4);
  EXPECT_THAT(Round({Req("p-0", 0, "s0"), Req("p-1", 1, "s1", /*explicit_rank=*/true),
                     Req("p-2", 2, "s0"), Req("p-3", 3, "s1")}),
              ElementsAre("p-0", "p-1", "p-2", "p-3"));
}

TEST_F(CoordinatorRankOrderTest, NvmlClique_IsALevel_UnlessTheLabelSaidIt) {
  Make(4);
  std::vector<v1::JoinRequest> joins = {Req("p-0", 0, ""), Req("p-1", 1, ""), Req("p-2", 2, ""),
                                        Req("p-3", 3, "")};
  for (int i = 0; i < 4; ++i) {
    joins[i].mutable_topology()->set_nvlink_clique(absl::StrCat("c.", i % 2));
  }
  EXPECT_THAT(Round(joins), ElementsAre("p-0", "p-2", "p-1", "p-3"));
  EXPECT_THAT(note_, HasSubstr("nvlink_clique 2/4"));

  v1::JoinRequest r = Req("p-0", 0, "");
  r.mutable_topology()->set_nvlink_clique("c.0");
  v1::TopologyDomain* label = r.add_domains();
  label->set_key("nvidia.com/gpu.clique");
  label->set_value("c.0");
  r.mutable_topology()->set_boot_id("b");
  const NodeDomains d = DomainsOf(r);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].first, "nvidia.com/gpu.clique");
  EXPECT_EQ(d[1].first, "boot_id");
}

TEST_F(CoordinatorRankOrderTest, BadDomains_RefusedNamingTheField) {
  Make(2);
  auto refused = [&](v1::JoinRequest r) {
    std::optional<absl::StatusOr<v1::Assignment>> got;
    core_->Join(r, "10.0.0.9", absl::InfiniteFuture(),
                [&](absl::StatusOr<v1::Assignment> a) { got = std::move(a); });
    EXPECT_TRUE(got.has_value() && !got->ok());
    return got.has_value() ? std::string(got->status().message()) : "";
  };
  v1::JoinRequest spaces = Req("p-0", 0, "a b");
  EXPECT_THAT(refused(spaces), HasSubstr("domains[0]"));
  v1::JoinRequest twice = Req("p-0", 0, "s0");
  *twice.add_domains() = twice.domains(0);
  EXPECT_THAT(refused(twice), HasSubstr("appears twice"));
  v1::JoinRequest many = Req("p-0", 0, "");
  for (int i = 0; i < kMaxTopologyDomains + 1; ++i) {
    v1::TopologyDomain* d = many.add_domains();
    d->set_key(absl::StrCat("k", i));
    d->set_value("v");
  }
  EXPECT_THAT(refused(many), HasSubstr("at most 16"));
  v1::JoinRequest key = Req("p-0", 0, "s0");
  key.mutable_domains(0)->set_key("sw itch");
  EXPECT_THAT(refused(key), HasSubstr("domains[0]"));
  v1::JoinRequest placement = Req("p-0", 0, "s0");
  placement.set_scheduler_placement(std::string(200, 'k'));
  EXPECT_THAT(refused(placement), HasSubstr("scheduler_placement"));
  v1::JoinRequest reserved = Req("p-0", 0, "s0");
  reserved.mutable_domains(0)->set_key("nvlink_clique");
  EXPECT_THAT(refused(reserved), HasSubstr("coordinator's own levels"));
  v1::JoinRequest clique = Req("p-0", 0, "s0");
  clique.mutable_topology()->set_nvlink_clique("a b");
  EXPECT_THAT(refused(clique), HasSubstr("topology.nvlink_clique"));
  v1::JoinRequest order = Req("p-0", 0, "s0");
  order.set_rank_order(static_cast<v1::RankOrder>(7));
  EXPECT_THAT(refused(order), HasSubstr("rank_order"));
}

}  // namespace
}  // namespace trainlet::rendezvous

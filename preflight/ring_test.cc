#include "preflight/ring.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainlet::preflight {
namespace ring_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Hosts(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(absl::StrCat("h", i));
  return out;
}

TEST(PlanRings, EveryNodeMeasuresTwoAndIsMeasuredByTwoFourDistinctPeers) {
  for (int n : {5, 8, 33}) {
    const RingPlan plan = PlanRings(Hosts(n), 7);
    ASSERT_EQ(plan.size(), static_cast<size_t>(n));
    std::map<std::string, std::set<std::string>> peers;
    std::map<std::string, int> incoming;
    for (const auto& [from, targets] : plan) {
      ASSERT_EQ(targets.size(), 2u) << from;
      for (const std::string& to : targets) {
        EXPECT_NE(to, from);
        peers[from].insert(to);
        peers[to].insert(from);
        ++incoming[to];
      }
    }
    for (const std::string& h : Hosts(n)) {
      EXPECT_EQ(incoming[h], 2) << h;
      EXPECT_EQ(peers[h].size(), 4u) << h << " of " << n;
    }
  }
}

TEST(PlanRings, SmallJobs) {
  EXPECT_TRUE(PlanRings({"a"}, 1).at("a").empty());
  const RingPlan two = PlanRings({"a", "b"}, 1);
  EXPECT_THAT(two.at("a"), ElementsAre("b"));
  EXPECT_THAT(two.at("b"), ElementsAre("a"));
  const RingPlan three = PlanRings({"a", "b", "c"}, 1);
  for (const auto& [from, targets] : three) EXPECT_EQ(targets.size(), 2u) << from;
  EXPECT_TRUE(PlanRings({}, 1).empty());
}

TEST(PlanRings, DeterministicFromTheSetAndTheRoundAndVariesByRound) {
  std::vector<std::string> shuffled = {"h3", "h0", "h4", "h1", "h2", "h0"};
  EXPECT_EQ(PlanRings(shuffled, 4), PlanRings(Hosts(5), 4));
  int differ = 0;
  for (uint64_t round = 1; round <= 10; ++round) {
    differ += PlanRings(Hosts(8), round) != PlanRings(Hosts(8), round + 1) ? 1 : 0;
  }
  EXPECT_GE(differ, 8);
}

// Link results as a measurement of `plan` would give them: every link at
// `rate`, but those touching a node in `slow` (either end) at rate / 10.
std::vector<v1::LinkResult> Measured(const RingPlan& plan, double rate,
                                     const std::set<std::string>& slow) {
  std::vector<v1::LinkResult> out;
  for (const auto& [from, targets] : plan) {
    for (const std::string& to : targets) {
      v1::LinkResult l;
      l.set_from_node(from);
      l.set_to_node(to);
      const bool bad = slow.count(from) > 0 || slow.count(to) > 0;
      l.set_bandwidth_bytes_per_second(bad ? rate / 10 : rate);
      l.set_seconds(0.1);
      l.set_bytes(static_cast<uint64_t>(l.bandwidth_bytes_per_second() * 0.1));
      l.set_rtt_seconds(50e-6);
      out.push_back(l);
    }
  }
  return out;
}

std::vector<std::string> Flagged(const NetworkVerdict& v) {
  std::vector<std::string> out;
  for (const FlaggedNode& f : v.flagged) out.push_back(f.node_id);
  return out;
}

TEST(AnalyzeLinks, ASlowNodeIsBlamedAndNotItsNeighbours) {
  for (uint64_t round = 1; round <= 20; ++round) {
    const RingPlan plan = PlanRings(Hosts(5), round);
    const NetworkVerdict v = AnalyzeLinks(Measured(plan, 1e9, {"h2"}));
    EXPECT_THAT(Flagged(v), ElementsAre("h2")) << "round " << round;
    EXPECT_THAT(v.unattributed, IsEmpty());
    ASSERT_EQ(v.flagged.size(), 1u);
    EXPECT_THAT(v.flagged[0].reason, HasSubstr("4 of its 4 measured links are bad"));
    EXPECT_THAT(v.flagged[0].reason, HasSubstr("under 0.25 of the job's median 1.00 GB/s"));
    EXPECT_EQ(v.median_bandwidth, 1e9);
  }
}

TEST(AnalyzeLinks, TwoSlowNodesAreBothBlamedAndOnlyThem) {
  for (int n : {6, 8, 12}) {
    for (uint64_t round = 1; round <= 20; ++round) {
      const RingPlan plan = PlanRings(Hosts(n), round);
      const NetworkVerdict v = AnalyzeLinks(Measured(plan, 1e9, {"h1", "h4"}));
      EXPECT_THAT(Flagged(v), ::testing::UnorderedElementsAre("h1", "h4"))
          << n << " nodes, round " << round;
      EXPECT_THAT(v.unattributed, IsEmpty());
    }
  }
}

TEST(AnalyzeLinks, AHealthySetFlagsNobody) {
  const NetworkVerdict v = AnalyzeLinks(Measured(PlanRings(Hosts(8), 3), 1e9, {}));
  EXPECT_THAT(v.flagged, IsEmpty());
  EXPECT_THAT(v.unattributed, IsEmpty());
  EXPECT_EQ(v.links, 16);
}

TEST(AnalyzeLinks, OneSlowLinkIsReportedButBlamesNoNode) {
  std::vector<v1::LinkResult> links = Measured(PlanRings(Hosts(5), 1), 1e9, {});
  links[0].set_bandwidth_bytes_per_second(1e7);
  const NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_THAT(v.flagged, IsEmpty());
  ASSERT_EQ(v.unattributed.size(), 1u);
  EXPECT_EQ(v.unattributed[0].from_node, links[0].from_node());
}

TEST(AnalyzeLinks, TwoNodesCannotBlameEitherEnd) {
  std::vector<v1::LinkResult> links = Measured(PlanRings({"a", "b"}, 1), 1e9, {});
  ASSERT_EQ(links.size(), 2u);
  links[0].set_bandwidth_bytes_per_second(1e7);  // one direction slow.
  const NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_THAT(v.flagged, IsEmpty());
  EXPECT_EQ(v.unattributed.size(), 1u);
}

TEST(AnalyzeLinks, ThreeNodesBlameTheSlowOne) {
  const NetworkVerdict v = AnalyzeLinks(Measured(PlanRings({"a", "b", "c"}, 1), 1e9, {"c"}));
  EXPECT_THAT(Flagged(v), ElementsAre("c"));
}

// A newcomer measured against two survivors: every link is its own, so its
// own median would be its own rate; the job's earlier median judges it.
TEST(AnalyzeLinks, ANewcomerMeasuredAloneIsJudgedByTheJobsEarlierMedian) {
  std::vector<v1::LinkResult> links;
  for (const char* to : {"s1", "s2"}) {
    v1::LinkResult l;
    l.set_from_node("new");
    l.set_to_node(to);
    l.set_bandwidth_bytes_per_second(1e8);
    links.push_back(l);
  }
  NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_THAT(v.flagged, IsEmpty());  // by its own median it is fine.
  EXPECT_TRUE(v.own_median);
  AnalysisOptions o;
  o.reference_median = 1e9;
  v = AnalyzeLinks(links, o);
  EXPECT_THAT(Flagged(v), ElementsAre("new"));
  EXPECT_FALSE(v.own_median);
  EXPECT_EQ(v.measuring_nodes, 1);
  EXPECT_THAT(v.flagged[0].reason, HasSubstr("under 0.25 of the job's median 1.00 GB/s"));
  // A healthy newcomer passes against the same reference.
  for (v1::LinkResult& l : links) l.set_bandwidth_bytes_per_second(9e8);
  EXPECT_THAT(AnalyzeLinks(links, o).flagged, IsEmpty());
  // With three or more measuring, the measurement's own median stands.
  const NetworkVerdict full = AnalyzeLinks(Measured(PlanRings(Hosts(5), 1), 1e8, {}), o);
  EXPECT_TRUE(full.own_median);
  EXPECT_THAT(full.flagged, IsEmpty());
}

TEST(AnalyzeLinks, ANodeThatSendsSlowlyButReceivesWellIsBlamed) {
  const RingPlan plan = PlanRings(Hosts(8), 2);
  std::vector<v1::LinkResult> links = Measured(plan, 1e9, {});
  for (v1::LinkResult& l : links) {
    if (l.from_node() == "h5") l.set_bandwidth_bytes_per_second(5e7);
  }
  EXPECT_THAT(Flagged(AnalyzeLinks(links)), ElementsAre("h5"));
}

TEST(AnalyzeLinks, ANodeThatReceivesSlowlyIsBlamed) {
  const RingPlan plan = PlanRings(Hosts(8), 5);
  std::vector<v1::LinkResult> links = Measured(plan, 1e9, {});
  for (v1::LinkResult& l : links) {
    if (l.to_node() == "h2") l.set_bandwidth_bytes_per_second(5e7);
  }
  EXPECT_THAT(Flagged(AnalyzeLinks(links)), ElementsAre("h2"));
}

TEST(AnalyzeLinks, TwoSlowLinksOneEachWayAmongGoodOnesBlameNobody) {
  // What a busy host's scheduler does to two measurements: not a fault.
  const RingPlan plan = PlanRings(Hosts(8), 5);
  std::vector<v1::LinkResult> links = Measured(plan, 1e9, {});
  int in = 0, out = 0;
  for (v1::LinkResult& l : links) {
    if (l.from_node() == "h6" && out++ == 0) l.set_bandwidth_bytes_per_second(1e8);
    if (l.to_node() == "h6" && in++ == 0) l.set_bandwidth_bytes_per_second(1e8);
  }
  const NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_THAT(v.flagged, IsEmpty());
  EXPECT_EQ(v.unattributed.size(), 2u);
}

TEST(AnalyzeLinks, FailedMeasurementsCountAsBadLinks) {
  const RingPlan plan = PlanRings(Hosts(5), 9);
  std::vector<v1::LinkResult> links = Measured(plan, 1e9, {});
  for (v1::LinkResult& l : links) {
    if (l.from_node() == "h3" || l.to_node() == "h3") {
      l.set_bandwidth_bytes_per_second(0);
      l.set_error("connect to 10.0.0.13:29510: Connection refused");
    }
  }
  const NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_THAT(Flagged(v), ElementsAre("h3"));
  EXPECT_THAT(v.flagged[0].reason, HasSubstr("failed: connect to"));
}

TEST(AnalyzeLinks, AbsoluteMinimumAndRtt) {
  const RingPlan plan = PlanRings(Hosts(5), 1);
  AnalysisOptions o;
  o.min_bandwidth_bytes_per_second = 2e9;  // every link is under it.
  o.median_fraction = 0;
  const NetworkVerdict all = AnalyzeLinks(Measured(plan, 1e9, {}), o);
  EXPECT_GE(all.flagged.size(), 1u);
  EXPECT_THAT(all.flagged[0].reason, HasSubstr("under the minimum 2.00 GB/s"));

  std::vector<v1::LinkResult> links = Measured(plan, 1e9, {});
  for (v1::LinkResult& l : links) {
    if (l.from_node() == "h0" || l.to_node() == "h0") l.set_rtt_seconds(0.02);
  }
  AnalysisOptions rtt;
  rtt.max_rtt_seconds = 0.005;
  const NetworkVerdict v = AnalyzeLinks(links, rtt);
  EXPECT_THAT(Flagged(v), ElementsAre("h0"));
  EXPECT_THAT(v.flagged[0].reason, HasSubstr("round trip 20.000 ms"));
}

TEST(AnalyzeLinks, DuplicatesAndSelfLinksAreIgnored) {
  std::vector<v1::LinkResult> links = Measured(PlanRings(Hosts(5), 1), 1e9, {});
  links.push_back(links[0]);
  v1::LinkResult self = links[0];
  self.set_to_node(self.from_node());
  self.set_bandwidth_bytes_per_second(1);
  links.push_back(self);
  const NetworkVerdict v = AnalyzeLinks(links);
  EXPECT_EQ(v.links, 10);
  EXPECT_THAT(v.flagged, IsEmpty());
}

// Recorded measurements: 50 rounds of the real measurer on 8 netns hosts
// (bench/preflight_network.py --record), one JSON LinkResult per line and a
// line "round N" before each round's. A healthy set never flags anyone.
TEST(AnalyzeLinks, FiftyRecordedHealthyRoundsFlagNobody) {
  std::ifstream in(TRAINLET_PREFLIGHT_TESTDATA "/healthy_links.jsonl");
  ASSERT_TRUE(in.good());
  std::map<int, std::vector<v1::LinkResult>> rounds;
  int round = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("round ", 0) == 0) {
      round = std::stoi(line.substr(6));
      continue;
    }
    if (line.empty()) continue;
    v1::LinkResult l;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &l).ok()) << line;
    rounds[round].push_back(l);
  }
  ASSERT_GE(rounds.size(), 50u);
  for (const auto& [r, links] : rounds) {
    EXPECT_EQ(links.size(), 16u) << "round " << r;
    const NetworkVerdict v = AnalyzeLinks(links);
    EXPECT_THAT(Flagged(v), IsEmpty()) << "round " << r;
  }
}

}  // namespace ring_test
}  // namespace trainlet::preflight

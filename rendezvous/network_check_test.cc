#include "rendezvous/network_check.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::LinkResult Link(const std::string& from, const std::string& to, double bps) {
  v1::LinkResult l;
  l.set_from_node(from);
  l.set_to_node(to);
  l.set_bandwidth_bytes_per_second(bps);
  return l;
}

google::protobuf::RepeatedPtrField<v1::LinkResult> Links(std::vector<v1::LinkResult> v) {
  google::protobuf::RepeatedPtrField<v1::LinkResult> out;
  for (auto& l : v) *out.Add() = std::move(l);
  return out;
}

TEST(NetworkCheck, OnlyMeasurersArePlannedAndTargetsNeedAPort) {
  NetworkCheck check;
  const absl::Time t0 = absl::UnixEpoch();
  auto plans = check.Start({{"a", "10.0.0.1", 7001, true},
                            {"b", "10.0.0.2", 7002, false},
                            {"c", "10.0.0.3", 7003, false},
                            {"x", "10.0.0.9", 0, true}},  // no measurer: neither side
                           4, 99, 1 << 20, absl::Milliseconds(100), t0 + absl::Seconds(5));
  ASSERT_EQ(plans.size(), 1u);
  const v1::NetworkPlan& p = plans.at("a");
  EXPECT_EQ(p.round(), 4u);
  EXPECT_EQ(p.nonce(), 99u);
  EXPECT_EQ(p.max_bytes_per_link(), 1u << 20);
  EXPECT_EQ(p.max_millis_per_link(), 100);
  ASSERT_EQ(p.targets_size(), 2);
  for (const v1::LinkTarget& t : p.targets()) EXPECT_NE(t.node_id(), "x");
  EXPECT_TRUE(check.active());
  EXPECT_TRUE(check.Awaits("a"));
  EXPECT_FALSE(check.Awaits("b"));
  EXPECT_FALSE(check.Complete(t0));
  EXPECT_TRUE(check.Complete(t0 + absl::Seconds(5)));  // the deadline
}

TEST(NetworkCheck, NothingToMeasureStartsNothing) {
  NetworkCheck check;
  EXPECT_THAT(
      check.Start({{"a", "h", 1, true}}, 1, 1, 0, absl::Milliseconds(1), absl::InfiniteFuture()),
      IsEmpty());
  EXPECT_FALSE(check.active());
  EXPECT_THAT(check.Start({{"a", "h", 1, false}, {"b", "h", 2, false}}, 1, 1, 0,
                          absl::Milliseconds(1), absl::InfiniteFuture()),
              IsEmpty());
  EXPECT_FALSE(check.active());
}

// Only an awaited measurer's links to its own targets count, at most
// kMaxLinksPerMeasurer: a member cannot report links for another.
TEST(NetworkCheck, LinksAreKeptOnlyFromAwaitedMeasurersToTheirTargets) {
  NetworkCheck check;
  auto plans = check.Start({{"a", "h", 1, true}, {"b", "h", 2, true}, {"c", "h", 3, true}}, 1, 7, 0,
                           absl::Milliseconds(250), absl::InfiniteFuture());
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_FALSE(check.Add("zz", Links({Link("zz", "a", 1)})));
  // a claims slow links for b and c as if b had measured them: ignored.
  std::vector<v1::LinkResult> a_links;
  for (const v1::LinkTarget& t : plans.at("a").targets()) {
    a_links.push_back(Link("a", t.node_id(), 1e9));
  }
  a_links.push_back(Link("b", "c", 1));
  a_links.push_back(Link("b", "a", 1));
  EXPECT_TRUE(check.Add("a", Links(a_links)));
  EXPECT_FALSE(check.Add("a", Links(a_links))) << "once";
  for (const char* n : {"b", "c"}) {
    std::vector<v1::LinkResult> l;
    for (const v1::LinkTarget& t : plans.at(n).targets()) l.push_back(Link(n, t.node_id(), 1e9));
    EXPECT_TRUE(check.Add(n, Links(l)));
  }
  EXPECT_TRUE(check.Complete(absl::UnixEpoch()));
  const preflight::NetworkVerdict v = check.Finish({});
  EXPECT_THAT(v.flagged, IsEmpty());
  EXPECT_EQ(v.links, 6);
  EXPECT_FALSE(check.active());
}

TEST(NetworkCheck, AWithdrawnMeasurerIsNotWaitedFor) {
  NetworkCheck check;
  auto plans = check.Start({{"a", "h", 1, true}, {"b", "h", 2, true}}, 1, 7, 0,
                           absl::Milliseconds(250), absl::InfiniteFuture());
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_TRUE(check.Add("a", Links({Link("a", "b", 1e9)})));
  EXPECT_FALSE(check.Complete(absl::UnixEpoch()));
  check.Withdraw("b");
  EXPECT_TRUE(check.Complete(absl::UnixEpoch()));
  EXPECT_THAT(check.Finish({}).flagged, IsEmpty());
}

TEST(NetworkCheck, ALateMeasurerJoinsTheMeasurementUnderWay) {
  NetworkCheck check;
  const absl::Time t0 = absl::UnixEpoch();
  const std::vector<NetworkCheck::Candidate> all = {
      {"a", "10.0.0.1", 7001, true}, {"b", "10.0.0.2", 7002, true}, {"c", "10.0.0.3", 7003, true}};
  EXPECT_FALSE(check.Extend({"d", "10.0.0.4", 7004, true}, all, t0).has_value())
      << "nothing under way";
  ASSERT_EQ(check.Start(all, 2, 7, 1 << 20, absl::Milliseconds(100), t0 + absl::Seconds(5)).size(),
            3u);
  auto plan = check.Extend({"d", "10.0.0.4", 7004, true}, all, t0 + absl::Seconds(9));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->round(), 2u);
  EXPECT_EQ(plan->nonce(), 7u);
  EXPECT_EQ(plan->max_bytes_per_link(), 1u << 20);
  ASSERT_EQ(plan->targets_size(), 2);
  for (const v1::LinkTarget& t : plan->targets()) EXPECT_NE(t.node_id(), "d");
  EXPECT_TRUE(check.Awaits("d"));
  EXPECT_EQ(check.measurers(), 4);
  EXPECT_EQ(check.deadline(), t0 + absl::Seconds(9));
  EXPECT_FALSE(check.Extend({"d", "10.0.0.4", 7004, true}, all, t0).has_value()) << "planned once";
  EXPECT_FALSE(check.Extend({"e", "10.0.0.5", 0, true}, all, t0).has_value()) << "no measurer";
  // Its links count like the others'.
  EXPECT_TRUE(check.Add("d", Links({Link("d", plan->targets(0).node_id(), 1e9)})));
}

TEST(NetworkCheckBudget, CoversEveryLinksLimitsAndTheCalls) {
  // Per link: connect 1 s, pings 0.5 s, 3 samples each reconnecting (1 s),
  // the transfer; then 1 s for the calls.
  EXPECT_EQ(NetworkCheckBudget(2, absl::Milliseconds(250)), absl::Milliseconds(10500));
  EXPECT_EQ(NetworkCheckBudget(0, absl::Milliseconds(250)), absl::Milliseconds(5750));
}

}  // namespace
}  // namespace trainlet::rendezvous

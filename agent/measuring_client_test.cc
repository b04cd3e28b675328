#include "agent/measuring_client.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "rendezvous/testing/fake_rendezvous_client.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kLinkKey = 0x5eed;

v1::JoinRequest Request() {
  v1::JoinRequest r;
  r.set_job_id("job");
  r.mutable_member()->set_node_id("a");
  r.mutable_member()->set_incarnation(7);
  return r;
}

v1::Assignment MeasureFirst(int port) {
  v1::Assignment a;
  a.set_link_key(kLinkKey);
  a.set_join_received_unix_micros(absl::ToUnixMicros(absl::Now()));
  a.set_answered_unix_micros(absl::ToUnixMicros(absl::Now()));
  v1::NetworkPlan* plan = a.mutable_measure_first();
  plan->set_round(1);
  plan->set_nonce(kLinkKey);
  plan->set_max_bytes_per_link(1 << 20);
  plan->set_max_millis_per_link(100);
  v1::LinkTarget* t = plan->add_targets();
  t->set_node_id("b");
  t->set_host("127.0.0.1");
  t->set_port(port);
  return a;
}

v1::Assignment Real() {
  v1::Assignment a;
  a.set_round(1);
  a.set_nnodes(2);
  a.set_link_key(kLinkKey);
  a.set_join_received_unix_micros(absl::ToUnixMicros(absl::Now()));
  a.set_answered_unix_micros(absl::ToUnixMicros(absl::Now()));
  return a;
}

struct Answer {
  absl::Notification done;
  std::optional<absl::StatusOr<v1::Assignment>> result;
};

std::unique_ptr<preflight::LinkServer> PeerB() {
  preflight::LinkServerOptions o;
  o.job_id = "job";
  o.node_id = "b";
  o.host = "127.0.0.1";
  auto s = preflight::LinkServer::Start(o);
  if (!s.ok()) return nullptr;
  (*s)->SetRound(1, kLinkKey);
  return *std::move(s);
}

MeasuringClient::Options Opts() {
  MeasuringClient::Options o;
  o.job_id = "job";
  o.node_id = "a";
  o.host = "127.0.0.1";
  o.measure.connect_timeout = absl::Milliseconds(300);
  return o;
}

TEST(MeasuringClient, MeasuresWhenAskedAndJoinsAgainWithTheLinks) {
  std::unique_ptr<preflight::LinkServer> b = PeerB();
  ASSERT_NE(b, nullptr);
  rendezvous::testing::FakeRendezvousClient inner;
  int joins = 0;
  inner.on_join = [&](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    return ++joins == 1 ? MeasureFirst(b->port()) : Real();
  };
  std::atomic<int> clocks{0}, refreshed{0};
  MeasuringClient::Hooks hooks;
  hooks.due = [] { return true; };
  hooks.clock = [&](const preflight::ClockSample& s) {
    EXPECT_LE(s.agent_sent, s.agent_received);
    ++clocks;
  };
  hooks.refresh = [&](v1::PreflightReport*) { ++refreshed; };
  auto client = MeasuringClient::Start(&inner, Opts(), hooks, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  Answer answer;
  (*client)->Join(Request(), absl::Seconds(10), [&](absl::StatusOr<v1::Assignment> r) {
    answer.result = std::move(r);
    answer.done.Notify();
  });
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(answer.result->ok()) << answer.result->status();
  EXPECT_EQ(answer.result->value().nnodes(), 2);
  const std::vector<v1::JoinRequest> sent = inner.joins();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].link_port(), (*client)->port());
  EXPECT_TRUE(sent[0].network_due());
  EXPECT_EQ(sent[0].preflight().links_size(), 0);
  ASSERT_EQ(sent[1].preflight().links_size(), 1);
  const v1::LinkResult& l = sent[1].preflight().links(0);
  EXPECT_EQ(l.from_node(), "a");
  EXPECT_EQ(l.to_node(), "b");
  EXPECT_EQ(l.error(), "");
  EXPECT_GT(l.bandwidth_bytes_per_second(), 0);
  EXPECT_EQ(sent[1].preflight().node_id(), "a");
  EXPECT_TRUE(preflight::ValidateReport(sent[1].preflight()).ok());
  EXPECT_EQ(clocks.load(), 2);
  EXPECT_EQ(refreshed.load(), 1);
  // Its own measurer accepts the job's key now: a peer can measure to it.
  v1::LinkTarget to_a;
  to_a.set_node_id("a");
  to_a.set_host("127.0.0.1");
  to_a.set_port((*client)->port());
  preflight::MeasureOptions small;
  small.max_bytes = 1 << 20;
  small.max_time = absl::Milliseconds(100);
  EXPECT_EQ(preflight::MeasureLink({"job", "b", 1, kLinkKey}, to_a, small, nullptr).error(), "");
}

TEST(MeasuringClient, ACancelWhileMeasuringEndsTheJoinOnceWithCancelled) {
  rendezvous::testing::FakeRendezvousClient inner;
  // The target never answers within the connect timeout: the measurement
  // takes a while, and the cancel lands in it.
  inner.on_join = [&](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    v1::Assignment a = MeasureFirst(1);  // port 1: refused, retried until the timeout
    return a;
  };
  auto client = MeasuringClient::Start(&inner, Opts(), {}, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  std::atomic<int> calls{0};
  Answer answer;
  (*client)->Join(Request(), absl::Seconds(10), [&](absl::StatusOr<v1::Assignment> r) {
    ++calls;
    answer.result = std::move(r);
    answer.done.Notify();
  });
  (*client)->CancelJoin();
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsCancelled(answer.result->status())) << answer.result->status();
  absl::SleepFor(absl::Milliseconds(400));  // past the measurement's bound
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(inner.joins().size(), 1u);
}

TEST(MeasuringClient, ACoordinatorThatAsksAgainAndAgainIsRefusedAfterThreeMeasures) {
  rendezvous::testing::FakeRendezvousClient inner;
  inner.on_join = [&](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    v1::Assignment a = MeasureFirst(1);
    a.mutable_measure_first()->clear_targets();  // an empty plan: nothing to measure
    return a;
  };
  auto client = MeasuringClient::Start(&inner, Opts(), {}, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  Answer answer;
  (*client)->Join(Request(), absl::Seconds(10), [&](absl::StatusOr<v1::Assignment> r) {
    answer.result = std::move(r);
    answer.done.Notify();
  });
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(answer.result->ok());
  EXPECT_THAT(answer.result->status().message(), HasSubstr("4 times for one join"));
  EXPECT_EQ(inner.joins().size(), 4u);
}

TEST(MeasuringClient, WithoutTheHookTheLinksAreNotDueAndAnErrorPassesThrough) {
  rendezvous::testing::FakeRendezvousClient inner;
  inner.on_join = [&](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    return absl::UnavailableError("no coordinator");
  };
  auto client = MeasuringClient::Start(&inner, Opts(), {}, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  Answer answer;
  (*client)->Join(Request(), absl::Seconds(1), [&](absl::StatusOr<v1::Assignment> r) {
    answer.result = std::move(r);
    answer.done.Notify();
  });
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsUnavailable(answer.result->status()));
  ASSERT_EQ(inner.joins().size(), 1u);
  EXPECT_FALSE(inner.joins()[0].network_due());
  EXPECT_GT(inner.joins()[0].link_port(), 0);
}

}  // namespace
}  // namespace trainlet::agent

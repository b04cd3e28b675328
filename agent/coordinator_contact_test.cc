// CoordinatorContact on its own: the Report cadence, the stream's re-opens
// and release, the acks and the silence limit, on a simulated clock.
#include "agent/coordinator_contact.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/testing/fake_rendezvous_client.h"

namespace trainlet::agent {
namespace {

using rendezvous::LivenessKind;
using rendezvous::testing::MakeAssignment;
using rendezvous::testing::MakeDirective;
using ::testing::HasSubstr;

constexpr absl::Duration kInterval = absl::Milliseconds(500);  // timeout 5 s.
constexpr absl::Duration kTimeout = absl::Seconds(5);
constexpr char kKey[] = "0123456789abcdef";
constexpr uint32_t kSlot = 3;
constexpr uint64_t kIncarnation = 0x1234;

class CoordinatorContactTest : public ::testing::Test {
 protected:
  CoordinatorContactTest() : contact_(Options(), &clock_), start_(clock_.Now()) {}

  static ContactOptions Options() {
    ContactOptions o;
    o.me.set_node_id("n1");
    o.me.set_incarnation(kIncarnation);
    o.job_id = "job";
    return o;
  }
  static v1::Assignment Plain() {
    v1::Assignment a = MakeAssignment(1, 1, 2, 2, kInterval);
    a.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(kTimeout));
    return a;
  }
  static v1::Assignment Udp() {
    v1::Assignment a = Plain();
    a.set_liveness_udp_port(29400);
    a.set_liveness_slot(kSlot);
    a.set_liveness_key(kKey);
    return a;
  }

  // One Tick now; its actions in *out (appended), whether it found the
  // coordinator lost.
  std::optional<std::string> Tick(std::vector<RoundAction>* out) {
    return contact_.Tick(
        clock_.Now(), /*running=*/true,
        [] {
          v1::ReportRequest r;
          r.set_state(v1::ReportRequest::RUNNING);
          return r;
        },
        out);
  }
  // Runs to `until` (from the start), ticking at each deadline and, when
  // `ack`, answering each liveness datagram with its ack. Returns when each
  // Report went (from the start); OpenWatch requests go to *opened, the
  // kinds of the liveness datagrams sent to *kinds.
  std::vector<absl::Duration> RunTo(absl::Duration until, bool ack,
                                    std::vector<v1::WatchRequest>* opened = nullptr,
                                    std::vector<LivenessKind>* kinds = nullptr) {
    std::vector<absl::Duration> reports;
    while (true) {
      const absl::Time next = contact_.NextDeadline(/*running=*/true);
      if (next > start_ + until) break;
      if (next > clock_.Now()) clock_.Advance(next - clock_.Now());
      std::vector<RoundAction> out;
      EXPECT_EQ(Tick(&out), std::nullopt) << "lost at " << clock_.Now() - start_;
      for (const RoundAction& a : out) {
        if (std::holds_alternative<SendReport>(a)) reports.push_back(clock_.Now() - start_);
        if (const auto* w = std::get_if<OpenWatch>(&a); w != nullptr && opened != nullptr) {
          opened->push_back(w->request);
        }
        if (const auto* d = std::get_if<SendLiveness>(&a); d != nullptr) {
          if (kinds != nullptr) kinds->push_back(KindOf(d->datagram));
          if (ack) contact_.OnAck(AckOf(d->datagram));
        }
      }
    }
    clock_.Advance(start_ + until - clock_.Now());
    return reports;
  }
  // The coordinator's ack of `sent`, under `key`.
  static rendezvous::LivenessDatagram AckOf(const rendezvous::LivenessBytes& sent,
                                            const std::string& key = kKey) {
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseAgentDatagram(sent.data(), sent.size());
    EXPECT_TRUE(d.has_value());
    rendezvous::LivenessBytes ack = rendezvous::EncodeLivenessDatagram(
        d->slot, d->incarnation, d->round, d->seq, *rendezvous::LivenessKeyFromBytes(key),
        LivenessKind::kAck);
    return *rendezvous::ParseCoordinatorDatagram(ack.data(), ack.size());
  }
  static LivenessKind KindOf(const rendezvous::LivenessBytes& sent) {
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseAgentDatagram(sent.data(), sent.size());
    EXPECT_TRUE(d.has_value());
    return d.has_value() ? d->kind : LivenessKind::kAck;
  }
  static ReportAnswered Heard(bool heard) {
    ReportAnswered r;
    r.round = 1;
    r.udp_heard = heard;
    return r;
  }

  SimulatedClock clock_;
  CoordinatorContact contact_;
  const absl::Time start_;
};

TEST_F(CoordinatorContactTest, BeginRound_OpensTheStreamAndReportsEveryInterval) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Plain(), /*stream_open=*/false, &out);
  ASSERT_EQ(out.size(), 1u);
  const auto& open = std::get<OpenWatch>(out[0]);
  EXPECT_EQ(open.watch_id, 1u);
  EXPECT_EQ(open.request.round(), 1u);
  EXPECT_EQ(open.request.member().node_id(), "n1");
  EXPECT_TRUE(contact_.watch_open());
  EXPECT_FALSE(contact_.has_udp());  // not offered
  EXPECT_THAT(RunTo(absl::Milliseconds(1600), /*ack=*/false),
              ::testing::ElementsAre(kInterval, 2 * kInterval, 3 * kInterval));
}

TEST_F(CoordinatorContactTest, Reports_RepeatTheTerminalReport) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Plain(), false, &out);
  v1::ReportRequest failed;
  failed.set_state(v1::ReportRequest::FAILED);
  failed.set_exit_code(3);
  contact_.Repeat(failed);
  clock_.Advance(kInterval);
  out.clear();
  Tick(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<SendReport>(out[0]).request.exit_code(), 3);
  contact_.ForgetRepeated();
  clock_.Advance(kInterval);
  out.clear();
  Tick(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<SendReport>(out[0]).request.state(), v1::ReportRequest::RUNNING);
}

TEST_F(CoordinatorContactTest, SilentCoordinator_IsLostAfterTheSilenceLimit) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Plain(), false, &out);
  // 1.05 timeouts (the Report interval is the heartbeat interval: no extra).
  EXPECT_EQ(contact_.SilenceLimit(), absl::Milliseconds(5250));
  clock_.Advance(absl::Seconds(3));
  contact_.NoteContact();  // an answer: the limit counts from here.
  clock_.Advance(absl::Milliseconds(5249));
  EXPECT_EQ(Tick(&out), std::nullopt);
  clock_.Advance(absl::Milliseconds(1));
  std::optional<std::string> lost = Tick(&out);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(*lost, "no answer for 5.25s");
}

TEST_F(CoordinatorContactTest, UdpHeard_ReportsAtTheHeardInterval_AndBackWhenNot) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  ASSERT_TRUE(contact_.has_udp());
  // The first datagram at once, the first Report an interval later.
  EXPECT_EQ(contact_.NextDeadline(true), start_);
  contact_.OnReportOk(Heard(true));
  EXPECT_EQ(contact_.ReportInterval(), kTimeout - kInterval);  // no report_interval_ms given
  EXPECT_EQ(contact_.SilenceLimit(), absl::Milliseconds(5250) + absl::Seconds(4));
  // (Unanswered, the Reports leave the coordinator lost at 9.25 s.)
  EXPECT_THAT(RunTo(absl::Milliseconds(9200), false),
              ::testing::ElementsAre(absl::Milliseconds(4500), absl::Seconds(9)));
  // Not heard any more (two intervals into the round: settled): every
  // interval again, the next within one.
  contact_.OnReportOk(Heard(false));
  EXPECT_EQ(contact_.ReportInterval(), kInterval);
  EXPECT_LE(contact_.NextDeadline(true), clock_.Now() + kInterval);
}

TEST_F(CoordinatorContactTest, HeardInterval_IsTheAssignmentsClamped) {
  v1::Assignment a = Udp();
  a.set_report_interval_ms(absl::ToInt64Milliseconds(absl::Hours(1)));
  std::vector<RoundAction> out;
  contact_.BeginRound(a, false, &out);
  contact_.OnReportOk(Heard(true));
  EXPECT_EQ(contact_.ReportInterval(), kMaxHeardReportInterval);
}

TEST_F(CoordinatorContactTest, FirstReportDelay_SpreadsTheFirstReport_AtMostHalfTheTimeout) {
  v1::Assignment a = Udp();
  a.set_first_report_delay_ms(1200);
  std::vector<RoundAction> out;
  contact_.BeginRound(a, false, &out);
  std::vector<absl::Duration> reports = RunTo(absl::Seconds(2), false);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports[0], absl::Milliseconds(1200));

  a.set_round(2);
  a.set_first_report_delay_ms(60000);
  contact_.BeginRound(a, false, &out);
  auto reports_at = [&](absl::Duration after) {
    clock_.Advance(after);
    std::vector<RoundAction> tick;
    Tick(&tick);
    return std::count_if(tick.begin(), tick.end(), [](const RoundAction& x) {
      return std::holds_alternative<SendReport>(x);
    });
  };
  EXPECT_EQ(reports_at(kTimeout / 2 - absl::Milliseconds(1)), 0);
  EXPECT_EQ(reports_at(absl::Milliseconds(1)), 1) << "at most half the timeout";
}

TEST_F(CoordinatorContactTest, Acks_QuietenTheReports_UntilTheyStop) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  // Acked from the first datagram on: no Report for kAckedReportInterval.
  EXPECT_TRUE(RunTo(absl::Seconds(30), /*ack=*/true).empty());
  EXPECT_TRUE(contact_.acks_flowing());
  EXPECT_EQ(contact_.ReportInterval(), kAckedReportInterval);
  // The acks stop: 0.6 timeouts after the last one, a Report at once and
  // every interval after.
  // (The last datagram, at 30 s, was acked.)
  std::vector<absl::Duration> reports = RunTo(absl::Seconds(34), /*ack=*/false);
  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports[0], absl::Seconds(30) + kTimeout * kAckSilenceFraction);
  EXPECT_EQ(reports[1] - reports[0], kInterval);
  EXPECT_FALSE(contact_.acks_flowing());
}

TEST_F(CoordinatorContactTest, Acks_DoNotQuietenATerminalReportOrAFailingOne) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  RunTo(absl::Seconds(1), true);
  ASSERT_EQ(contact_.ReportInterval(), kAckedReportInterval);
  v1::ReportRequest succeeded;
  succeeded.set_state(v1::ReportRequest::SUCCEEDED);
  contact_.Repeat(succeeded);
  EXPECT_EQ(contact_.ReportInterval(), kInterval);
  contact_.ForgetRepeated();
  contact_.OnReportFailed("Deadline Exceeded");
  EXPECT_EQ(contact_.ReportInterval(), kInterval);
  EXPECT_LE(contact_.NextDeadline(true), clock_.Now() + kInterval);
  contact_.OnReportOk(Heard(true));  // they get through again
  EXPECT_EQ(contact_.ReportInterval(), kAckedReportInterval);
}

TEST_F(CoordinatorContactTest, Acks_NotThisNodesOrNotOfARecentDatagram_AreIgnored) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  Tick(&out);
  const auto& sent = std::get<SendLiveness>(out.back()).datagram;
  EXPECT_FALSE(contact_.TakeOwnAck(AckOf(sent, "fedcba9876543210"), 1));  // another key
  EXPECT_FALSE(contact_.TakeOwnAck(AckOf(sent), 2));                      // another round
  rendezvous::LivenessDatagram ahead = AckOf(sent);
  ahead.seq += 1;  // a datagram not sent yet (the MAC is checked after)
  EXPECT_FALSE(contact_.TakeOwnAck(ahead, 1));
  EXPECT_TRUE(contact_.TakeOwnAck(AckOf(sent), 1));
  EXPECT_FALSE(contact_.TakeOwnAck(AckOf(sent), 1)) << "the same ack again";
}

TEST_F(CoordinatorContactTest, Datagrams_SeqStrictlyIncreases_AcrossRounds) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  SendLiveness first = contact_.Datagram(1);
  SendLiveness ready = contact_.Datagram(2, LivenessKind::kReady);
  v1::Assignment next = Udp();
  next.set_round(2);
  contact_.BeginRound(next, /*stream_open=*/true, &out);
  SendLiveness later = contact_.Datagram(2);
  uint64_t seq = 0;
  for (const SendLiveness* s : {&first, &ready, &later}) {
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseAgentDatagram(s->datagram.data(), s->datagram.size());
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->slot, kSlot);
    EXPECT_EQ(d->incarnation, kIncarnation);
    EXPECT_GT(d->seq, seq);
    seq = d->seq;
  }
}

// Stream loss (docs/protocol.md): where the coordinator probes a member
// whose stream closed, the member's alive datagrams say whether the
// coordinator's acks reach it (only then does a probe decide, not the grace).
TEST_F(CoordinatorContactTest, StreamLossProbes_AliveAckedWhileAcksCome_SaidAtTheFirstAck) {
  v1::Assignment a = Udp();
  a.set_stream_loss_probes(true);
  std::vector<RoundAction> out;
  contact_.BeginRound(a, false, &out);
  out.clear();
  Tick(&out);
  ASSERT_EQ(out.size(), 1u);
  const rendezvous::LivenessBytes first = std::get<SendLiveness>(out[0]).datagram;
  EXPECT_EQ(KindOf(first), LivenessKind::kAlive) << "no ack yet";
  EXPECT_FALSE(contact_.AcksReachThisNode());
  // The first ack: said at once, not an interval later.
  contact_.OnAck(AckOf(first));
  EXPECT_TRUE(contact_.AcksReachThisNode());
  EXPECT_EQ(contact_.NextDeadline(true), clock_.Now());
  out.clear();
  Tick(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(KindOf(std::get<SendLiveness>(out[0]).datagram), LivenessKind::kAliveAcked);
  // While acks come, every alive datagram says so.
  std::vector<LivenessKind> kinds;
  RunTo(absl::Seconds(3), /*ack=*/true, nullptr, &kinds);
  ASSERT_GE(kinds.size(), 5u);
  for (LivenessKind k : kinds) EXPECT_EQ(k, LivenessKind::kAliveAcked);
  // They stop: once none came for the ack silence, plain ALIVE again.
  kinds.clear();
  RunTo(absl::Seconds(3) + kTimeout * kAckSilenceFraction + kInterval, /*ack=*/false, nullptr,
        &kinds);
  ASSERT_GE(kinds.size(), 2u);
  EXPECT_EQ(kinds.front(), LivenessKind::kAliveAcked);
  EXPECT_EQ(kinds.back(), LivenessKind::kAlive);
  EXPECT_FALSE(contact_.AcksReachThisNode());
}

TEST_F(CoordinatorContactTest, StreamLossProbes_ANewRoundSaysItAtOnce_AReadysAckCounts) {
  v1::Assignment a = Udp();
  a.set_stream_loss_probes(true);
  std::vector<RoundAction> out;
  contact_.BeginRound(a, false, &out);
  // A restart: the READY of round 2 is acked (the coordinator holds the
  // re-join), then round 2 begins; its first datagram already says it.
  const SendLiveness ready = contact_.Datagram(2, LivenessKind::kReady);
  EXPECT_EQ(KindOf(ready.datagram), LivenessKind::kReady) << "a READY stays a READY";
  ASSERT_TRUE(contact_.TakeOwnAck(AckOf(ready.datagram), 2));
  v1::Assignment next = a;
  next.set_round(2);
  contact_.BeginRound(next, /*stream_open=*/true, &out);
  out.clear();
  Tick(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(KindOf(std::get<SendLiveness>(out[0]).datagram), LivenessKind::kAliveAcked);
}

TEST_F(CoordinatorContactTest, WithoutStreamLossProbes_PlainAliveEvenWhenAcked) {
  // An older coordinator would take kind 8 for a malformed datagram.
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  std::vector<LivenessKind> kinds;
  RunTo(absl::Seconds(3), /*ack=*/true, nullptr, &kinds);
  ASSERT_GE(kinds.size(), 5u);
  for (LivenessKind k : kinds) EXPECT_EQ(k, LivenessKind::kAlive);
  EXPECT_FALSE(contact_.AcksReachThisNode());
}

TEST_F(CoordinatorContactTest, BrokenStream_IsReopenedWithBackoff) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Plain(), false, &out);
  StreamEnded older{0, absl::UnavailableError("Socket closed")};
  EXPECT_FALSE(contact_.OnStreamEnded(older)) << "not the current stream";
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 8; ++i) {
    StreamEnded broke{contact_.watch_id(), absl::UnavailableError("Socket closed")};
    ASSERT_TRUE(contact_.OnStreamEnded(broke));
    EXPECT_FALSE(contact_.watch_open());
    contact_.ReopenLater(broke.status);
    const absl::Time broke_at = clock_.Now();
    contact_.NoteContact();  // heartbeats still answered
    out.clear();
    while (!contact_.watch_open()) {
      clock_.Advance(contact_.NextDeadline(true) - clock_.Now());
      Tick(&out);
    }
    waits.push_back(clock_.Now() - broke_at);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(std::get<OpenWatch>(out.back()).watch_id, static_cast<uint64_t>(i + 2));
  }
  EXPECT_THAT(waits, ::testing::ElementsAre(absl::Milliseconds(20), absl::Milliseconds(40),
                                            absl::Milliseconds(80), absl::Milliseconds(160),
                                            absl::Milliseconds(320), absl::Milliseconds(640),
                                            absl::Seconds(1), absl::Seconds(1)));
  // A new round starts from the shortest again.
  v1::Assignment next = Plain();
  next.set_round(2);
  contact_.BeginRound(next, false, &out);
  StreamEnded broke{contact_.watch_id(), absl::UnavailableError("Socket closed")};
  ASSERT_TRUE(contact_.OnStreamEnded(broke));
  contact_.ReopenLater(broke.status);
  EXPECT_EQ(contact_.NextDeadline(true), clock_.Now() + absl::Milliseconds(20));
}

TEST_F(CoordinatorContactTest, Release_TakenWhileAcked_ThenUnreleasedWhenTheAcksStop) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  EXPECT_TRUE(std::get<OpenWatch>(out[0]).request.accepts_release());
  RunTo(absl::Seconds(2), true);
  contact_.OnRelease();
  EXPECT_TRUE(contact_.stream_released());
  EXPECT_EQ(contact_.ReportInterval(), absl::InfiniteDuration());
  // The coordinator ends the released stream: nothing to judge or re-open.
  EXPECT_FALSE(contact_.OnStreamEnded(StreamEnded{contact_.watch_id(), absl::OkStatus()}));
  EXPECT_TRUE(contact_.has_stream());
  std::vector<v1::WatchRequest> opened;
  EXPECT_TRUE(RunTo(absl::Seconds(60), true, &opened).empty()) << "no Report while released";
  EXPECT_TRUE(opened.empty());
  // The acks stop (the last at 60 s): the stream again at 63 s, refusing
  // releases.
  RunTo(absl::Seconds(64), false, &opened);
  EXPECT_FALSE(contact_.stream_released());
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_FALSE(opened[0].accepts_release());
}

TEST_F(CoordinatorContactTest, Release_RefusedWithoutAcks_RetriedOnceAcksFlowLongEnough) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  contact_.OnRelease();  // no ack yet: refused.
  EXPECT_FALSE(contact_.stream_released());
  // The coordinator ends the stream it released; it is re-opened refusing.
  ASSERT_TRUE(contact_.OnStreamEnded(StreamEnded{contact_.watch_id(), absl::OkStatus()}));
  contact_.ReopenLater(absl::OkStatus());
  std::vector<v1::WatchRequest> opened;
  RunTo(absl::Seconds(1), true, &opened);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_FALSE(opened[0].accepts_release());
  // Acks for kReleaseRetryAfter since the refusal: a stream accepting one.
  RunTo(kReleaseRetryAfter - absl::Milliseconds(1), true, &opened);
  EXPECT_EQ(opened.size(), 1u);
  RunTo(kReleaseRetryAfter + absl::Seconds(1), true, &opened);
  ASSERT_EQ(opened.size(), 2u);
  EXPECT_TRUE(opened[1].accepts_release());
}

TEST_F(CoordinatorContactTest, DirectiveDatagram_TakenOnlyWhenThisNodesAndItsCoordinators) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  v1::Directive d = MakeDirective(1);
  d.mutable_rejoin()->set_next_round(2);
  auto datagram = [&](uint64_t incarnation, const v1::Directive& directive) {
    return DirectiveDatagramReceived{*rendezvous::EncodeDirectiveDatagram(
        kSlot, incarnation, directive.round(), directive.SerializeAsString(),
        *rendezvous::LivenessKeyFromBytes(kKey))};
  };
  const uint64_t coordinator = d.coordinator_incarnation();
  std::optional<v1::Directive> taken =
      contact_.ParseDirectiveDatagram(datagram(kIncarnation, d), coordinator);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->rejoin().next_round(), 2u);
  EXPECT_FALSE(contact_.ParseDirectiveDatagram(datagram(kIncarnation + 1, d), coordinator))
      << "another incarnation's";
  EXPECT_FALSE(contact_.ParseDirectiveDatagram(datagram(kIncarnation, d), coordinator + 1))
      << "another coordinator's";
  EXPECT_EQ(contact_.liveness_key_bytes(), kKey);
}

TEST_F(CoordinatorContactTest, EndRound_SchedulesNothingMore) {
  std::vector<RoundAction> out;
  contact_.BeginRound(Udp(), false, &out);
  contact_.EndRound();
  // Only the silence limit is left (the round decides whether it counts).
  EXPECT_EQ(contact_.NextDeadline(true), start_ + contact_.SilenceLimit());
  contact_.CloseWatch(&out);
  EXPECT_TRUE(std::holds_alternative<CloseWatch>(out.back()));
  EXPECT_FALSE(contact_.watch_open());
  out.clear();
  contact_.CloseWatch(&out);
  EXPECT_TRUE(out.empty()) << "closed already";
}

}  // namespace
}  // namespace trainlet::agent

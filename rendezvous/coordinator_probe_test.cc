// Stream loss (coordinator.h, "Stream loss"): a member whose stream closes
// while it runs, and whose UDP is heard, is asked over UDP: kept when it
// answers, lost at once when its port refuses the probe, lost when the
// window ends unanswered (50 ms where it said its acks arrive, the 150 ms
// grace where that is not known yet); one whose acks do not arrive gets the
// grace without a probe. The core alone, on a simulated clock, with a
// recording DatagramSender standing in for the liveness thread (the test
// calls CheckProbes and NoteProbesRefused as that thread would).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/testing/recording_datagram_sender.h"

namespace trainlet::rendezvous {
namespace stream_probe_test {
namespace {

using ::testing::HasSubstr;

class NullSink : public DirectiveSink {
 public:
  void Send(const v1::Directive&, bool) override {}
  void Close(const absl::Status&) override {}
};

// A static pair (a: rank 0, b: rank 1) with UDP liveness and one restart,
// running round 1, both watching. Member i's datagrams come from
// 127.0.0.1:(41000 + i) on the receiver's socket 0.
class StreamProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = o.max_nodes = 2;
    o.max_restarts = 1;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Seconds(60);
    o.incarnation = 0xC0;
    o.clock = &clock_;
    core_ = std::make_unique<Coordinator>(o);
    core_->EnableUdpLiveness(29400, &sender_);
    for (int i = 0; i < 2; ++i) {
      reqs_[i].mutable_member()->set_node_id(i == 0 ? "a" : "b");
      reqs_[i].mutable_member()->set_incarnation(100 + i);
      reqs_[i].set_job_id("job");
      reqs_[i].set_protocol_version(kProtocolVersion);
      reqs_[i].set_rank_hint(i);
      reqs_[i].set_local_world_size(1);
      reqs_[i].set_master_port(29500);
      reqs_[i].set_udp_liveness(true);
      core_->Join(reqs_[i], "10.0.0.1", absl::InfiniteFuture(),
                  [this, i](absl::StatusOr<v1::Assignment> a) {
                    ASSERT_TRUE(a.ok()) << a.status();
                    as_[i] = *a;
                  });
    }
    ASSERT_EQ(as_[1].round(), 1u);
    for (int i = 0; i < 2; ++i) watch_[i] = Watch(i);
  }

  uint64_t Watch(int i) {
    v1::WatchRequest w;
    *w.mutable_member() = reqs_[i].member();
    w.set_job_id("job");
    w.set_round(1);
    absl::StatusOr<uint64_t> id = core_->Watch(w, std::make_shared<NullSink>());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  LivenessKey KeyOf(int i) const { return *LivenessKeyFromBytes(as_[i].liveness_key()); }
  static sockaddr_storage AddressOf(int i) {
    sockaddr_storage ss{};
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(41000 + i));
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ss;
  }
  // `bytes` as the liveness thread hands it over: parsed, from member i.
  LivenessBatchStats Deliver(const LivenessBytes& bytes, int i, bool with_origin = true) {
    std::optional<LivenessDatagram> d = ParseAgentDatagram(bytes.data(), bytes.size());
    EXPECT_TRUE(d.has_value());
    const sockaddr_storage from[1] = {AddressOf(i)};
    const LivenessOrigin origin{0, from};
    std::vector<LivenessAck> acks;
    return core_->NoteLivenessBatch({*d}, &acks, nullptr, with_origin ? &origin : nullptr);
  }
  // An alive datagram of member i (ALIVE_ACKED: the coordinator's acks
  // reach it).
  LivenessBatchStats Alive(int i, LivenessKind kind = LivenessKind::kAliveAcked,
                           bool with_origin = true) {
    return Deliver(EncodeLivenessDatagram(as_[i].liveness_slot(), reqs_[i].member().incarnation(),
                                          1, ++seq_[i], KeyOf(i), kind),
                   i, with_origin);
  }
  // The probes sent so far, parsed, with where they went.
  struct Sent {
    LivenessDatagram probe;
    OutgoingDatagram out;
  };
  std::vector<Sent> Probes() const {
    std::vector<Sent> out;
    for (const OutgoingDatagram& d : sender_.sent()) {
      std::optional<LivenessDatagram> p =
          ParseProbe(reinterpret_cast<const uint8_t*>(d.bytes.data()), d.bytes.size());
      if (p.has_value()) out.push_back({*p, d});
    }
    return out;
  }
  // Member i's answer to `probe`, as its LivenessSender makes it.
  LivenessBatchStats Answer(const LivenessDatagram& probe, int i) {
    return Deliver(EncodeProbeAnswer(probe, KeyOf(i)), i);
  }
  // b's stream closes after b said its acks arrive; returns the first probe.
  LivenessDatagram CloseB() {
    EXPECT_EQ(Alive(1).accepted, 1);
    const size_t before = Probes().size();
    closed_at_ = clock_.Now();
    core_->WatchClosed(watch_[1]);
    const std::vector<Sent> probes = Probes();
    EXPECT_EQ(probes.size(), before + 1);
    return probes.size() == before + 1 ? probes.back().probe : LivenessDatagram{};
  }
  // Moves the clock to `at` (from the close) in 1 ms steps, calling
  // CheckProbes as the liveness thread would, each time having drained
  // its socket first.
  void DrainUntil(absl::Duration at) {
    while (clock_.Now() < closed_at_ + at) {
      clock_.Advance(absl::Milliseconds(1));
      core_->CheckProbes(clock_.Now());
    }
  }
  Coordinator::Snapshot Snap() const { return core_->GetSnapshot(); }
  bool BLost() const {
    const Coordinator::Snapshot s = Snap();
    return s.phase == Phase::kGathering && s.lost_nodes == std::vector<std::string>{"b"};
  }

  SimulatedClock clock_;
  RecordingDatagramSender sender_;
  std::unique_ptr<Coordinator> core_;
  v1::JoinRequest reqs_[2];
  v1::Assignment as_[2];
  uint64_t watch_[2] = {0, 0};
  uint64_t seq_[2] = {0, 0};
  absl::Time closed_at_;
};

TEST_F(StreamProbeTest, Assignment_SaysTheCoordinatorProbes) {
  EXPECT_TRUE(as_[0].stream_loss_probes());
  EXPECT_TRUE(as_[1].stream_loss_probes());
}

TEST_F(StreamProbeTest, StreamCloses_AProbeGoesAtOnce_ToItsAddress_UnderItsKey_AFreshNonce) {
  const LivenessDatagram p = CloseB();
  const std::vector<Sent> sent = Probes();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].out.probe) << "flagged, so that the liveness thread keeps its time";
  EXPECT_EQ(sent[0].out.socket, 0);
  const auto* to = reinterpret_cast<const sockaddr_in*>(&sent[0].out.to);
  EXPECT_EQ(ntohs(to->sin_port), 41001);
  EXPECT_TRUE(IsOwnProbe(p, as_[1].liveness_slot(), 101, KeyOf(1)));
  EXPECT_FALSE(p.MacValid(KeyOf(0)));
  EXPECT_EQ(p.round, 1u);
  EXPECT_NE(p.seq, 0u);
  // Answered; the stream re-opened and closed again: a new nonce.
  EXPECT_EQ(Answer(p, 1).probe_answers, 1);
  watch_[1] = Watch(1);
  const LivenessDatagram again = CloseB();
  EXPECT_NE(again.seq, p.seq);
}

TEST_F(StreamProbeTest, Answered_TheMemberIsKept_ThenOnlyItsSilenceLosesIt) {
  const LivenessDatagram p = CloseB();
  DrainUntil(absl::Milliseconds(3));
  const absl::Time answered_at = clock_.Now();
  const LivenessBatchStats st = Answer(p, 1);
  EXPECT_EQ(st.accepted, 1);
  EXPECT_EQ(st.probe_answers, 1);
  EXPECT_EQ(core_->CheckProbes(clock_.Now()), absl::InfiniteFuture()) << "no probe out";
  // Past the window, and past the old grace: still running, no stream.
  DrainUntil(kStreamLossGrace * 2);
  core_->Tick();
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  EXPECT_EQ(Snap().watching, 1);
  EXPECT_EQ(Probes().size(), 1u) << "no more probes once answered";
  // The heartbeat timeout still applies: a keeps sending, b falls silent
  // (its answer was the last it was heard).
  while (Snap().phase == Phase::kRunning && clock_.Now() - answered_at < absl::Seconds(10)) {
    Alive(0);
    clock_.Advance(kMaxTickDelay);
    core_->Tick();
  }
  EXPECT_TRUE(BLost());
  EXPECT_GE(clock_.Now() - answered_at, SilenceLimit(absl::Seconds(5)));
  ASSERT_EQ(Snap().restarts.size(), 1u);
  EXPECT_THAT(Snap().restarts[0].reason, HasSubstr("no heartbeat or liveness datagram"));
}

TEST_F(StreamProbeTest, Unanswered_ProbedEveryIntervalThenLostWhenTheWindowEnds) {
  CloseB();
  DrainUntil(kStreamProbeWindow - absl::Milliseconds(1));
  EXPECT_EQ(Snap().phase, Phase::kRunning) << "not before the window ends";
  // 0, 10, 20, 30, 40 ms: every kStreamProbeEvery, the same nonce.
  const std::vector<Sent> sent = Probes();
  ASSERT_EQ(sent.size(), 5u);
  for (const Sent& s : sent) EXPECT_EQ(s.probe.seq, sent[0].probe.seq);
  DrainUntil(kStreamProbeWindow);
  EXPECT_TRUE(BLost());
  ASSERT_EQ(Snap().restarts.size(), 1u);
  EXPECT_THAT(Snap().restarts[0].reason,
              HasSubstr("node b (rank 1) lost: its agent disconnected (watch stream closed; no "
                        "answer to a probe within 50ms)"));
  EXPECT_EQ(Probes().size(), 5u) << "bounded: none after the window";
}

TEST_F(StreamProbeTest, WindowOver_ButNotDrainedSince_AnAnswerThatCameInTimeStillCounts) {
  // The liveness thread ran late: the clock is past the window, but what
  // arrived meanwhile has not been applied. Neither CheckProbes with an
  // earlier drain time nor Tick (the grace is not a probed member's) may
  // declare it lost.
  const LivenessDatagram p = CloseB();
  clock_.Advance(kStreamLossGrace * 2);
  core_->CheckProbes(closed_at_ + kStreamProbeWindow - absl::Milliseconds(1));
  core_->Tick();
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  EXPECT_EQ(Answer(p, 1).probe_answers, 1);
  core_->CheckProbes(clock_.Now());
  core_->Tick();
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  EXPECT_TRUE(Snap().lost_nodes.empty());
}

TEST_F(StreamProbeTest, Refused_LostAtOnce) {
  const LivenessDatagram p = CloseB();
  EXPECT_EQ(core_->NoteProbesRefused({p}), 1);
  EXPECT_TRUE(BLost());
  ASSERT_EQ(Snap().restarts.size(), 1u);
  EXPECT_THAT(Snap().restarts[0].reason,
              HasSubstr("node b (rank 1) lost: its agent disconnected (watch stream closed; its "
                        "liveness port refused a probe)"));
  EXPECT_EQ(clock_.Now(), closed_at_) << "no time passed";
}

TEST_F(StreamProbeTest, RefusalsNotOfAProbeOutNow_AreIgnored) {
  const LivenessDatagram p = CloseB();
  auto probe = [&](uint64_t nonce, uint64_t incarnation, const LivenessKey& key,
                   LivenessKind kind = LivenessKind::kProbe) {
    const LivenessBytes b =
        EncodeLivenessDatagram(as_[1].liveness_slot(), incarnation, 1, nonce, key, kind);
    LivenessDatagram d = *ParseLivenessDatagram(b.data(), b.size(), kind);
    return d;
  };
  LivenessDatagram unknown_slot = p;
  unknown_slot.slot = 77;
  const std::vector<LivenessDatagram> forged = {
      probe(p.seq + 1, 101, KeyOf(1)),                     // another nonce
      probe(p.seq, 101, KeyOf(0)),                         // not under b's key
      probe(p.seq, 999, KeyOf(1)),                         // another incarnation
      probe(p.seq, 101, KeyOf(1), LivenessKind::kAck),     // an ack, not a probe
      probe(p.seq, 101, KeyOf(1), LivenessKind::kRejoin),  // nor a REJOIN
      unknown_slot,
  };
  EXPECT_EQ(core_->NoteProbesRefused(forged), 0);
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  // Nor one for a member not being probed (a's stream is open).
  const LivenessBytes a_probe =
      EncodeLivenessDatagram(as_[0].liveness_slot(), 100, 1, p.seq, KeyOf(0), LivenessKind::kProbe);
  EXPECT_EQ(core_->NoteProbesRefused({*ParseProbe(a_probe.data(), a_probe.size())}), 0);
  EXPECT_EQ(Snap().phase, Phase::kRunning);
}

TEST_F(StreamProbeTest, ForgedMalformedOrOtherIncarnationAnswers_AreIgnored) {
  const LivenessDatagram p = CloseB();
  auto answer = [&](uint32_t slot, uint64_t incarnation, uint64_t nonce, const LivenessKey& key) {
    return Deliver(
        EncodeLivenessDatagram(slot, incarnation, 1, nonce, key, LivenessKind::kProbeAnswer), 1);
  };
  const uint32_t slot = as_[1].liveness_slot();
  EXPECT_EQ(answer(slot, 101, p.seq + 1, KeyOf(1)).stale_seq, 1) << "another nonce";
  EXPECT_EQ(answer(slot, 101, p.seq, KeyOf(0)).bad_mac, 1) << "not under b's key";
  EXPECT_EQ(answer(slot, 999, p.seq, KeyOf(1)).wrong_incarnation, 1);
  EXPECT_EQ(answer(as_[0].liveness_slot(), 100, p.seq, KeyOf(0)).stale_seq, 1)
      << "a's slot: no probe out for a";
  EXPECT_EQ(answer(500, 101, p.seq, KeyOf(1)).unknown_slot, 1);
  // An alive datagram sent before the agent died (held in a buffer) proves
  // nothing about now: it is no answer either.
  EXPECT_EQ(Alive(1).accepted, 1);
  // Malformed bytes never reach the core (ParseAgentDatagram): a probe
  // itself is not an agent's datagram.
  const LivenessBytes reflected =
      EncodeLivenessDatagram(slot, 101, 1, p.seq, KeyOf(1), LivenessKind::kProbe);
  EXPECT_FALSE(ParseAgentDatagram(reflected.data(), reflected.size()).has_value());
  DrainUntil(kStreamProbeWindow);
  EXPECT_TRUE(BLost());
}

TEST_F(StreamProbeTest, LateAnswerAfterTheLoss_IsIgnored) {
  const LivenessDatagram p = CloseB();
  DrainUntil(kStreamProbeWindow);
  ASSERT_TRUE(BLost());
  const LivenessBatchStats st = Answer(p, 1);
  EXPECT_EQ(st.accepted, 0);
  EXPECT_EQ(st.rejected(), 1);
  EXPECT_EQ(Snap().restart_count, 1);
  EXPECT_EQ(Snap().lost_nodes, std::vector<std::string>{"b"});
}

TEST_F(StreamProbeTest, StreamReopenedOrReportDuringTheProbe_Kept) {
  CloseB();
  DrainUntil(absl::Milliseconds(20));
  watch_[1] = Watch(1);
  DrainUntil(kStreamProbeWindow * 2);
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  const size_t probes = Probes().size();
  CloseB();
  v1::ReportRequest r;
  *r.mutable_member() = reqs_[1].member();
  r.set_job_id("job");
  r.set_round(1);
  r.set_state(v1::ReportRequest::RUNNING);
  ASSERT_TRUE(core_->Report(r).ok());
  DrainUntil(kStreamProbeWindow * 2);
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  EXPECT_EQ(Probes().size(), probes + 1) << "no probe after the Report";
}

TEST_F(StreamProbeTest, AcksNotReachingIt_NotProbed_TheGraceAsBefore) {
  // b's first datagram is acked; its next one is still plain ALIVE: the
  // acks do not get back to it (UDP one way, or an agent older than
  // probes), nor would a probe. No probe; lost at kStreamLossGrace.
  core_->Tick();  // (acks are made only while the ticker runs)
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).acks, 1);
  clock_.Advance(absl::Milliseconds(470));
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).accepted, 1);
  core_->WatchClosed(watch_[1]);
  EXPECT_TRUE(Probes().empty());
  clock_.Advance(kStreamLossGrace - absl::Milliseconds(1));
  core_->Tick();
  EXPECT_EQ(Snap().phase, Phase::kRunning);
  clock_.Advance(absl::Milliseconds(1));
  core_->Tick();
  EXPECT_TRUE(BLost());
  ASSERT_EQ(Snap().restarts.size(), 1u);
  EXPECT_THAT(Snap().restarts[0].reason,
              HasSubstr("lost: its agent disconnected (watch stream closed) (restart 1 of 1)"));
}

TEST_F(StreamProbeTest, AcksArriveAgain_ProbedAgain) {
  core_->Tick();
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).acks, 1);
  clock_.Advance(absl::Milliseconds(470));
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).accepted, 1);
  CloseB();  // ALIVE_ACKED first: the acks reach it now
  DrainUntil(kStreamProbeWindow);
  EXPECT_TRUE(BLost()) << "at the short window";
}

TEST_F(StreamProbeTest, NotKnownYet_ProbedWithinTheGrace_AnAnswerOrARefusalStillDecides) {
  // b's first datagram, not acked yet (a round's first moments): whether
  // the acks reach it is not known. Probed, with the grace for a window.
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).accepted, 1);
  closed_at_ = clock_.Now();
  core_->WatchClosed(watch_[1]);
  ASSERT_EQ(Probes().size(), 1u);
  DrainUntil(kStreamLossGrace - absl::Milliseconds(1));
  EXPECT_EQ(Snap().phase, Phase::kRunning) << "not at the short window";
  EXPECT_EQ(Probes().size(), 15u) << "every 10 ms, bounded by the window";
  DrainUntil(kStreamLossGrace);
  EXPECT_TRUE(BLost());
  ASSERT_EQ(Snap().restarts.size(), 1u);
  EXPECT_THAT(Snap().restarts[0].reason,
              HasSubstr("(watch stream closed; no answer to a probe within 150ms)"));
}

TEST_F(StreamProbeTest, NotKnownYet_ARefusalLosesItAtOnce) {
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).accepted, 1);
  core_->WatchClosed(watch_[1]);
  ASSERT_EQ(Probes().size(), 1u);
  EXPECT_EQ(core_->NoteProbesRefused({Probes()[0].probe}), 1);
  EXPECT_TRUE(BLost());
}

TEST_F(StreamProbeTest, NotKnownYet_AnAnswerKeepsIt) {
  EXPECT_EQ(Alive(1, LivenessKind::kAlive).accepted, 1);
  closed_at_ = clock_.Now();
  core_->WatchClosed(watch_[1]);
  ASSERT_EQ(Probes().size(), 1u);
  EXPECT_EQ(Answer(Probes()[0].probe, 1).probe_answers, 1);
  DrainUntil(kStreamLossGrace * 2);
  core_->Tick();
  EXPECT_EQ(Snap().phase, Phase::kRunning);
}

TEST_F(StreamProbeTest, UdpNotHeardLately_NoProbe) {
  // ALIVE_ACKED once, then nothing for longer than UdpHeardWithin.
  EXPECT_EQ(Alive(1).accepted, 1);
  clock_.Advance(UdpHeardWithin(absl::Seconds(5)) + absl::Milliseconds(1));
  core_->WatchClosed(watch_[1]);
  EXPECT_TRUE(Probes().empty());
}

TEST_F(StreamProbeTest, NoAddressKnown_NoProbe) {
  EXPECT_EQ(Alive(1, LivenessKind::kAliveAcked, /*with_origin=*/false).accepted, 1);
  core_->WatchClosed(watch_[1]);
  EXPECT_TRUE(Probes().empty());
}

TEST_F(StreamProbeTest, AnotherFailureDuringTheProbe_EndsIt_WithoutALoss) {
  CloseB();
  v1::ReportRequest r;
  *r.mutable_member() = reqs_[0].member();
  r.set_job_id("job");
  r.set_round(1);
  r.set_state(v1::ReportRequest::FAILED);
  r.set_exit_code(3);
  ASSERT_TRUE(core_->Report(r).ok());
  ASSERT_EQ(Snap().phase, Phase::kGathering);
  EXPECT_EQ(core_->CheckProbes(clock_.Now()), absl::InfiniteFuture());
  DrainUntil(kStreamProbeWindow * 2);
  EXPECT_TRUE(Snap().lost_nodes.empty());
  EXPECT_EQ(Snap().restart_count, 1);
}

TEST_F(StreamProbeTest, Bounded_AStalledCallerSendsOneProbePerCall_NoneAfterTheWindow) {
  CloseB();
  // The liveness thread wakes 35 ms late: one probe, not three.
  clock_.Advance(absl::Milliseconds(35));
  const absl::Time next = core_->CheckProbes(clock_.Now());
  EXPECT_EQ(Probes().size(), 2u);
  EXPECT_EQ(next, clock_.Now() + kStreamProbeEvery);
  // Called a thousand times at one moment: nothing more.
  for (int i = 0; i < 1000; ++i) core_->CheckProbes(clock_.Now());
  EXPECT_EQ(Probes().size(), 2u);
  clock_.Advance(absl::Milliseconds(10));
  EXPECT_EQ(core_->CheckProbes(clock_.Now()), closed_at_ + kStreamProbeWindow)
      << "the last probe went; next: the window's end";
  EXPECT_EQ(Probes().size(), 3u);
  clock_.Advance(absl::Milliseconds(5));
  EXPECT_EQ(core_->CheckProbes(clock_.Now()), absl::InfiniteFuture()) << "lost";
  EXPECT_TRUE(BLost());
  EXPECT_EQ(Probes().size(), 3u);
}

}  // namespace
}  // namespace stream_probe_test
}  // namespace trainlet::rendezvous

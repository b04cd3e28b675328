#include "rendezvous/liveness_datagram.h"

#include <cstring>

#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

LivenessKey Key(uint8_t fill) {
  LivenessKey k;
  k.fill(fill);
  return k;
}

TEST(LivenessDatagram, RoundTrip_FieldsAndMac) {
  const LivenessBytes b = EncodeLivenessDatagram(7, 0x1122334455667788ULL, 3, 42, Key(9));
  std::optional<LivenessDatagram> d = ParseLivenessDatagram(b.data(), b.size());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->slot, 7u);
  EXPECT_EQ(d->incarnation, 0x1122334455667788ULL);
  EXPECT_EQ(d->round, 3u);
  EXPECT_EQ(d->seq, 42u);
  EXPECT_TRUE(d->MacValid(Key(9)));
  EXPECT_FALSE(d->MacValid(Key(8)));
}

TEST(LivenessDatagram, LayoutIsLittleEndianAtTheDocumentedOffsets) {
  const LivenessBytes b = EncodeLivenessDatagram(0x01020304, 5, 6, 7, Key(1));
  EXPECT_EQ(std::memcmp(b.data(), "TLVD", 4), 0);
  EXPECT_EQ(b[4], kLivenessDatagramVersion);
  EXPECT_EQ(b[8], 0x04);
  EXPECT_EQ(b[11], 0x01);
  EXPECT_EQ(b[16], 5);
  EXPECT_EQ(b[24], 6);
  EXPECT_EQ(b[32], 7);
  EXPECT_EQ(SipHash24(Key(1), b.data(), kLivenessMacOffset) & 0xff, b[40]);
}

TEST(LivenessDatagram, WrongSizeMagicVersionOrPadding_Rejected) {
  const LivenessBytes good = EncodeLivenessDatagram(1, 2, 3, 4, Key(5));
  EXPECT_FALSE(ParseLivenessDatagram(good.data(), good.size() - 1).has_value());
  EXPECT_FALSE(ParseLivenessDatagram(nullptr, 0).has_value());
  uint8_t longer[kLivenessDatagramBytes + 1] = {};
  std::memcpy(longer, good.data(), good.size());
  EXPECT_FALSE(ParseLivenessDatagram(longer, sizeof(longer)).has_value());
  for (size_t i : {0, 3, 4, 5, 7, 12, 15}) {
    LivenessBytes b = good;
    b[i] ^= 0x40;
    EXPECT_FALSE(ParseLivenessDatagram(b.data(), b.size()).has_value()) << "byte " << i;
  }
}

TEST(LivenessDatagram, AnyFlippedBitOfTheHeaderOrMac_FailsTheMac) {
  const LivenessBytes good = EncodeLivenessDatagram(1, 2, 3, 4, Key(5));
  for (size_t i : {8, 16, 24, 32, 39, 40, 47}) {
    LivenessBytes b = good;
    b[i] ^= 1;
    std::optional<LivenessDatagram> d = ParseLivenessDatagram(b.data(), b.size());
    ASSERT_TRUE(d.has_value()) << i;
    EXPECT_FALSE(d->MacValid(Key(5))) << "byte " << i;
  }
}

TEST(LivenessDatagram, AnAckIsItsOwnKind_UnderTheSameMac) {
  const LivenessBytes ack = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kAck);
  EXPECT_EQ(ack[5], 1);
  // Neither parses as the other kind.
  EXPECT_FALSE(ParseLivenessDatagram(ack.data(), ack.size()).has_value());
  std::optional<LivenessDatagram> a =
      ParseLivenessDatagram(ack.data(), ack.size(), LivenessKind::kAck);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, LivenessKind::kAck);
  EXPECT_EQ(a->slot, 7u);
  EXPECT_EQ(a->seq, 10u);
  EXPECT_TRUE(a->MacValid(Key(3)));
  const LivenessBytes alive = EncodeLivenessDatagram(7, 8, 9, 10, Key(3));
  EXPECT_FALSE(ParseLivenessDatagram(alive.data(), alive.size(), LivenessKind::kAck).has_value());
  // The kind is under the MAC: an ack relabelled as alive fails it.
  LivenessBytes relabelled = ack;
  relabelled[5] = 0;
  std::optional<LivenessDatagram> r = ParseLivenessDatagram(relabelled.data(), relabelled.size());
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->MacValid(Key(3)));
  // Another kind byte is rejected by both.
  LivenessBytes other = ack;
  other[5] = 2;
  EXPECT_FALSE(ParseLivenessDatagram(other.data(), other.size()).has_value());
  EXPECT_FALSE(ParseLivenessDatagram(other.data(), other.size(), LivenessKind::kAck).has_value());
}

TEST(LivenessDatagram, ReadyIsItsOwnKind_TheCoordinatorTakesAliveAndReadyButNoAck) {
  const LivenessBytes ready = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kReady);
  EXPECT_EQ(ready[5], 2);
  std::optional<LivenessDatagram> r = ParseAgentDatagram(ready.data(), ready.size());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->kind, LivenessKind::kReady);
  EXPECT_EQ(r->round, 9u);
  EXPECT_TRUE(r->MacValid(Key(3)));
  EXPECT_FALSE(ParseLivenessDatagram(ready.data(), ready.size()).has_value())
      << "not an alive datagram";
  const LivenessBytes alive = EncodeLivenessDatagram(7, 8, 9, 10, Key(3));
  ASSERT_TRUE(ParseAgentDatagram(alive.data(), alive.size()).has_value());
  EXPECT_EQ(ParseAgentDatagram(alive.data(), alive.size())->kind, LivenessKind::kAlive);
  const LivenessBytes ack = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kAck);
  EXPECT_FALSE(ParseAgentDatagram(ack.data(), ack.size()).has_value());
  // The kind is under the MAC: a ready datagram made from an alive one fails it.
  LivenessBytes forged = alive;
  forged[5] = 2;
  std::optional<LivenessDatagram> f = ParseAgentDatagram(forged.data(), forged.size());
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->MacValid(Key(3)));
  LivenessBytes unknown = alive;
  unknown[5] = 4;  // no such kind
  EXPECT_FALSE(ParseAgentDatagram(unknown.data(), unknown.size()).has_value());
  EXPECT_FALSE(ParseCoordinatorDatagram(unknown.data(), unknown.size()).has_value());
}

TEST(LivenessDatagram, RejoinIsTheCoordinatorsKind_TakenOnlyForThisMemberAndANewerRound) {
  const LivenessBytes rejoin = EncodeLivenessDatagram(7, 8, 9, 0, Key(3), LivenessKind::kRejoin);
  EXPECT_EQ(rejoin[5], 3);
  std::optional<LivenessDatagram> r = ParseCoordinatorDatagram(rejoin.data(), rejoin.size());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->kind, LivenessKind::kRejoin);
  EXPECT_EQ(r->round, 9u);
  EXPECT_FALSE(ParseAgentDatagram(rejoin.data(), rejoin.size()).has_value())
      << "the coordinator takes no REJOIN";
  const LivenessBytes ack = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kAck);
  ASSERT_TRUE(ParseCoordinatorDatagram(ack.data(), ack.size()).has_value());
  EXPECT_EQ(ParseCoordinatorDatagram(ack.data(), ack.size())->kind, LivenessKind::kAck);
  for (LivenessKind agent_kind : {LivenessKind::kAlive, LivenessKind::kReady}) {
    const LivenessBytes b = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), agent_kind);
    EXPECT_FALSE(ParseCoordinatorDatagram(b.data(), b.size()).has_value()) << "no agent's kind";
  }
  EXPECT_TRUE(IsOwnNewerRejoin(*r, 7, 8, 8, Key(3)));
  EXPECT_FALSE(IsOwnNewerRejoin(*r, 7, 8, 9, Key(3))) << "the round it is in: a replay";
  EXPECT_FALSE(IsOwnNewerRejoin(*r, 7, 8, 10, Key(3))) << "an older round";
  EXPECT_FALSE(IsOwnNewerRejoin(*r, 6, 8, 8, Key(3))) << "another slot";
  EXPECT_FALSE(IsOwnNewerRejoin(*r, 7, 9, 8, Key(3))) << "another incarnation";
  EXPECT_FALSE(IsOwnNewerRejoin(*r, 7, 8, 8, Key(4))) << "another key";
  // An ack with the same fields is no REJOIN (the kind is under the MAC).
  LivenessBytes forged = ack;
  forged[5] = 3;
  std::optional<LivenessDatagram> f = ParseCoordinatorDatagram(forged.data(), forged.size());
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(IsOwnNewerRejoin(*f, 7, 8, 8, Key(3)));
  std::optional<LivenessDatagram> as_ack = ParseCoordinatorDatagram(ack.data(), ack.size());
  EXPECT_FALSE(IsOwnNewerRejoin(*as_ack, 7, 8, 8, Key(3))) << "an ack is no REJOIN";
}

TEST(LivenessDatagram, TakenIsAnAgentsKind_NotTheCoordinators) {
  const LivenessBytes taken = EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kTaken);
  EXPECT_EQ(taken[5], 5);
  std::optional<LivenessDatagram> t = ParseAgentDatagram(taken.data(), taken.size());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->kind, LivenessKind::kTaken);
  EXPECT_TRUE(t->MacValid(Key(3)));
  EXPECT_FALSE(ParseCoordinatorDatagram(taken.data(), taken.size()).has_value());
}

TEST(LivenessDatagram, ProbeIsTheCoordinatorsKind_AnsweredWithItsFieldsUnderTheKey) {
  // Stream loss (docs/protocol.md): a PROBE reaches the agent's answering
  // thread only (ParseProbe), never its loop's parser or the coordinator's.
  const LivenessBytes probe =
      EncodeLivenessDatagram(7, 8, 9, 0xFEEDFACE, Key(3), LivenessKind::kProbe);
  EXPECT_EQ(probe[5], 6);
  std::optional<LivenessDatagram> p = ParseProbe(probe.data(), probe.size());
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(ParseAgentDatagram(probe.data(), probe.size()).has_value());
  EXPECT_FALSE(ParseCoordinatorDatagram(probe.data(), probe.size()).has_value());
  EXPECT_FALSE(ParseProbe(probe.data(), probe.size() - 1).has_value());
  EXPECT_TRUE(IsOwnProbe(*p, 7, 8, Key(3)));
  EXPECT_FALSE(IsOwnProbe(*p, 6, 8, Key(3))) << "another slot";
  EXPECT_FALSE(IsOwnProbe(*p, 7, 9, Key(3))) << "another incarnation";
  EXPECT_FALSE(IsOwnProbe(*p, 7, 8, Key(4))) << "another key";
  const LivenessBytes ack = EncodeLivenessDatagram(7, 8, 9, 0xFEEDFACE, Key(3), LivenessKind::kAck);
  EXPECT_FALSE(ParseProbe(ack.data(), ack.size()).has_value()) << "an ack is no probe";
  // The answer: the probe's fields, its own kind, under the same key; the
  // coordinator takes it (and an alive-acked datagram) from an agent.
  const LivenessBytes answer = EncodeProbeAnswer(*p, Key(3));
  EXPECT_EQ(answer[5], 7);
  std::optional<LivenessDatagram> a = ParseAgentDatagram(answer.data(), answer.size());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, LivenessKind::kProbeAnswer);
  EXPECT_EQ(a->slot, 7u);
  EXPECT_EQ(a->incarnation, 8u);
  EXPECT_EQ(a->round, 9u);
  EXPECT_EQ(a->seq, 0xFEEDFACEu);
  EXPECT_TRUE(a->MacValid(Key(3)));
  EXPECT_FALSE(ParseCoordinatorDatagram(answer.data(), answer.size()).has_value());
  const LivenessBytes acked =
      EncodeLivenessDatagram(7, 8, 9, 10, Key(3), LivenessKind::kAliveAcked);
  std::optional<LivenessDatagram> aa = ParseAgentDatagram(acked.data(), acked.size());
  ASSERT_TRUE(aa.has_value());
  EXPECT_EQ(aa->kind, LivenessKind::kAliveAcked);
  EXPECT_FALSE(ParseCoordinatorDatagram(acked.data(), acked.size()).has_value());
  // Kinds past the last one are malformed.
  LivenessBytes unknown = acked;
  unknown[5] = 9;
  EXPECT_FALSE(ParseAgentDatagram(unknown.data(), unknown.size()).has_value());
  EXPECT_FALSE(ParseCoordinatorDatagram(unknown.data(), unknown.size()).has_value());
  EXPECT_FALSE(ParseProbe(unknown.data(), unknown.size()).has_value());
}

TEST(DirectiveDatagram, RoundTrip_LengthAtBytesSixAndSeven_MacOverThePayload) {
  const std::string payload = "a serialized directive, any bytes";
  std::optional<std::string> bytes = EncodeDirectiveDatagram(7, 8, 9, payload, Key(3));
  ASSERT_TRUE(bytes.has_value());
  ASSERT_EQ(bytes->size(), kLivenessDatagramBytes + payload.size());
  const auto* b = reinterpret_cast<const uint8_t*>(bytes->data());
  EXPECT_EQ(b[5], 4);
  EXPECT_EQ(b[6] | (b[7] << 8), static_cast<int>(payload.size()));
  std::optional<DirectiveDatagram> d = ParseDirectiveDatagram(b, bytes->size());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->payload, payload);
  EXPECT_EQ(d->header.slot, 7u);
  EXPECT_EQ(d->header.incarnation, 8u);
  EXPECT_EQ(d->header.round, 9u);
  EXPECT_TRUE(IsOwnDirective(*d, 7, 8, Key(3)));
  EXPECT_FALSE(IsOwnDirective(*d, 6, 8, Key(3))) << "another slot";
  EXPECT_FALSE(IsOwnDirective(*d, 7, 9, Key(3))) << "another incarnation";
  EXPECT_FALSE(IsOwnDirective(*d, 7, 8, Key(4))) << "another key";
  // Neither 48-byte parser takes it.
  EXPECT_FALSE(ParseCoordinatorDatagram(b, bytes->size()).has_value());
  EXPECT_FALSE(ParseAgentDatagram(b, bytes->size()).has_value());
  EXPECT_FALSE(ParseCoordinatorDatagram(b, kLivenessDatagramBytes).has_value())
      << "its header alone is no 48-byte kind";
}

TEST(DirectiveDatagram, AnyFlippedBitOfHeaderOrPayload_FailsTheMac) {
  std::optional<std::string> bytes = EncodeDirectiveDatagram(7, 8, 9, "payload!", Key(3));
  ASSERT_TRUE(bytes.has_value());
  for (size_t i = 0; i < bytes->size(); ++i) {
    if (i == 6 || i == 7) continue;  // the length: checked by the parser
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = *bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      std::optional<DirectiveDatagram> d =
          ParseDirectiveDatagram(reinterpret_cast<const uint8_t*>(flipped.data()), flipped.size());
      if (d.has_value()) {
        EXPECT_FALSE(IsOwnDirective(*d, 7, 8, Key(3))) << i << ":" << bit;
      }
    }
  }
}

TEST(DirectiveDatagram, SizeBoundsAndTheLengthField) {
  EXPECT_FALSE(EncodeDirectiveDatagram(7, 8, 9, "", Key(3)).has_value()) << "nothing to say";
  EXPECT_FALSE(
      EncodeDirectiveDatagram(7, 8, 9, std::string(kMaxDirectivePayloadBytes + 1, 'x'), Key(3))
          .has_value());
  std::optional<std::string> largest =
      EncodeDirectiveDatagram(7, 8, 9, std::string(kMaxDirectivePayloadBytes, 'x'), Key(3));
  ASSERT_TRUE(largest.has_value());
  EXPECT_EQ(largest->size(), kMaxDirectiveDatagramBytes);
  const auto* b = reinterpret_cast<const uint8_t*>(largest->data());
  EXPECT_TRUE(ParseDirectiveDatagram(b, largest->size()).has_value());
  EXPECT_FALSE(ParseDirectiveDatagram(b, largest->size() - 1).has_value()) << "cut short";
  std::string longer = *largest + "y";
  EXPECT_FALSE(
      ParseDirectiveDatagram(reinterpret_cast<const uint8_t*>(longer.data()), longer.size())
          .has_value())
      << "over the limit";
  std::optional<std::string> small = EncodeDirectiveDatagram(7, 8, 9, "abc", Key(3));
  std::string lying = *small;
  lying[6] = 4;  // says 4 bytes follow, 3 do
  EXPECT_FALSE(ParseDirectiveDatagram(reinterpret_cast<const uint8_t*>(lying.data()), lying.size())
                   .has_value());
  std::string not_zero = *small;
  not_zero[12] = 1;
  EXPECT_FALSE(
      ParseDirectiveDatagram(reinterpret_cast<const uint8_t*>(not_zero.data()), not_zero.size())
          .has_value());
  EXPECT_FALSE(ParseDirectiveDatagram(nullptr, 60).has_value());
}

TEST(LivenessDatagram, KeyFromBytes_ExactlySixteen) {
  EXPECT_FALSE(LivenessKeyFromBytes("").has_value());
  EXPECT_FALSE(LivenessKeyFromBytes(std::string(15, 'a')).has_value());
  EXPECT_FALSE(LivenessKeyFromBytes(std::string(17, 'a')).has_value());
  std::optional<LivenessKey> k = LivenessKeyFromBytes(std::string(16, 'a'));
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ((*k)[15], 'a');
}

TEST(LivenessDatagram, NewKeysDiffer) { EXPECT_NE(NewLivenessKey(), NewLivenessKey()); }

}  // namespace
}  // namespace trainlet::rendezvous

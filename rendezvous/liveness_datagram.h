// The UDP liveness datagram (docs/protocol.md, "Liveness"): what an agent
// sends the coordinator every liveness interval to say "this member is
// alive", instead of a unary Report, and the acknowledgement the coordinator
// sends back (at most every timeout/4 per member) to say "heard you, and I
// am alive". Fixed size, little-endian:
//
//   offset size  field
//        0    4  magic "TLVD"
//        4    1  version (kLivenessDatagramVersion)
//        5    1  kind: 0 alive (agent -> coordinator), 1 ack (coordinator -> agent),
//                      2 ready (agent -> coordinator: alive, and its workers have
//                        stopped; it re-joins `round` without a Join call:
//                        docs/protocol.md, "Re-join on the stream"),
//                      3 rejoin (coordinator -> agent: the Rejoin directive,
//                        ready_by_datagram, for round `round`; sent at a
//                        restart to members whose Watch accepts it, and again
//                        in answer to their alive datagrams until heeded)
//                      4 directive (coordinator -> agent: a whole
//                        v1::Directive after these 48 bytes, below: what a
//                        released member's stream would carry, and the
//                        Rejoin with its reason to a member whose Watch
//                        accepts_rejoin_directive)
//                      5 taken (agent -> coordinator: alive, and it took the
//                        job's verdict of round `round` from a directive
//                        datagram; the coordinator stops repeating it)
//        6    2  zero (directive: the payload's length, little-endian)
//        8    4  slot         Assignment.liveness_slot
//       12    4  zero
//       16    8  incarnation  the member's incarnation
//       24    8  round        the round the agent is in (0: none yet); ready: the
//                             round it is ready for (Rejoin.next_round); rejoin:
//                             the round to re-join (Rejoin.next_round)
//       32    8  seq          alive: strictly increasing per incarnation (from 1);
//                             ack: the seq of the alive datagram it acknowledges;
//                             rejoin: 0 (a replay is harmless: the agent takes a
//                             rejoin only for a round above its own)
//       40    8  mac          SipHash-2-4(Assignment.liveness_key, bytes 0..39)
//
// A directive datagram (kind 4) is those 48 bytes, with seq 0 and `round`
// the directive's round, followed by the payload: a serialized v1::Directive
// of 1 to kMaxDirectivePayloadBytes bytes (the coordinator sends a member
// whose directive does not fit its stream instead, or none: docs/protocol.md,
// "Released streams"). Its MAC is SipHash-2-4 of bytes 0..39 followed by the
// payload, so the payload cannot be changed or cut.
//
// The MAC covers the kind, so an ack cannot pass for an alive datagram or
// the other way round. An ack carries the member's slot, incarnation and
// round: the agent takes it only for its own, with a seq above the last ack
// it took and no higher than the last it sent (RoundMachine).
//
// The key is drawn per member incarnation by the coordinator (a CSPRNG) and
// travels only in the Assignment, on the authenticated (TLS when configured)
// gRPC channel; without it a datagram cannot be forged, and the coordinator
// takes a seq only above the last one it accepted, so a replayed datagram
// is ignored.
//
// Parsing checks the size, magic, version, kind and the zero bytes only;
// the slot, incarnation, round, seq and MAC are the receiver's to check
// (Coordinator::NoteLivenessBatch, RoundMachine), since it holds the key.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_RENDEZVOUS_LIVENESS_DATAGRAM_H_
#define TRAINLET_RENDEZVOUS_LIVENESS_DATAGRAM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/siphash.h"

namespace trainlet::rendezvous {

inline constexpr size_t kLivenessDatagramBytes = 48;
inline constexpr size_t kLivenessMacOffset = 40;  // the MAC covers bytes [0, 40).
inline constexpr uint8_t kLivenessDatagramVersion = 1;
inline constexpr std::array<uint8_t, 4> kLivenessMagic = {'T', 'L', 'V', 'D'};

enum class LivenessKind : uint8_t {
  kAlive = 0,
  kAck = 1,
  kReady = 2,
  kRejoin = 3,
  kDirective = 4,
  kTaken = 5,
};

// The largest directive payload: a whole datagram of at most 1,232 bytes,
// what fits IPv6's minimum MTU (1,280) after the IP and UDP headers, so it is
// never fragmented.
inline constexpr size_t kMaxDirectivePayloadBytes = 1232 - 48;
inline constexpr size_t kMaxDirectiveDatagramBytes = 48 + kMaxDirectivePayloadBytes;

using LivenessKey = SipHashKey;
using LivenessBytes = std::array<uint8_t, kLivenessDatagramBytes>;

struct LivenessDatagram {
  LivenessKind kind = LivenessKind::kAlive;
  uint32_t slot = 0;
  uint64_t incarnation = 0;
  uint64_t round = 0;
  uint64_t seq = 0;
  uint64_t mac = 0;  // as received; Encode computes it.
  // The MAC of the header as received, recomputed under `key`.
  bool MacValid(const LivenessKey& key) const;
  // Bytes [0, 40) as they were on the wire (kept for MacValid).
  std::array<uint8_t, kLivenessMacOffset> header{};
};

// The datagram for these fields, with its MAC under `key`.
LivenessBytes EncodeLivenessDatagram(uint32_t slot, uint64_t incarnation, uint64_t round,
                                     uint64_t seq, const LivenessKey& key,
                                     LivenessKind kind = LivenessKind::kAlive);

// nullopt unless `size` is kLivenessDatagramBytes, the magic, version and
// zero bytes are right and the kind is `kind`. Never reads past `size`.
std::optional<LivenessDatagram> ParseLivenessDatagram(const uint8_t* data, size_t size,
                                                      LivenessKind kind = LivenessKind::kAlive);
// What the coordinator takes from an agent: alive, ready or taken (`kind`
// says which).
std::optional<LivenessDatagram> ParseAgentDatagram(const uint8_t* data, size_t size);
// What an agent takes from the coordinator in 48 bytes: ack or rejoin
// (a directive datagram: ParseDirectiveDatagram).
std::optional<LivenessDatagram> ParseCoordinatorDatagram(const uint8_t* data, size_t size);

// A directive datagram (kind 4): the header's fields and the payload, not
// yet checked against a member (IsOwnDirective).
struct DirectiveDatagram {
  LivenessDatagram header;  // kind kDirective, seq 0; header.mac covers the payload too.
  std::string payload;      // a serialized v1::Directive
  bool MacValid(const LivenessKey& key) const;
};
// The datagram that carries `payload` (1..kMaxDirectivePayloadBytes bytes,
// else nullopt) to this member, with its MAC under `key`.
std::optional<std::string> EncodeDirectiveDatagram(uint32_t slot, uint64_t incarnation,
                                                   uint64_t round, const std::string& payload,
                                                   const LivenessKey& key);
// nullopt unless the size is 49..kMaxDirectiveDatagramBytes, bytes 6-7 give
// the payload's length exactly, and the magic, version, kind and zero bytes
// are right. Never reads past `size`.
std::optional<DirectiveDatagram> ParseDirectiveDatagram(const uint8_t* data, size_t size);
// Whether `d` is this member's own: its slot and incarnation, a MAC under
// its key. (Which directive it takes is the round machine's business.)
bool IsOwnDirective(const DirectiveDatagram& d, uint32_t slot, uint64_t incarnation,
                    const LivenessKey& key);

// Whether `rejoin` (kind kRejoin) is this member's own (slot, incarnation,
// a MAC under its key) and asks for a round above `current_round`: an older
// or replayed one says nothing new.
bool IsOwnNewerRejoin(const LivenessDatagram& rejoin, uint32_t slot, uint64_t incarnation,
                      uint64_t current_round, const LivenessKey& key);

// What a member expects of an ack (the agent's RoundMachine, and the load
// benchmark's simulated agents, which must behave alike).
struct AckExpectation {
  uint32_t slot = 0;
  uint64_t incarnation = 0;
  uint64_t round = 0;
  uint64_t last_acked_seq = 0;  // the seq of the last ack taken (0: none yet)
  uint64_t last_sent_seq = 0;   // the seq of the last datagram sent
  uint64_t window = 1;          // how many of the last datagrams an ack may be for
  LivenessKey key{};
};

// Whether `ack` (parsed as LivenessKind::kAck) is this member's own: its
// slot, incarnation and round, a seq above the last ack taken, not above the
// last datagram sent and among the last `window` sent (an ack held up on the
// way proves nothing about now), and a MAC under its key.
bool IsOwnRecentAck(const LivenessDatagram& ack, const AckExpectation& expected);

// The key from Assignment.liveness_key (exactly 16 bytes), else nullopt.
std::optional<LivenessKey> LivenessKeyFromBytes(const std::string& bytes);
// 16 bytes from the kernel's CSPRNG (getrandom).
LivenessKey NewLivenessKey();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_LIVENESS_DATAGRAM_H_

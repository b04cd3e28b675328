// The UDP liveness datagrams (docs/protocol.md: "Liveness" has the format
// and its security, "Re-join on the stream" the ready and rejoin kinds,
// "Released streams" the directive and taken kinds, "Stream loss" the probe,
// probe answer and alive-acked kinds): what an agent sends the coordinator
// every liveness interval instead of a unary Report, the ack the coordinator
// sends back, the directives it sends a member by datagram, and the probe it
// sends a member whose stream closed.
// 48 bytes, little-endian: magic "TLVD" (4), version (1), kind (1), zero or
// a directive's payload length (2), slot (4), zero (4), incarnation (8),
// round (8), seq (8), then SipHash-2-4 under the member's liveness_key of
// bytes 0..39 (a directive: and its payload, a serialized v1::Directive of at
// most kMaxDirectivePayloadBytes).
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
  kAlive = 0,        // agent -> coordinator: this member is alive.
  kAck = 1,          // coordinator -> agent: heard you (at most every T/4 per member).
  kReady = 2,        // agent -> coordinator: alive, workers stopped, re-joins `round`.
  kRejoin = 3,       // coordinator -> agent: the Rejoin directive for `round`.
  kDirective = 4,    // coordinator -> agent: a v1::Directive follows the 48 bytes.
  kTaken = 5,        // agent -> coordinator: alive, took `round`'s verdict by datagram.
  kProbe = 6,        // coordinator -> agent: are you alive? (seq: a nonce; its stream closed)
  kProbeAnswer = 7,  // agent -> coordinator: alive (seq: the probe's nonce).
  kAliveAcked = 8,   // agent -> coordinator: alive, and the coordinator's acks reach it.
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
// What the coordinator takes from an agent: alive, ready, taken, probe
// answer or alive-acked (`kind` says which).
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

// A probe (kind kProbe) as an agent's liveness socket receives it; nullopt
// for anything else. Never reads past `size`.
std::optional<LivenessDatagram> ParseProbe(const uint8_t* data, size_t size);
// Whether `probe` is this member's own: its slot and incarnation, a MAC
// under its key (the nonce is the coordinator's to check in the answer).
bool IsOwnProbe(const LivenessDatagram& probe, uint32_t slot, uint64_t incarnation,
                const LivenessKey& key);
// The answer to `probe` (already checked with IsOwnProbe): kind
// kProbeAnswer, the probe's slot, incarnation, round and nonce (seq), under
// `key`.
LivenessBytes EncodeProbeAnswer(const LivenessDatagram& probe, const LivenessKey& key);

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

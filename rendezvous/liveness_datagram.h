// The UDP liveness datagram (docs/protocol.md, "Liveness"): what an agent
// sends the coordinator every liveness interval to say "this member is
// alive", instead of a unary Report. Fixed size, little-endian:
//
//   offset size  field
//        0    4  magic "TLVD"
//        4    1  version (kLivenessDatagramVersion)
//        5    3  zero
//        8    4  slot         Assignment.liveness_slot
//       12    4  zero
//       16    8  incarnation  the member's incarnation
//       24    8  round        the round the agent is in (0: none yet)
//       32    8  seq          strictly increasing per incarnation (from 1)
//       40    8  mac          SipHash-2-4(Assignment.liveness_key, bytes 0..39)
//
// The key is drawn per member incarnation by the coordinator (a CSPRNG) and
// travels only in the Assignment, on the authenticated (TLS when configured)
// gRPC channel; without it a datagram cannot be forged, and the coordinator
// takes a seq only above the last one it accepted, so a replayed datagram
// is ignored.
//
// Parsing checks the size, magic, version and the zero bytes only; the
// slot, incarnation, round, seq and MAC are the coordinator core's to check
// (Coordinator::NoteLivenessBatch), since it holds the keys.
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

using LivenessKey = SipHashKey;
using LivenessBytes = std::array<uint8_t, kLivenessDatagramBytes>;

struct LivenessDatagram {
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
                                     uint64_t seq, const LivenessKey& key);

// nullopt unless `size` is kLivenessDatagramBytes and the magic, version and
// zero bytes are right. Never reads past `size`.
std::optional<LivenessDatagram> ParseLivenessDatagram(const uint8_t* data, size_t size);

// The key from Assignment.liveness_key (exactly 16 bytes), else nullopt.
std::optional<LivenessKey> LivenessKeyFromBytes(const std::string& bytes);
// 16 bytes from the kernel's CSPRNG (getrandom).
LivenessKey NewLivenessKey();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_LIVENESS_DATAGRAM_H_

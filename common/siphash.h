// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
// 2012): a keyed 64-bit MAC over short messages, written from the paper's
// specification. The coordinator's UDP liveness datagrams
// (rendezvous/liveness_datagram.h) carry one, keyed per member, so that a
// datagram cannot be forged without the key the member got over the
// authenticated gRPC channel. Test vectors: the paper's appendix A and the
// reference implementation's vectors.h (siphash_test.cc).
//
// Pure functions; thread-safe.
#ifndef TRAINLET_COMMON_SIPHASH_H_
#define TRAINLET_COMMON_SIPHASH_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace trainlet {

inline constexpr size_t kSipHashKeyBytes = 16;
using SipHashKey = std::array<uint8_t, kSipHashKeyBytes>;

// SipHash-2-4 of `size` bytes at `data` under `key` (k0 = key[0..7], k1 =
// key[8..15], both little-endian, as in the paper).
uint64_t SipHash24(const SipHashKey& key, const uint8_t* data, size_t size);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_SIPHASH_H_

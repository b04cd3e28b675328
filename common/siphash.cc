#include "common/siphash.h"

namespace trainlet {
namespace {

inline uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct State {
  uint64_t v0, v1, v2, v3;
  // One SipRound (paper, section 2).
  inline void Round() {
    v0 += v1;
    v1 = Rotl(v1, 13);
    v1 ^= v0;
    v0 = Rotl(v0, 32);
    v2 += v3;
    v3 = Rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = Rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = Rotl(v1, 17);
    v1 ^= v2;
    v2 = Rotl(v2, 32);
  }
  inline void Compress(uint64_t m) {
    v3 ^= m;
    Round();
    Round();  // c = 2
    v0 ^= m;
  }
};

}  // namespace

uint64_t SipHash24(const SipHashKey& key, const uint8_t* data, size_t size) {
  const uint64_t k0 = LoadLe64(key.data());
  const uint64_t k1 = LoadLe64(key.data() + 8);
  // Initialisation: the constants spell "somepseudorandomlygeneratedbytes".
  State s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
          k1 ^ 0x7465646279746573ULL};
  const size_t full = size - size % 8;
  for (size_t i = 0; i < full; i += 8) s.Compress(LoadLe64(data + i));
  // The last word: the remaining 0..7 bytes, zero padding, and the message
  // length modulo 256 in the top byte.
  uint64_t last = static_cast<uint64_t>(size & 0xff) << 56;
  for (size_t i = 0; i < size % 8; ++i) last |= static_cast<uint64_t>(data[full + i]) << (8 * i);
  s.Compress(last);
  // Finalisation: d = 4 rounds.
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace trainlet

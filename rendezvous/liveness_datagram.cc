#include "rendezvous/liveness_datagram.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool LivenessDatagram::MacValid(const LivenessKey& key) const {
  return SipHash24(key, header.data(), header.size()) == mac;
}

LivenessBytes EncodeLivenessDatagram(uint32_t slot, uint64_t incarnation, uint64_t round,
                                     uint64_t seq, const LivenessKey& key, LivenessKind kind) {
  LivenessBytes b{};
  std::memcpy(b.data(), kLivenessMagic.data(), kLivenessMagic.size());
  b[4] = kLivenessDatagramVersion;
  b[5] = static_cast<uint8_t>(kind);
  PutLe32(b.data() + 8, slot);
  PutLe64(b.data() + 16, incarnation);
  PutLe64(b.data() + 24, round);
  PutLe64(b.data() + 32, seq);
  PutLe64(b.data() + kLivenessMacOffset, SipHash24(key, b.data(), kLivenessMacOffset));
  return b;
}

namespace {

// Every check but the kind's.
std::optional<LivenessDatagram> ParseAnyKind(const uint8_t* data, size_t size) {
  if (data == nullptr || size != kLivenessDatagramBytes) return std::nullopt;
  if (std::memcmp(data, kLivenessMagic.data(), kLivenessMagic.size()) != 0) return std::nullopt;
  if (data[4] != kLivenessDatagramVersion) return std::nullopt;
  if (data[5] > static_cast<uint8_t>(LivenessKind::kRejoin)) return std::nullopt;
  if (data[6] != 0 || data[7] != 0 || GetLe32(data + 12) != 0) return std::nullopt;
  LivenessDatagram d;
  d.kind = static_cast<LivenessKind>(data[5]);
  d.slot = GetLe32(data + 8);
  d.incarnation = GetLe64(data + 16);
  d.round = GetLe64(data + 24);
  d.seq = GetLe64(data + 32);
  d.mac = GetLe64(data + kLivenessMacOffset);
  std::memcpy(d.header.data(), data, kLivenessMacOffset);
  return d;
}

}  // namespace

std::optional<LivenessDatagram> ParseLivenessDatagram(const uint8_t* data, size_t size,
                                                      LivenessKind kind) {
  std::optional<LivenessDatagram> d = ParseAnyKind(data, size);
  if (!d.has_value() || d->kind != kind) return std::nullopt;
  return d;
}

std::optional<LivenessDatagram> ParseAgentDatagram(const uint8_t* data, size_t size) {
  std::optional<LivenessDatagram> d = ParseAnyKind(data, size);
  if (!d.has_value() || (d->kind != LivenessKind::kAlive && d->kind != LivenessKind::kReady)) {
    return std::nullopt;
  }
  return d;
}

std::optional<LivenessDatagram> ParseCoordinatorDatagram(const uint8_t* data, size_t size) {
  std::optional<LivenessDatagram> d = ParseAnyKind(data, size);
  if (!d.has_value() || (d->kind != LivenessKind::kAck && d->kind != LivenessKind::kRejoin)) {
    return std::nullopt;
  }
  return d;
}

bool IsOwnNewerRejoin(const LivenessDatagram& rejoin, uint32_t slot, uint64_t incarnation,
                      uint64_t current_round, const LivenessKey& key) {
  return rejoin.kind == LivenessKind::kRejoin && rejoin.slot == slot &&
         rejoin.incarnation == incarnation && rejoin.round > current_round && rejoin.MacValid(key);
}

bool IsOwnRecentAck(const LivenessDatagram& ack, const AckExpectation& e) {
  return ack.kind == LivenessKind::kAck && ack.slot == e.slot && ack.incarnation == e.incarnation &&
         ack.round == e.round && ack.seq > e.last_acked_seq && ack.seq <= e.last_sent_seq &&
         ack.seq + e.window >= e.last_sent_seq && ack.MacValid(e.key);
}

std::optional<LivenessKey> LivenessKeyFromBytes(const std::string& bytes) {
  LivenessKey k;
  if (bytes.size() != k.size()) return std::nullopt;
  std::memcpy(k.data(), bytes.data(), k.size());
  return k;
}

LivenessKey NewLivenessKey() {
  LivenessKey k;
  size_t got = 0;
  while (got < k.size()) {
    const ssize_t n = getrandom(k.data() + got, k.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Without a CSPRNG the keys would be guessable: a programmer or
      // platform error, not an input.
      TLOG(kError) << "getrandom failed: " << std::strerror(errno);
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
  return k;
}

}  // namespace trainlet::rendezvous

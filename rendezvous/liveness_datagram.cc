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

// The 48-byte header's fields, given that `data` holds at least 48 bytes.
LivenessDatagram HeaderFields(const uint8_t* data) {
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

bool HeaderLooksRight(const uint8_t* data) {
  return std::memcmp(data, kLivenessMagic.data(), kLivenessMagic.size()) == 0 &&
         data[4] == kLivenessDatagramVersion && GetLe32(data + 12) == 0;
}

// Every check of a 48-byte datagram but the kind's.
std::optional<LivenessDatagram> ParseAnyKind(const uint8_t* data, size_t size) {
  if (data == nullptr || size != kLivenessDatagramBytes || !HeaderLooksRight(data)) {
    return std::nullopt;
  }
  if (data[5] > static_cast<uint8_t>(LivenessKind::kAliveAcked) ||
      data[5] == static_cast<uint8_t>(LivenessKind::kDirective)) {
    return std::nullopt;
  }
  if (data[6] != 0 || data[7] != 0) return std::nullopt;
  return HeaderFields(data);
}

uint64_t DirectiveMac(const LivenessKey& key, const uint8_t* header, const std::string& payload) {
  uint8_t buf[kLivenessMacOffset + kMaxDirectivePayloadBytes];
  std::memcpy(buf, header, kLivenessMacOffset);
  std::memcpy(buf + kLivenessMacOffset, payload.data(), payload.size());
  return SipHash24(key, buf, kLivenessMacOffset + payload.size());
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
  if (!d.has_value()) return std::nullopt;
  switch (d->kind) {
    case LivenessKind::kAlive:
    case LivenessKind::kReady:
    case LivenessKind::kTaken:
    case LivenessKind::kProbeAnswer:
    case LivenessKind::kAliveAcked:
      return d;
    default:
      return std::nullopt;
  }
}

bool DirectiveDatagram::MacValid(const LivenessKey& key) const {
  return payload.size() <= kMaxDirectivePayloadBytes &&
         DirectiveMac(key, header.header.data(), payload) == header.mac;
}

std::optional<std::string> EncodeDirectiveDatagram(uint32_t slot, uint64_t incarnation,
                                                   uint64_t round, const std::string& payload,
                                                   const LivenessKey& key) {
  if (payload.empty() || payload.size() > kMaxDirectivePayloadBytes) return std::nullopt;
  LivenessBytes head =
      EncodeLivenessDatagram(slot, incarnation, round, 0, key, LivenessKind::kDirective);
  head[6] = static_cast<uint8_t>(payload.size());
  head[7] = static_cast<uint8_t>(payload.size() >> 8);
  PutLe64(head.data() + kLivenessMacOffset, DirectiveMac(key, head.data(), payload));
  std::string out(reinterpret_cast<const char*>(head.data()), head.size());
  out += payload;
  return out;
}

std::optional<DirectiveDatagram> ParseDirectiveDatagram(const uint8_t* data, size_t size) {
  if (data == nullptr || size <= kLivenessDatagramBytes || size > kMaxDirectiveDatagramBytes ||
      !HeaderLooksRight(data) || data[5] != static_cast<uint8_t>(LivenessKind::kDirective)) {
    return std::nullopt;
  }
  const size_t length = static_cast<size_t>(data[6]) | (static_cast<size_t>(data[7]) << 8);
  if (length != size - kLivenessDatagramBytes) return std::nullopt;
  DirectiveDatagram d;
  d.header = HeaderFields(data);
  d.payload.assign(reinterpret_cast<const char*>(data + kLivenessDatagramBytes), length);
  return d;
}

bool IsOwnDirective(const DirectiveDatagram& d, uint32_t slot, uint64_t incarnation,
                    const LivenessKey& key) {
  return d.header.kind == LivenessKind::kDirective && d.header.slot == slot &&
         d.header.incarnation == incarnation && d.MacValid(key);
}

std::optional<LivenessDatagram> ParseCoordinatorDatagram(const uint8_t* data, size_t size) {
  std::optional<LivenessDatagram> d = ParseAnyKind(data, size);
  if (!d.has_value() || (d->kind != LivenessKind::kAck && d->kind != LivenessKind::kRejoin)) {
    return std::nullopt;
  }
  return d;
}

std::optional<LivenessDatagram> ParseProbe(const uint8_t* data, size_t size) {
  return ParseLivenessDatagram(data, size, LivenessKind::kProbe);
}

bool IsOwnProbe(const LivenessDatagram& probe, uint32_t slot, uint64_t incarnation,
                const LivenessKey& key) {
  return probe.kind == LivenessKind::kProbe && probe.slot == slot &&
         probe.incarnation == incarnation && probe.MacValid(key);
}

LivenessBytes EncodeProbeAnswer(const LivenessDatagram& probe, const LivenessKey& key) {
  return EncodeLivenessDatagram(probe.slot, probe.incarnation, probe.round, probe.seq, key,
                                LivenessKind::kProbeAnswer);
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

// The wire format of the link measurer (link_server.h, link_client.h), a
// plain TCP exchange of its own so that it measures the network under the
// rendezvous, not gRPC's flow control:
//
//   client                                   server
//   Hello  (32 bytes + job, from, to ids) -->
//                                         <-- Reply (24 bytes: OK or why not, its round, its cap)
//   Frame PING seq (16 bytes)             -->
//                                         <-- the same 16 bytes          (a few times)
//   Frame BULK n (16 bytes), then n bytes -->
//                                         <-- Frame DONE n, then close
//
// All integers are big-endian. Hello: "TLPF", version u16 (1), 0 u16, round
// u64, nonce u64, then the lengths of job id, from node and to node (u16
// each, 1-253) and 0 u16, then those bytes. Reply: "TLPF", version u16,
// status u16, the server's round u64, the most bytes it takes in one BULK
// u64. Frame: type u32, 0 u32, value u64.
//
// The identity (job, round, nonce, to node) is what keeps a stale or
// foreign peer out: the measurer has no token, but the nonce is drawn by
// the coordinator per round and told only to the round's members.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_PREFLIGHT_LINK_WIRE_H_
#define TRAINLET_PREFLIGHT_LINK_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trainlet::preflight {

inline constexpr uint16_t kLinkWireVersion = 1;
inline constexpr size_t kHelloFixedBytes = 32;
inline constexpr size_t kReplyBytes = 24;
inline constexpr size_t kFrameBytes = 16;
inline constexpr size_t kMaxWireIdBytes = 253;
inline constexpr size_t kMaxHelloBytes = kHelloFixedBytes + 3 * kMaxWireIdBytes;

struct Hello {
  uint64_t round = 0;
  uint64_t nonce = 0;
  std::string job_id;
  std::string from_node;
  std::string to_node;
};

enum class ReplyStatus : uint16_t {
  kOk = 0,
  kBadRequest = 1,  // not a hello this server understands (version, lengths, bytes).
  kWrongJob = 2,
  kWrongNode = 3,   // the hello names another node: the plan's address is stale.
  kWrongRound = 4,  // the server is at another round (Reply.round says which).
  kWrongNonce = 5,  // the right round, but not from this round's plan.
  kBusy = 6,        // too many connections at once; try again.
};
std::string ReplyStatusText(ReplyStatus status);

struct Reply {
  ReplyStatus status = ReplyStatus::kOk;
  uint64_t round = 0;
  uint64_t max_bulk_bytes = 0;
};

enum class FrameType : uint32_t { kPing = 1, kBulk = 2, kDone = 3 };

struct Frame {
  FrameType type = FrameType::kPing;
  uint64_t value = 0;
};

std::string EncodeHello(const Hello& hello);
std::string EncodeReply(const Reply& reply);
std::string EncodeFrame(const Frame& frame);

enum class Parsed { kNeedMore, kOk, kBad };

// Parses a hello from the start of `bytes`: kNeedMore while it is
// incomplete (*need: how many bytes the whole hello takes, once the fixed
// part is in), kBad with *error for anything else than a version-1 hello
// with ids of 1-253 printable bytes.
Parsed ParseHello(absl::string_view bytes, Hello* hello, size_t* need, std::string* error);
// A reply or frame from exactly kReplyBytes / kFrameBytes bytes; kBad on a
// wrong magic, version, status or type.
Parsed ParseReply(absl::string_view bytes, Reply* reply, std::string* error);
Parsed ParseFrame(absl::string_view bytes, Frame* frame, std::string* error);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_LINK_WIRE_H_

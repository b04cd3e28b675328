#include "preflight/link_wire.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainlet::preflight {

namespace {

constexpr char kMagic[] = "TLPF";

void Put16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}
void Put32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}
void Put64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}
uint64_t Get(absl::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

bool IsWireId(absl::string_view s) {
  if (s.empty() || s.size() > kMaxWireIdBytes) return false;
  for (char c : s) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string ReplyStatusText(ReplyStatus status) {
  switch (status) {
    case ReplyStatus::kOk:
      return "ok";
    case ReplyStatus::kBadRequest:
      return "bad request";
    case ReplyStatus::kWrongJob:
      return "wrong job";
    case ReplyStatus::kWrongNode:
      return "wrong node (the address is another node's)";
    case ReplyStatus::kWrongRound:
      return "wrong round";
    case ReplyStatus::kWrongNonce:
      return "wrong nonce (not this round's plan)";
    case ReplyStatus::kBusy:
      return "busy";
  }
  return absl::StrCat("status ", static_cast<int>(status));
}

std::string EncodeHello(const Hello& h) {
  std::string out(kMagic, 4);
  Put16(&out, kLinkWireVersion);
  Put16(&out, 0);
  Put64(&out, h.round);
  Put64(&out, h.nonce);
  Put16(&out, static_cast<uint16_t>(h.job_id.size()));
  Put16(&out, static_cast<uint16_t>(h.from_node.size()));
  Put16(&out, static_cast<uint16_t>(h.to_node.size()));
  Put16(&out, 0);
  absl::StrAppend(&out, h.job_id, h.from_node, h.to_node);
  return out;
}

std::string EncodeReply(const Reply& r) {
  std::string out(kMagic, 4);
  Put16(&out, kLinkWireVersion);
  Put16(&out, static_cast<uint16_t>(r.status));
  Put64(&out, r.round);
  Put64(&out, r.max_bulk_bytes);
  return out;
}

std::string EncodeFrame(const Frame& f) {
  std::string out;
  Put32(&out, static_cast<uint32_t>(f.type));
  Put32(&out, 0);
  Put64(&out, f.value);
  return out;
}

Parsed ParseHello(absl::string_view b, Hello* hello, size_t* need, std::string* error) {
  *need = kHelloFixedBytes;
  if (b.size() >= 4 && b.substr(0, 4) != absl::string_view(kMagic, 4)) {
    *error = "not a trainlet link measurer hello (magic)";
    return Parsed::kBad;
  }
  if (b.size() < kHelloFixedBytes) return Parsed::kNeedMore;
  if (Get(b, 4, 2) != kLinkWireVersion) {
    *error = absl::StrCat("hello version ", Get(b, 4, 2), ", this side speaks ", kLinkWireVersion);
    return Parsed::kBad;
  }
  const size_t job = Get(b, 24, 2), from = Get(b, 26, 2), to = Get(b, 28, 2);
  if (job == 0 || from == 0 || to == 0 || job > kMaxWireIdBytes || from > kMaxWireIdBytes ||
      to > kMaxWireIdBytes) {
    *error =
        absl::StrCat("hello id lengths ", job, "/", from, "/", to, " outside 1-", kMaxWireIdBytes);
    return Parsed::kBad;
  }
  *need = kHelloFixedBytes + job + from + to;
  if (b.size() < *need) return Parsed::kNeedMore;
  Hello h;
  h.round = Get(b, 8, 8);
  h.nonce = Get(b, 16, 8);
  h.job_id = std::string(b.substr(kHelloFixedBytes, job));
  h.from_node = std::string(b.substr(kHelloFixedBytes + job, from));
  h.to_node = std::string(b.substr(kHelloFixedBytes + job + from, to));
  if (!IsWireId(h.job_id) || !IsWireId(h.from_node) || !IsWireId(h.to_node)) {
    *error = "hello ids must be printable ASCII";
    return Parsed::kBad;
  }
  *hello = std::move(h);
  return Parsed::kOk;
}

Parsed ParseReply(absl::string_view b, Reply* reply, std::string* error) {
  if (b.size() < kReplyBytes) return Parsed::kNeedMore;
  if (b.substr(0, 4) != absl::string_view(kMagic, 4) || Get(b, 4, 2) != kLinkWireVersion) {
    *error = "not a version-1 trainlet link measurer reply";
    return Parsed::kBad;
  }
  const uint64_t status = Get(b, 6, 2);
  if (status > static_cast<uint64_t>(ReplyStatus::kBusy)) {
    *error = absl::StrCat("unknown reply status ", status);
    return Parsed::kBad;
  }
  reply->status = static_cast<ReplyStatus>(status);
  reply->round = Get(b, 8, 8);
  reply->max_bulk_bytes = Get(b, 16, 8);
  return Parsed::kOk;
}

Parsed ParseFrame(absl::string_view b, Frame* frame, std::string* error) {
  if (b.size() < kFrameBytes) return Parsed::kNeedMore;
  const uint64_t type = Get(b, 0, 4);
  if (type < static_cast<uint64_t>(FrameType::kPing) ||
      type > static_cast<uint64_t>(FrameType::kDone) || Get(b, 4, 4) != 0) {
    *error = absl::StrCat("unknown frame type ", type);
    return Parsed::kBad;
  }
  frame->type = static_cast<FrameType>(type);
  frame->value = Get(b, 8, 8);
  return Parsed::kOk;
}

}  // namespace trainlet::preflight

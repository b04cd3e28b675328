#include "rendezvous/error_reason.h"

#include <utility>

#include "absl/strings/cord.h"

namespace trainlet::rendezvous {
namespace {
constexpr char kPayloadUrl[] = "type.googleapis.com/trainlet.v1.ErrorInfo";
}  // namespace

absl::Status WithReason(absl::Status status, ErrorReason reason) {
  if (status.ok()) return status;
  v1::ErrorInfo info;
  info.set_reason(reason);
  status.SetPayload(kPayloadUrl, absl::Cord(info.SerializeAsString()));
  return status;
}

ErrorReason ReasonOf(const absl::Status& status) {
  auto payload = status.GetPayload(kPayloadUrl);
  v1::ErrorInfo info;
  if (!payload || !info.ParseFromString(std::string(*payload))) {
    return v1::ErrorInfo::REASON_UNSPECIFIED;
  }
  return info.reason();
}

std::string SerializedErrorInfo(const absl::Status& status) {
  auto payload = status.GetPayload(kPayloadUrl);
  return payload ? std::string(*payload) : std::string();
}

void AttachSerializedErrorInfo(const std::string& serialized, absl::Status* status) {
  v1::ErrorInfo info;
  if (serialized.empty() || status->ok() || !info.ParseFromString(serialized)) return;
  *status = WithReason(std::move(*status), info.reason());
}

}  // namespace trainlet::rendezvous

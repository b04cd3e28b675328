#include "rendezvous/error_reason.h"

#include <utility>

#include "absl/strings/cord.h"

namespace trainlet::rendezvous {
namespace {
constexpr char kPayloadUrl[] = "type.googleapis.com/trainlet.v1.ErrorInfo";
}  // namespace

absl::Status WithErrorInfo(absl::Status status, const v1::ErrorInfo& info) {
  if (status.ok()) return status;
  status.SetPayload(kPayloadUrl, absl::Cord(info.SerializeAsString()));
  return status;
}

absl::Status WithReason(absl::Status status, ErrorReason reason) {
  v1::ErrorInfo info;
  info.set_reason(reason);
  return WithErrorInfo(std::move(status), info);
}

v1::ErrorInfo ErrorInfoOf(const absl::Status& status) {
  auto payload = status.GetPayload(kPayloadUrl);
  v1::ErrorInfo info;
  if (!payload || !info.ParseFromString(std::string(*payload))) return v1::ErrorInfo();
  if (info.retry_after_ms() < 0) info.set_retry_after_ms(0);
  return info;
}

ErrorReason ReasonOf(const absl::Status& status) { return ErrorInfoOf(status).reason(); }

std::string SerializedErrorInfo(const absl::Status& status) {
  auto payload = status.GetPayload(kPayloadUrl);
  return payload ? std::string(*payload) : std::string();
}

void AttachSerializedErrorInfo(const std::string& serialized, absl::Status* status) {
  v1::ErrorInfo info;
  if (serialized.empty() || status->ok() || !info.ParseFromString(serialized)) return;
  *status = WithErrorInfo(std::move(*status), info);
}

}  // namespace trainlet::rendezvous

// Machine-readable reasons on rendezvous errors. The coordinator attaches one
// to the errors an agent must act on (fenced, job already over); it travels
// as an absl::Status payload in-process and as grpc::Status error_details on
// the wire (see grpc_status.h), so nobody has to parse error messages.
#ifndef TRAINLET_RENDEZVOUS_ERROR_REASON_H_
#define TRAINLET_RENDEZVOUS_ERROR_REASON_H_

#include <string>

#include "absl/status/status.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

using ErrorReason = ::trainlet::v1::ErrorInfo::Reason;

// `status` with `reason` attached (a no-op on OK).
absl::Status WithReason(absl::Status status, ErrorReason reason);
// `status` with `info` attached (a no-op on OK): a reason with its details
// (ErrorInfo.retry_after_ms).
absl::Status WithErrorInfo(absl::Status status, const v1::ErrorInfo& info);
// The attached reason, or REASON_UNSPECIFIED.
ErrorReason ReasonOf(const absl::Status& status);
// The attached ErrorInfo (empty when none; retry_after_ms clamped to >= 0).
v1::ErrorInfo ErrorInfoOf(const absl::Status& status);

// The wire form: a serialized ErrorInfo, or "" when none is attached.
std::string SerializedErrorInfo(const absl::Status& status);
// Attaches the reason in `serialized` (ignored when empty or unparsable).
void AttachSerializedErrorInfo(const std::string& serialized, absl::Status* status);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_ERROR_REASON_H_

// The one converter between absl::Status and grpc::Status. An ErrorInfo
// reason (error_reason.h) rides in grpc::Status::error_details.
#ifndef TRAINLET_RENDEZVOUS_GRPC_STATUS_H_
#define TRAINLET_RENDEZVOUS_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "rendezvous/error_reason.h"

namespace trainlet::rendezvous {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                      SerializedErrorInfo(s));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  AttachSerializedErrorInfo(s.error_details(), &status);
  return status;
}

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_STATUS_H_

#include "agent/reporter_grpc.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::agent {

struct GrpcReportTransport::Stub {
  std::unique_ptr<v1::Controller::Stub> stub;
};

GrpcReportTransport::GrpcReportTransport(const std::string& target, std::string token,
                                         const rendezvous::TlsConfig& tls, absl::Duration interval)
    : token_(std::move(token)), stub_(std::make_unique<Stub>()) {
  grpc::ChannelArguments args;
  // gRPC's reconnect backoff grows to two minutes; a controller back up is
  // dialled again within one report interval.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::max<int64_t>(1000, absl::ToInt64Milliseconds(interval))));
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  // One small report every few seconds: no flow-control window to size, and
  // each BDP ping would cost the controller a wake-up (docs/benchmarks.md).
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  std::shared_ptr<grpc::ChannelCredentials> credentials = rendezvous::ClientCredentials(tls, &args);
  stub_->stub = v1::Controller::NewStub(grpc::CreateCustomChannel(target, credentials, args));
}

GrpcReportTransport::~GrpcReportTransport() = default;

absl::Status GrpcReportTransport::Send(const v1::HealthReport& report, absl::Duration timeout) {
  grpc::ClientContext ctx;
  if (!token_.empty()) ctx.AddMetadata(rendezvous::kTokenMetadataKey, token_);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = &ctx;
  }
  v1::HealthReportResponse response;
  grpc::Status s = stub_->stub->Report(&ctx, report, &response);
  absl::MutexLock lock(&mu_);
  in_flight_ = nullptr;
  return rendezvous::FromGrpcStatus(s);
}

void GrpcReportTransport::Cancel() {
  absl::MutexLock lock(&mu_);
  if (in_flight_ != nullptr) in_flight_->TryCancel();
}

}  // namespace trainlet::agent

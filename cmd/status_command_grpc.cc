// `trainlet status` over the controller's gRPC port (status_command.h): the
// one translation unit of the command that includes gRPC. ListJobs and
// GetStatus with the agents' token and TLS, adapted to the views' model by
// the same functions the controller's HTTP views use (controller/snapshot.h).
#include <grpcpp/grpcpp.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cmd/status_command.h"
#include "common/logging.h"
#include "controller/snapshot.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::agent {
namespace {

class GrpcViewsClient : public ViewsClient {
 public:
  GrpcViewsClient(const std::string& host, int port, std::string token,
                  const rendezvous::TlsConfig& tls, absl::Duration timeout)
      : where_(
            absl::StrCat(host.find(':') != std::string::npos ? "[" + host + "]" : host, ":", port)),
        token_(std::move(token)),
        timeout_(timeout) {
    grpc::ChannelArguments args;
    // A job's whole status in one answer: no cap but the controller's own
    // bounds (a report is at most 64 KiB a node).
    args.SetMaxReceiveMessageSize(INT_MAX);
    std::shared_ptr<grpc::ChannelCredentials> credentials =
        rendezvous::ClientCredentials(tls, &args);
    stub_ = v1::Controller::NewStub(grpc::CreateCustomChannel(where_, credentials, args));
  }

  absl::StatusOr<controller::ControllerSnapshot> Summary() override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::ListJobsResponse response;
    grpc::Status s = stub_->ListJobs(&ctx, v1::ListJobsRequest(), &response);
    if (!s.ok()) return Error(s);
    controller::ControllerSnapshot snapshot;
    snapshot.now_unix_ms = absl::ToUnixMillis(absl::Now());
    snapshot.uptime_ms = -1;  // the gRPC port does not say; the views do.
    snapshot.reports_received = -1;
    snapshot.reports_rejected = -1;
    for (const v1::JobSummary& job : response.jobs()) {
      snapshot.jobs.push_back(controller::SummaryViewOf(job, snapshot.now_unix_ms));
    }
    std::sort(snapshot.jobs.begin(), snapshot.jobs.end(),
              [](const auto& a, const auto& b) { return a.job_id < b.job_id; });
    return snapshot;
  }

  absl::StatusOr<controller::JobView> Job(const std::string& job_id) override {
    absl::StatusOr<v1::GetStatusResponse> status = GetStatus(job_id, false);
    if (!status.ok()) return status.status();
    return controller::JobViewOf(*status, nullptr, absl::ToUnixMillis(absl::Now()));
  }

  absl::StatusOr<std::vector<controller::EvidenceView>> Evidence(
      const std::string& job_id) override {
    absl::StatusOr<v1::GetStatusResponse> status = GetStatus(job_id, /*with_evidence=*/true);
    if (!status.ok()) return status.status();
    return controller::EvidenceOf(*status);
  }

 private:
  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    if (!token_.empty()) ctx->AddMetadata(rendezvous::kTokenMetadataKey, token_);
  }

  absl::StatusOr<v1::GetStatusResponse> GetStatus(const std::string& job_id, bool with_evidence) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::GetStatusRequest request;
    request.set_job_id(job_id);
    request.set_with_evidence(with_evidence);
    v1::GetStatusResponse response;
    grpc::Status s = stub_->GetStatus(&ctx, request, &response);
    if (!s.ok()) return Error(s);
    return response;
  }

  // The call's failure, naming the address; the codes status maps to exits.
  absl::Status Error(const grpc::Status& s) const {
    const absl::Status a = rendezvous::FromGrpcStatus(s);
    const std::string what = SafeForLog(s.error_message(), 300);
    switch (a.code()) {
      case absl::StatusCode::kNotFound:
        return absl::NotFoundError(absl::StrCat("the controller at ", where_, ": ", what));
      case absl::StatusCode::kUnauthenticated:
      case absl::StatusCode::kPermissionDenied:
        return absl::UnauthenticatedError(absl::StrCat(
            "the controller at ", where_, " refused this caller (", what,
            "): give its token (--token-file) and, with TLS, --tls-cert/--tls-key/--tls-ca"));
      case absl::StatusCode::kDeadlineExceeded:
        return absl::UnavailableError(
            absl::StrCat("the controller at ", where_, " (gRPC) did not answer within --timeout"));
      default:
        return absl::UnavailableError(
            absl::StrCat("cannot reach the controller at ", where_, " over gRPC (", what, ")"));
    }
  }

  const std::string where_;
  const std::string token_;
  const absl::Duration timeout_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

}  // namespace

std::unique_ptr<ViewsClient> NewGrpcViewsClient(const std::string& host, int port,
                                                const std::string& token,
                                                const rendezvous::TlsConfig& tls,
                                                absl::Duration timeout) {
  return std::make_unique<GrpcViewsClient>(host, port, token, tls, timeout);
}

}  // namespace trainlet::agent

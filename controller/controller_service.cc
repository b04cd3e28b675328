#include "controller/controller_service.h"

#include <utility>

#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::controller {
namespace {

grpc::ServerUnaryReactor* Immediate(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(rendezvous::ToGrpcStatus(s));
  return reactor;
}

// One agent's report stream: read, hand to the core, read again; a refused
// report ends the stream with the core's status. Deletes itself when gRPC
// is done with it.
class ReportStreamReactor final : public grpc::ServerReadReactor<v1::HealthReport> {
 public:
  // `refused`: the caller check failed; finish at once with it.
  ReportStreamReactor(ControllerCore* core, v1::HealthReportResponse* response,
                      const absl::Status& refused)
      : core_(core), response_(response) {
    if (!refused.ok()) {
      Finish(rendezvous::ToGrpcStatus(refused));
      return;
    }
    StartRead(&report_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent half-closed, or the stream is cancelled.
      response_->set_accepted(accepted_);
      Finish(grpc::Status::OK);
      return;
    }
    if (absl::Status s = core_->Report(report_); !s.ok()) {
      Finish(rendezvous::ToGrpcStatus(s));
      return;
    }
    ++accepted_;
    // A fresh message for the next read: a reused one keeps the capacity of
    // the largest report this stream ever carried, for the stream's life.
    v1::HealthReport().Swap(&report_);
    StartRead(&report_);
  }

  void OnDone() override { delete this; }

 private:
  ControllerCore* const core_;
  v1::HealthReportResponse* const response_;
  v1::HealthReport report_;
  uint64_t accepted_ = 0;
};

}  // namespace

ControllerService::ControllerService(ControllerCore* core, std::string token,
                                     rendezvous::PeerVerifier* peers)
    : core_(core), token_(std::move(token)), peers_(peers), reject_log_(5, absl::Seconds(10)) {}

absl::Status ControllerService::CheckCaller(grpc::CallbackServerContext* ctx,
                                            absl::string_view rpc) {
  absl::Status s = rendezvous::CheckCaller(*ctx, token_, peers_, "controller");
  int64_t suppressed = 0;
  if (!s.ok() && reject_log_.Allow(&suppressed)) {
    TLOG(kWarning) << "controller: rejected " << rpc << " from " << SafeForLog(ctx->peer(), 64)
                   << ": " << s.message() << SuppressedNote(suppressed);
  }
  return s;
}

grpc::ServerUnaryReactor* ControllerService::Report(grpc::CallbackServerContext* ctx,
                                                    const v1::HealthReport* request,
                                                    v1::HealthReportResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "Report"); !s.ok()) return Immediate(ctx, s);
  return Immediate(ctx, core_->Report(*request));
}

grpc::ServerReadReactor<v1::HealthReport>* ControllerService::ReportStream(
    grpc::CallbackServerContext* ctx, v1::HealthReportResponse* response) {
  return new ReportStreamReactor(core_, response, CheckCaller(ctx, "ReportStream"));
}

grpc::ServerUnaryReactor* ControllerService::ListJobs(grpc::CallbackServerContext* ctx,
                                                      const v1::ListJobsRequest* request,
                                                      v1::ListJobsResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "ListJobs"); !s.ok()) return Immediate(ctx, s);
  *response = core_->ListJobs();
  return Immediate(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetStatus(grpc::CallbackServerContext* ctx,
                                                       const v1::GetStatusRequest* request,
                                                       v1::GetStatusResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "GetStatus"); !s.ok()) return Immediate(ctx, s);
  absl::StatusOr<v1::GetStatusResponse> status = core_->GetStatus(request->job_id());
  if (status.ok() && request->with_evidence()) {
    for (v1::HistoryEntry& e : *status->mutable_history()) {
      if (e.kind() != v1::HistoryEntry::HANG || e.seq() <= 0 ||
          e.evidence_bytes() <= static_cast<int64_t>(e.evidence().size())) {
        continue;
      }
      absl::StatusOr<std::string> whole = core_->Evidence(request->job_id(), e.seq());
      if (whole.ok()) e.set_evidence(*std::move(whole));
    }
  }
  if (status.ok()) *response = *std::move(status);
  return Immediate(ctx, status.status());
}

}  // namespace trainlet::controller

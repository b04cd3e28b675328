#include "controller/controller_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::controller {
namespace {

grpc::ServerUnaryReactor* Immediate(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(rendezvous::ToGrpcStatus(s));
  return reactor;
}

// PermissionDenied unless `scope` covers `job_id`.
absl::Status CheckScope(const TokenScope& scope, absl::string_view job_id) {
  if (scope.Allows(job_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the job token is for ", scope.Describe(), ", not job ", SafeForLog(job_id, 64),
                   "; give the job's agents a token the controller's --token-file lists for it"));
}

// One agent's report stream: read, hand to the core, read again; a refused
// report ends the stream with the core's status. Deletes itself when gRPC
// is done with it.
class ReportStreamReactor final : public grpc::ServerReadReactor<v1::HealthReport> {
 public:
  // `caller`: the caller's scope, or why it is refused (finish at once).
  ReportStreamReactor(ControllerCore* core, v1::HealthReportResponse* response,
                      absl::StatusOr<TokenScope> caller)
      : core_(core), response_(response) {
    if (!caller.ok()) {
      Finish(rendezvous::ToGrpcStatus(caller.status()));
      return;
    }
    scope_ = *std::move(caller);
    StartRead(&report_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent half-closed, or the stream is cancelled.
      response_->set_accepted(accepted_);
      Finish(grpc::Status::OK);
      return;
    }
    absl::Status s = CheckScope(scope_, report_.job_id());
    if (s.ok()) s = core_->Report(report_);
    if (!s.ok()) {
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
  TokenScope scope_;
  v1::HealthReport report_;
  uint64_t accepted_ = 0;
};

}  // namespace

ControllerService::ControllerService(ControllerCore* core, JobTokens tokens,
                                     rendezvous::PeerVerifier* peers)
    : core_(core), tokens_(std::move(tokens)), peers_(peers), reject_log_(5, absl::Seconds(10)) {}

absl::StatusOr<TokenScope> ControllerService::CheckCaller(grpc::CallbackServerContext* ctx,
                                                          absl::string_view rpc) {
  // The client certificate (grpc_auth), then the token against the list.
  absl::Status s = rendezvous::CheckCaller(*ctx, /*token=*/"", peers_, "controller");
  TokenScope scope{/*all_jobs=*/true, {}};
  if (s.ok() && !tokens_.empty()) {
    const auto& md = ctx->client_metadata();
    auto it = md.find(rendezvous::kTokenMetadataKey);
    const TokenScope* found =
        it == md.end() ? nullptr
                       : tokens_.Find(absl::string_view(it->second.data(), it->second.size()));
    if (it == md.end()) {
      s = absl::UnauthenticatedError(
          "no job token: this controller requires one; give every agent a token the "
          "controller's --token-file lists (--token-file on the agent)");
    } else if (found == nullptr) {
      s = absl::UnauthenticatedError(
          "wrong job token: check that the agents' --token-file holds a token the controller's "
          "--token-file lists");
    } else {
      scope = *found;
    }
  }
  int64_t suppressed = 0;
  if (!s.ok() && reject_log_.Allow(&suppressed)) {
    TLOG(kWarning) << "controller: rejected " << rpc << " from " << SafeForLog(ctx->peer(), 64)
                   << ": " << s.message() << SuppressedNote(suppressed);
  }
  if (!s.ok()) return s;
  return scope;
}

grpc::ServerUnaryReactor* ControllerService::Report(grpc::CallbackServerContext* ctx,
                                                    const v1::HealthReport* request,
                                                    v1::HealthReportResponse* response) {
  absl::StatusOr<TokenScope> caller = CheckCaller(ctx, "Report");
  if (!caller.ok()) return Immediate(ctx, caller.status());
  if (absl::Status s = CheckScope(*caller, request->job_id()); !s.ok()) {
    int64_t suppressed = 0;
    if (reject_log_.Allow(&suppressed)) {
      TLOG(kWarning) << "controller: rejected Report from " << SafeForLog(ctx->peer(), 64) << ": "
                     << s.message() << SuppressedNote(suppressed);
    }
    return Immediate(ctx, s);
  }
  return Immediate(ctx, core_->Report(*request));
}

grpc::ServerReadReactor<v1::HealthReport>* ControllerService::ReportStream(
    grpc::CallbackServerContext* ctx, v1::HealthReportResponse* response) {
  return new ReportStreamReactor(core_, response, CheckCaller(ctx, "ReportStream"));
}

grpc::ServerUnaryReactor* ControllerService::ListJobs(grpc::CallbackServerContext* ctx,
                                                      const v1::ListJobsRequest* request,
                                                      v1::ListJobsResponse* response) {
  absl::StatusOr<TokenScope> caller = CheckCaller(ctx, "ListJobs");
  if (!caller.ok()) return Immediate(ctx, caller.status());
  *response = core_->ListJobs();
  if (!caller->all_jobs) {
    // Only the jobs the token may read.
    auto* jobs = response->mutable_jobs();
    jobs->erase(
        std::remove_if(jobs->begin(), jobs->end(),
                       [&](const v1::JobSummary& j) { return !caller->Allows(j.job_id()); }),
        jobs->end());
  }
  return Immediate(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetStatus(grpc::CallbackServerContext* ctx,
                                                       const v1::GetStatusRequest* request,
                                                       v1::GetStatusResponse* response) {
  absl::StatusOr<TokenScope> caller = CheckCaller(ctx, "GetStatus");
  if (!caller.ok()) return Immediate(ctx, caller.status());
  if (absl::Status s = CheckScope(*caller, request->job_id()); !s.ok()) return Immediate(ctx, s);
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

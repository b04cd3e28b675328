#include "agent/reporter_grpc.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::agent {

struct GrpcReportTransport::Stub {
  std::unique_ptr<v1::Controller::Stub> stub;
};

// What outlives the reactor: the call's context (so that it can be cancelled
// at any time) and what the reactor reported.
// The report streams gRPC has not finished with (OnDone not run yet).
struct GrpcReportTransport::Outstanding {
  absl::Mutex mu;
  int streams ABSL_GUARDED_BY(mu) = 0;
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return streams == 0; }
};

struct GrpcReportTransport::StreamState {
  grpc::ClientContext ctx;
  v1::HealthReportResponse response;
  absl::Mutex mu;
  bool write_done ABSL_GUARDED_BY(mu) = false;
  bool write_ok ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;
  grpc::Status status ABSL_GUARDED_BY(mu);

  // Waits until the stream is done or `deadline`; whether it is, with its
  // status in *out.
  bool AwaitDone(absl::Time deadline, grpc::Status* out) {
    absl::MutexLock lock(&mu);
    mu.AwaitWithDeadline(absl::Condition(&done), deadline);
    *out = status;
    return done;
  }
};

// The stream's reactor. Holds the stream open (a hold) until Release; deletes
// itself when gRPC is done with it, which is after Release.
class GrpcReportTransport::StreamReactor final : public grpc::ClientWriteReactor<v1::HealthReport> {
 public:
  StreamReactor(v1::Controller::Stub* stub, std::shared_ptr<StreamState> state,
                std::shared_ptr<Outstanding> outstanding)
      : state_(std::move(state)), outstanding_(std::move(outstanding)) {
    {
      absl::MutexLock lock(&outstanding_->mu);
      ++outstanding_->streams;
    }
    stub->async()->ReportStream(&state_->ctx, &state_->response, this);
    AddHold();
    StartCall();
  }

  void Write(const v1::HealthReport& report) {
    report_ = report;
    {
      absl::MutexLock lock(&state_->mu);
      state_->write_done = false;
    }
    StartWrite(&report_);
  }
  void HalfClose() { StartWritesDone(); }
  void Release() { RemoveHold(); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&state_->mu);
    state_->write_done = true;
    state_->write_ok = ok;
  }
  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->done = true;
      state_->status = status;
    }
    std::shared_ptr<Outstanding> outstanding = outstanding_;
    delete this;
    absl::MutexLock lock(&outstanding->mu);
    --outstanding->streams;
  }

 private:
  const std::shared_ptr<StreamState> state_;
  const std::shared_ptr<Outstanding> outstanding_;
  v1::HealthReport report_;  // the write in flight.
};

GrpcReportTransport::GrpcReportTransport(const std::string& target, std::string token,
                                         const rendezvous::TlsConfig& tls, absl::Duration interval)
    : token_(std::move(token)),
      stub_(std::make_unique<Stub>()),
      outstanding_(std::make_shared<Outstanding>()) {
  grpc::ChannelArguments args;
  // gRPC's reconnect backoff grows to two minutes; a controller back up is
  // dialled again within one report interval.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::max<int64_t>(1000, absl::ToInt64Milliseconds(interval))));
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  // One small report every few seconds: no flow-control window to size, and
  // each BDP ping would cost the controller a wake-up (docs/benchmarks.md).
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // A controller whose node vanished (no FIN, no RST) is noticed by a ping
  // after kReportKeepaliveTime without a byte from it (its flow-control
  // updates for the streamed reports count), not by TCP minutes later.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReportKeepaliveTime)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReportKeepaliveTimeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::ChannelCredentials> credentials = rendezvous::ClientCredentials(tls, &args);
  stub_->stub = v1::Controller::NewStub(grpc::CreateCustomChannel(target, credentials, args));
}

GrpcReportTransport::~GrpcReportTransport() {
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) EndLocked(/*cancel=*/true);
  }
  // Streams cancelled or ended are done only when gRPC says so: the channel
  // (and, at exit, gRPC itself) must not go before (a crash in gRPC's
  // threads after a test's last report stream was cancelled showed it).
  absl::MutexLock lock(&outstanding_->mu);
  outstanding_->mu.AwaitWithTimeout(absl::Condition(outstanding_.get(), &Outstanding::Idle),
                                    kStreamDrainTimeout);
}

std::shared_ptr<GrpcReportTransport::StreamState> GrpcReportTransport::EndLocked(bool cancel) {
  std::shared_ptr<StreamState> state = std::move(current_->state);
  if (cancel) state->ctx.TryCancel();
  current_->stream->Release();
  current_.reset();
  return state;
}

bool NeedsAcknowledgement(const v1::HealthReport& report) {
  if (!report.hang_evidence().empty()) return true;
  for (const v1::ReportEvent& e : report.events()) {
    if (e.kind() != v1::ReportEvent::PERIODIC) return true;
  }
  return false;
}

absl::Status GrpcReportTransport::Send(const v1::HealthReport& report, absl::Duration timeout) {
  return NeedsAcknowledgement(report) ? SendUnary(report, timeout) : SendOnStream(report, timeout);
}

absl::Status GrpcReportTransport::SendUnary(const v1::HealthReport& report,
                                            absl::Duration timeout) {
  grpc::ClientContext ctx;
  if (!token_.empty()) ctx.AddMetadata(rendezvous::kTokenMetadataKey, token_);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  {
    absl::MutexLock lock(&mu_);
    unary_in_flight_ = &ctx;
  }
  v1::HealthReportResponse response;
  grpc::Status s = stub_->stub->Report(&ctx, report, &response);
  absl::MutexLock lock(&mu_);
  unary_in_flight_ = nullptr;
  ++unary_sent_;
  return rendezvous::FromGrpcStatus(s);
}

absl::Status GrpcReportTransport::SendOnStream(const v1::HealthReport& report,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::shared_ptr<StreamState> state;
  {
    absl::MutexLock lock(&mu_);
    // A stream Cancel hit is not reused.
    if (current_ != nullptr && current_->cancelled) EndLocked(/*cancel=*/false);
    if (current_ == nullptr) {
      current_ = std::make_unique<Current>();
      current_->state = std::make_shared<StreamState>();
      if (!token_.empty()) {
        current_->state->ctx.AddMetadata(rendezvous::kTokenMetadataKey, token_);
      }
      current_->stream = new StreamReactor(stub_->stub.get(), current_->state, outstanding_);
      ++streams_opened_;
    }
    current_->writing = true;
    state = current_->state;
    current_->stream->Write(report);
  }
  bool written = false;
  bool ok = false;
  {
    absl::MutexLock lock(&state->mu);
    state->mu.AwaitWithDeadline(absl::Condition(&state->write_done), deadline);
    written = state->write_done;
    ok = state->write_ok;
  }
  {
    // Only this thread replaces the current stream: it is still `state`'s.
    absl::MutexLock lock(&mu_);
    current_->writing = false;
    if (written && ok) return absl::OkStatus();
    EndLocked(/*cancel=*/!written);
  }
  if (!written) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the controller did not take the report within ", absl::FormatDuration(timeout)));
  }
  // The stream had ended: its status says why (a refused report, the
  // controller gone, Cancel); one that ended without an error means the
  // controller is shutting down.
  grpc::Status status;
  if (!state->AwaitDone(std::max(deadline, absl::Now() + absl::Milliseconds(100)), &status)) {
    return absl::UnavailableError("the report stream did not end in time");
  }
  if (status.ok()) {
    return absl::UnavailableError("the controller ended the report stream (shutting down?)");
  }
  return rendezvous::FromGrpcStatus(status);
}

absl::Status GrpcReportTransport::Close(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::shared_ptr<StreamState> state;
  {
    absl::MutexLock lock(&mu_);
    if (current_ == nullptr) return absl::OkStatus();
    state = current_->state;
    if (timeout <= absl::ZeroDuration()) {
      EndLocked(/*cancel=*/true);
      return absl::OkStatus();
    }
    current_->stream->HalfClose();
    EndLocked(/*cancel=*/false);
  }
  grpc::Status status;
  if (!state->AwaitDone(deadline, &status)) {
    state->ctx.TryCancel();
    return absl::DeadlineExceededError(
        absl::StrCat("the controller did not answer the report stream's end within ",
                     absl::FormatDuration(timeout)));
  }
  return rendezvous::FromGrpcStatus(status);
}

void GrpcReportTransport::Cancel() {
  absl::MutexLock lock(&mu_);
  if (unary_in_flight_ != nullptr) unary_in_flight_->TryCancel();
  if (current_ == nullptr || !current_->writing) return;
  {
    // A write already through is left alone: its Send returns OK.
    absl::MutexLock state_lock(&current_->state->mu);
    if (current_->state->write_done) return;
  }
  current_->cancelled = true;
  current_->state->ctx.TryCancel();
}

int GrpcReportTransport::unary_sent() const {
  absl::MutexLock lock(&mu_);
  return unary_sent_;
}

int GrpcReportTransport::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

}  // namespace trainlet::agent

#include "rendezvous/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::rendezvous {
namespace {

class ReadReactor : public grpc::ClientReadReactor<v1::Directive>, public WatchStream {
 public:
  ReadReactor(std::shared_ptr<v1::Rendezvous::Stub> stub, const v1::WatchRequest& request,
              const std::string& token, CoordinatorClient::OnDirective on_directive,
              CoordinatorClient::OnStreamEnd on_end)
      : stub_(std::move(stub)), request_(request), on_directive_(std::move(on_directive)), on_end_(std::move(on_end)) {
    if (!token.empty()) ctx_.AddMetadata(kTokenMetadataKey, token);
    stub_->async()->Watch(&ctx_, &request_, this);
    StartRead(&directive_);
    StartCall();
  }
  ~ReadReactor() override {
    Cancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  void Cancel() override { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status.
    on_directive_(directive_);
    StartRead(&directive_);
  }
  void OnDone(const grpc::Status& status) override {
    on_end_(FromGrpcStatus(status));
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  std::shared_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext ctx_;
  v1::WatchRequest request_;
  v1::Directive directive_;
  CoordinatorClient::OnDirective on_directive_;
  CoordinatorClient::OnStreamEnd on_end_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

bool IsRetryableJoinError(const absl::Status& status) {
  // UNAVAILABLE: not resolvable / refused / restarting. ABORTED: our own
  // earlier attempt was superseded or the round moved on.
  return absl::IsUnavailable(status) || absl::IsAborted(status);
}

CoordinatorClient::CoordinatorClient(ClientOptions options) : options_(std::move(options)) {
  grpc::ChannelArguments args;
  // While the coordinator is not up, the channel re-dials every 10-100 ms
  // (gRPC's default backoff grows to two minutes). GRPC_ARG_MIN_RECONNECT_
  // BACKOFF_MS is left alone: it is really the connect timeout.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.min_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.max_backoff)));
  // Re-resolve a name that does not exist yet quickly (pod DNS records
  // appear late); gRPC's default waits 30 s between resolutions.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 200);
  // Notice a coordinator host that froze or vanished from the network.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // One connection per client, even when several share a process (the
  // benchmarks simulate many agents in one process).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Rendezvous::NewStub(channel_);
}

CoordinatorClient::~CoordinatorClient() = default;

void CoordinatorClient::Prepare(grpc::ClientContext* ctx) const {
  if (!options_.token.empty()) ctx->AddMetadata(kTokenMetadataKey, options_.token);
}

absl::StatusOr<v1::Assignment> CoordinatorClient::Join(const v1::JoinRequest& request,
                                                       absl::Time deadline) {
  std::mt19937 rng(std::random_device{}());
  absl::Duration backoff = options_.min_backoff;
  absl::Status last_error;
  int attempts = 0;
  // The first attempt fails fast, so that an unreachable coordinator is named
  // in the log at once; later ones wait for the channel to connect, and go
  // out the moment the coordinator listens.
  bool wait_for_ready = false;
  while (true) {
    if (absl::Now() >= deadline) break;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    ctx.set_wait_for_ready(wait_for_ready);
    {
      absl::MutexLock lock(&mu_);
      if (join_cancelled_) return absl::CancelledError("join cancelled");
      join_ctx_ = &ctx;
    }
    v1::JoinResponse response;
    grpc::Status status = stub_->Join(&ctx, request, &response);
    ++attempts;
    {
      absl::MutexLock lock(&mu_);
      join_ctx_ = nullptr;
      if (join_cancelled_) return absl::CancelledError("join cancelled");
    }
    if (status.ok()) return std::move(*response.mutable_assignment());
    absl::Status s = FromGrpcStatus(status);
    if (absl::IsDeadlineExceeded(s)) break;
    if (!IsRetryableJoinError(s)) return s;
    if (!wait_for_ready) {
      TLOG(kInfo) << "coordinator " << options_.target << " not reachable yet (" << s.message()
                  << "); waiting for it until " << absl::FormatTime(deadline);
      wait_for_ready = true;
      last_error = s;
      continue;
    }
    // The coordinator answered "try again" (restarting, or our round moved
    // on): jittered exponential backoff, cut short by the deadline.
    last_error = s;
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration sleep = std::min(backoff * jitter(rng), deadline - absl::Now());
    if (sleep > absl::ZeroDuration()) absl::SleepFor(sleep);
    backoff = std::min(backoff * 3 / 2, options_.max_backoff);
  }
  // Say why: never connected (with the last connection error), or connected
  // but the round did not close.
  const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/false);
  std::string why = state == GRPC_CHANNEL_READY
                        ? "the coordinator answered, but the round did not close (are all "
                          "--nnodes agents running?)"
                        : absl::StrCat("the coordinator never answered; last error: ",
                                       last_error.ok() ? "none (still connecting)"
                                                       : std::string(last_error.message()));
  return absl::DeadlineExceededError(absl::StrFormat(
      "no rendezvous with the coordinator at %s before the join timeout: %s. Check "
      "--coordinator, that node rank 0 runs, and --join-timeout",
      options_.target, why));
}

void CoordinatorClient::CancelJoin() {
  absl::MutexLock lock(&mu_);
  join_cancelled_ = true;
  if (join_ctx_ != nullptr) join_ctx_->TryCancel();
}

std::unique_ptr<WatchStream> CoordinatorClient::Watch(const v1::WatchRequest& request,
                                                      OnDirective on_directive,
                                                      OnStreamEnd on_end) {
  return std::make_unique<ReadReactor>(stub_, request, options_.token,
                                       std::move(on_directive), std::move(on_end));
}

absl::Status CoordinatorClient::Report(const v1::ReportRequest& request, absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ReportResponse response;
  return FromGrpcStatus(stub_->Report(&ctx, request, &response));
}

absl::Status CoordinatorClient::Leave(const v1::LeaveRequest& request, absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::LeaveResponse response;
  return FromGrpcStatus(stub_->Leave(&ctx, request, &response));
}

}  // namespace trainlet::rendezvous

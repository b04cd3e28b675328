#include "rendezvous/in_process_client.h"

#include <utility>

#include "common/clock.h"

namespace trainlet::rendezvous {
namespace {

// The coordinator's end of a Watch: directives straight to the agent's
// callbacks. on_end runs exactly once (after a last directive, on Close, or
// on Cancel), and no callback runs after Cancel returns: each runs under mu_.
class InProcessStream : public DirectiveSink {
 public:
  InProcessStream(RendezvousClient::OnDirective on_directive, RendezvousClient::OnStreamEnd on_end)
      : on_directive_(std::move(on_directive)), on_end_(std::move(on_end)) {}

  void Send(const v1::Directive& directive, bool last) override {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    on_directive_(directive);
    if (last) EndLocked(absl::OkStatus());
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    EndLocked(status);
  }
  // True when this call ended the stream.
  bool Cancel() {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    EndLocked(absl::CancelledError("watch cancelled by the agent"));
    return true;
  }

 private:
  void EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ended_) return;
    ended_ = true;
    on_end_(status);
  }

  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  const RendezvousClient::OnDirective on_directive_;
  const RendezvousClient::OnStreamEnd on_end_;
};

class InProcessWatch : public WatchStream {
 public:
  InProcessWatch(Coordinator* core, std::shared_ptr<InProcessStream> stream, uint64_t id)
      : core_(core), stream_(std::move(stream)), id_(id) {}
  ~InProcessWatch() override { Cancel(); }
  void Cancel() override {
    // Like a gRPC stream the agent cancels: the coordinator sees it close.
    if (stream_->Cancel() && id_ != 0) core_->WatchClosed(id_);
  }

 private:
  Coordinator* const core_;
  const std::shared_ptr<InProcessStream> stream_;
  const uint64_t id_;
};

}  // namespace

InProcessRendezvousClient::InProcessRendezvousClient(Coordinator* core, std::string peer_addr)
    : core_(core), peer_addr_(std::move(peer_addr)) {}

void InProcessRendezvousClient::Join(const v1::JoinRequest& request, absl::Duration timeout,
                                     JoinDone done) {
  Clock* clock = core_->options().clock != nullptr ? core_->options().clock : Clock::Real();
  const uint64_t ticket = core_->Join(request, peer_addr_, clock->Now() + timeout,
                                      [this, done = std::move(done)](auto result) {
                                        {
                                          absl::MutexLock lock(&mu_);
                                          join_ticket_ = 0;
                                        }
                                        done(std::move(result));
                                      });
  // 0: answered already (possibly on another thread, which cleared it).
  if (ticket != 0) {
    absl::MutexLock lock(&mu_);
    join_ticket_ = ticket;
  }
}

void InProcessRendezvousClient::CancelJoin() {
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = join_ticket_;
  }
  // The coordinator answers the parked join with Cancelled.
  core_->CancelJoin(ticket);
}

std::unique_ptr<WatchStream> InProcessRendezvousClient::Watch(const v1::WatchRequest& request,
                                                              OnDirective on_directive,
                                                              OnStreamEnd on_end) {
  auto stream = std::make_shared<InProcessStream>(std::move(on_directive), std::move(on_end));
  absl::StatusOr<uint64_t> id = core_->Watch(request, stream);
  if (!id.ok()) {
    stream->Close(id.status());
    return std::make_unique<InProcessWatch>(core_, std::move(stream), 0);
  }
  return std::make_unique<InProcessWatch>(core_, std::move(stream), *id);
}

void InProcessRendezvousClient::Report(const v1::ReportRequest& request, Done done) {
  v1::ReportResponse response;
  const absl::Status status = core_->Report(request, &response);
  if (status.ok()) {
    ReportResponseHandler handler;
    {
      absl::MutexLock lock(&mu_);
      handler = report_handler_;
    }
    if (handler) handler(response);
  }
  if (done) done(status);
}

void InProcessRendezvousClient::SetReportResponseHandler(ReportResponseHandler handler) {
  absl::MutexLock lock(&mu_);
  report_handler_ = std::move(handler);
}

void InProcessRendezvousClient::Leave(const v1::LeaveRequest& request, Done done) {
  const absl::Status status = core_->Leave(request);
  if (done) done(status);
}

}  // namespace trainlet::rendezvous

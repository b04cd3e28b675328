#include "rendezvous/coordinator_service.h"

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::rendezvous {

void RoundAnswerTracker::Answered(uint64_t round, int nnodes) {
  absl::MutexLock lock(&mu_);
  if (round != round_) {
    round_ = round;
    expected_ = nnodes;
    sent_ = 0;
    first_answer_ = clock_->Now();
  }
}

std::optional<absl::Duration> RoundAnswerTracker::Sent(uint64_t round) {
  absl::Duration took;
  int n = 0;
  {
    absl::MutexLock lock(&mu_);
    if (round != round_ || ++sent_ != expected_) return std::nullopt;
    took = clock_->Now() - first_answer_;
    n = expected_;
  }
  TLOG_AT(level_) << "round " << round << ": all " << n << " answers sent "
                  << absl::StrFormat("%.1f", absl::ToDoubleMilliseconds(took))
                  << " ms after the first";
  if (trimmer_ != nullptr) trimmer_->RoundAnswered();
  return took;
}

namespace {

// A parked Join. The core calls `done` exactly once, possibly from another
// thread or before the constructor returns; OnCancel (caller went away)
// withdraws the join so a dead agent never counts toward a round.
class JoinReactor : public grpc::ServerUnaryReactor {
 public:
  JoinReactor(Coordinator* core, RoundAnswerTracker* answers, const v1::JoinRequest& request,
              v1::JoinResponse* response, const std::string& peer, absl::Time deadline)
      : core_(core), answers_(answers), response_(response), member_(request.member()) {
    uint64_t ticket =
        core_->Join(request, peer, deadline, [this](absl::StatusOr<v1::Assignment> result) {
          if (result.ok()) {
            answered_round_ = result->round();
            answers_->Answered(result->round(), result->nnodes());
            *response_->mutable_assignment() = std::move(*result);
          }
          Finish(ToGrpcStatus(result.status()));
        });
    absl::MutexLock lock(&mu_);
    ticket_ = ticket;
  }

  void OnCancel() override {
    uint64_t ticket;
    {
      absl::MutexLock lock(&mu_);
      ticket = ticket_;
    }
    core_->CancelJoin(ticket);
  }
  // After Finish: the answer has been handed to the transport (or the call
  // failed). answered_round_ was written before Finish, which happens before
  // OnDone.
  void OnDone() override {
    if (answered_round_ != 0) {
      core_->AnswerSent(member_, answered_round_);
      answers_->Sent(answered_round_);
    }
    delete this;
  }

 private:
  Coordinator* const core_;
  RoundAnswerTracker* const answers_;
  v1::JoinResponse* const response_;
  const v1::Member member_;
  uint64_t answered_round_ = 0;
  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
};

class WatchReactor;

// The core's handle on a Watch stream. Outlives the reactor (the core may
// hold it); once the reactor is gone every call is a no-op.
class StreamSink : public DirectiveSink {
 public:
  // `answers` counts the assignments it delivers (a re-join by datagram).
  StreamSink(WatchReactor* reactor, RoundAnswerTracker* answers)
      : answers_(answers), reactor_(reactor) {}
  void Send(const v1::Directive& directive, bool last) override;
  void Close(const absl::Status& status) override;
  // Called by the reactor: its constructor has returned (writes may start).
  void Activate();
  void OnWriteDone(bool ok);
  void OnCancel();
  void Detach();

 private:
  // Decides the next stream operation under the lock; Run() performs it
  // after the lock is released (gRPC may run reactions inline, and they
  // take the same lock).
  struct NextOp {
    WatchReactor* reactor = nullptr;
    const v1::Directive* write = nullptr;  // StartWrite(write), or
    bool finish = false;                   // Finish(status).
    grpc::Status status;
    void Run();
  };
  NextOp NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties the queue; appends the round of each assignment in it.
  void DropQueueLocked(std::vector<uint64_t>* dropped_assignments)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RoundAnswerTracker* const answers_;
  absl::Mutex mu_;
  WatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::Directive> queue_ ABSL_GUARDED_BY(mu_);
  v1::Directive in_flight_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
};

class WatchReactor : public grpc::ServerWriteReactor<v1::Directive> {
 public:
  WatchReactor(Coordinator* core, RoundAnswerTracker* answers, const v1::WatchRequest& request)
      : core_(core), sink_(std::make_shared<StreamSink>(this, answers)) {
    absl::StatusOr<uint64_t> id = core_->Watch(request, sink_);
    if (!id.ok()) {
      sink_->Close(id.status());
    } else {
      watch_id_ = *id;
    }
    sink_->Activate();
  }

  void OnWriteDone(bool ok) override { sink_->OnWriteDone(ok); }
  void OnCancel() override { sink_->OnCancel(); }
  void OnDone() override {
    sink_->Detach();
    if (watch_id_ != 0) core_->WatchClosed(watch_id_);
    delete this;
  }

 private:
  Coordinator* const core_;
  std::shared_ptr<StreamSink> sink_;
  uint64_t watch_id_ = 0;
};

void StreamSink::Send(const v1::Directive& directive, bool last) {
  NextOp op;
  {
    absl::MutexLock lock(&mu_);
    // Counted before its write can start (the tracker's lock is a leaf).
    if (directive.has_assignment()) {
      answers_->Answered(directive.assignment().round(), directive.assignment().nnodes());
    }
    if (reactor_ == nullptr || closing_) {
      // An answer that cannot go: done with, as a failed Join's is.
      if (directive.has_assignment()) answers_->Sent(directive.assignment().round());
      return;
    }
    queue_.push_back(directive);
    if (last) {
      closing_ = true;
      close_status_ = grpc::Status::OK;
    }
    op = NextLocked();
  }
  op.Run();
}

void StreamSink::Close(const absl::Status& status) {
  NextOp op;
  {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || closing_) return;
    closing_ = true;
    close_status_ = ToGrpcStatus(status);
    op = NextLocked();
  }
  op.Run();
}

void StreamSink::Activate() {
  NextOp op;
  {
    absl::MutexLock lock(&mu_);
    active_ = true;
    op = NextLocked();
  }
  op.Run();
}

StreamSink::NextOp StreamSink::NextLocked() {
  NextOp op;
  if (!active_ || writing_ || finished_ || reactor_ == nullptr) return op;
  op.reactor = reactor_;
  if (!queue_.empty()) {
    in_flight_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    op.write = &in_flight_;
  } else if (closing_) {
    finished_ = true;
    op.finish = true;
    op.status = close_status_;
  } else {
    op.reactor = nullptr;
  }
  return op;
}

// The reactor outlives the op: OnDone (which deletes it) comes only after
// Finish, and only this op's owner (writing_/finished_ set under the lock)
// may issue StartWrite or Finish.
void StreamSink::NextOp::Run() {
  if (reactor == nullptr) return;
  if (write != nullptr) {
    reactor->StartWrite(write);
  } else if (finish) {
    reactor->Finish(status);
  }
}

void StreamSink::OnWriteDone(bool ok) {
  NextOp op;
  // Assignments done with (written, or never to be): like a Join's OnDone.
  std::vector<uint64_t> done;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (in_flight_.has_assignment()) done.push_back(in_flight_.assignment().round());
    if (!ok) {
      // The stream is broken; nothing more can be delivered.
      DropQueueLocked(&done);
      if (!closing_) {
        closing_ = true;
        close_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broken");
      }
    }
    op = NextLocked();
  }
  for (uint64_t round : done) answers_->Sent(round);
  op.Run();
}

void StreamSink::DropQueueLocked(std::vector<uint64_t>* dropped_assignments) {
  for (const v1::Directive& d : queue_) {
    if (d.has_assignment()) dropped_assignments->push_back(d.assignment().round());
  }
  queue_.clear();
}

void StreamSink::OnCancel() {
  NextOp op;
  std::vector<uint64_t> dropped;
  {
    absl::MutexLock lock(&mu_);
    DropQueueLocked(&dropped);
    if (!closing_) {
      closing_ = true;
      close_status_ = grpc::Status::CANCELLED;
    }
    op = NextLocked();
  }
  for (uint64_t round : dropped) answers_->Sent(round);
  op.Run();
}

void StreamSink::Detach() {
  absl::MutexLock lock(&mu_);
  reactor_ = nullptr;
}

// The caller's deadline as an absl::Time (gRPC deadlines are wall-clock).
absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const std::chrono::system_clock::time_point d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

grpc::ServerUnaryReactor* Immediate(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

}  // namespace

std::string HostFromPeer(const std::string& peer) {
  std::string rest = peer;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (rest.rfind(scheme, 0) == 0) rest = rest.substr(std::string(scheme).size());
  }
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    return close == std::string::npos ? rest : rest.substr(1, close - 1);
  }
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos) rest = rest.substr(0, colon);
  // URL-encoded forms ("%5B") do not occur for ipv4/ipv6 peers.
  return rest;
}

CoordinatorService::CoordinatorService(Coordinator* core, std::string token, PeerVerifier* peers,
                                       MemoryTrimmer* trimmer)
    : core_(core),
      token_(std::move(token)),
      peers_(peers),
      reject_log_(5, absl::Seconds(10)),
      answers_(Clock::Monotonic(), trimmer,
               core->options().hosted_by_agent ? LogLevel::kDebug : LogLevel::kInfo) {
  // A released member's assignment goes by datagram: counted as a Join's.
  core_->SetAnswerObserver([this](uint64_t round, int nnodes) {
    answers_.Answered(round, nnodes);
    answers_.Sent(round);
  });
}

CoordinatorService::~CoordinatorService() { core_->SetAnswerObserver(nullptr); }

absl::Status CoordinatorService::CheckCaller(grpc::CallbackServerContext* ctx,
                                             absl::string_view rpc) {
  absl::Status s = rendezvous::CheckCaller(*ctx, token_, peers_, "coordinator");
  int64_t suppressed = 0;
  if (!s.ok() && reject_log_.Allow(&suppressed)) {
    TLOG(kWarning) << "rejected " << rpc << " from " << SafeForLog(ctx->peer(), 64) << ": "
                   << s.message() << SuppressedNote(suppressed);
  }
  return s;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx,
                                                   const v1::JoinRequest* request,
                                                   v1::JoinResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "Join"); !s.ok()) return Immediate(ctx, s);
  return new JoinReactor(core_, &answers_, *request, response, HostFromPeer(ctx->peer()),
                         DeadlineOf(ctx));
}

grpc::ServerWriteReactor<v1::Directive>* CoordinatorService::Watch(
    grpc::CallbackServerContext* ctx, const v1::WatchRequest* request) {
  if (absl::Status s = CheckCaller(ctx, "Watch"); !s.ok()) {
    class Rejected : public grpc::ServerWriteReactor<v1::Directive> {
     public:
      explicit Rejected(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
      void OnDone() override { delete this; }
    };
    return new Rejected(s);
  }
  return new WatchReactor(core_, &answers_, *request);
}

grpc::ServerUnaryReactor* CoordinatorService::Report(grpc::CallbackServerContext* ctx,
                                                     const v1::ReportRequest* request,
                                                     v1::ReportResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "Report"); !s.ok()) return Immediate(ctx, s);
  return Immediate(ctx, core_->Report(*request, response));
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* ctx,
                                                    const v1::LeaveRequest* request,
                                                    v1::LeaveResponse* response) {
  if (absl::Status s = CheckCaller(ctx, "Leave"); !s.ok()) return Immediate(ctx, s);
  return Immediate(ctx, core_->Leave(*request));
}

}  // namespace trainlet::rendezvous

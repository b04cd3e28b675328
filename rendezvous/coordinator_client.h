// The agent's side of the rendezvous protocol: a gRPC client for one
// coordinator address, with the retry policy pods need while they start in
// any order (the coordinator's name may not resolve or answer yet).
//
// Threading: all methods are thread-safe. Join blocks (run it off the event
// loop); Watch delivers directives on gRPC threads.
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/rendezvous_client.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

struct ClientOptions {
  std::string target;  // host:port
  std::string token;   // empty: none sent.
  // Reconnect backoff while the coordinator is not up yet. Kept short: a
  // dial to a closed port costs one TCP RST, and the time from the
  // coordinator coming up to the round closing is bounded by max_backoff.
  absl::Duration min_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(100);
};

class CoordinatorClient {
 public:
  using OnDirective = std::function<void(const v1::Directive&)>;
  using OnStreamEnd = std::function<void(const absl::Status&)>;

  explicit CoordinatorClient(ClientOptions options);
  ~CoordinatorClient();

  // Long-poll join, retried while the coordinator is unreachable, until
  // `deadline`. Returns the coordinator's error (not retried) when it
  // rejects the join, DeadlineExceeded naming the target and the last
  // connection error on timeout, Cancelled after CancelJoin().
  absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request, absl::Time deadline);
  // Makes a blocked Join return Cancelled (SIGTERM during rendezvous).
  void CancelJoin();

  // Opens the directive stream. Callbacks run on gRPC threads; on_end runs
  // exactly once, after the last directive.
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request, OnDirective on_directive,
                                     OnStreamEnd on_end);

  absl::Status Report(const v1::ReportRequest& request, absl::Duration timeout);
  absl::Status Leave(const v1::LeaveRequest& request, absl::Duration timeout);

  const std::string& target() const { return options_.target; }

 private:
  void Prepare(grpc::ClientContext* ctx) const;
  void NewChannel();
  std::shared_ptr<grpc::Channel> Channel();
  std::shared_ptr<v1::Rendezvous::Stub> Stub();

  const ClientOptions options_;

  absl::Mutex mu_;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<v1::Rendezvous::Stub> stub_ ABSL_GUARDED_BY(mu_);
  bool join_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* join_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// gRPC's status codes that mean "try again": the coordinator is not up yet.
bool IsRetryableJoinError(const absl::Status& status);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_CLIENT_H_

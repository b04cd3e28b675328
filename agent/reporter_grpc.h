// The reporter's gRPC transport: the agent's reports go to the controller at
// `target` on one long-lived trainlet.v1.Controller/ReportStream, with the
// job token and, when configured, mutual TLS (the same material as the
// rendezvous). The channel re-dials at most every report interval while the
// controller is away.
//
// One stream at a time, opened by the first Send after the previous one
// ended:
//   - Send writes one report and returns when gRPC has taken it (OK), when
//     the stream has ended (the controller refused an earlier report, went
//     away or restarted: the stream's status; this report is not sent), or
//     after `timeout` (DEADLINE_EXCEEDED; the stream is cancelled). A report
//     the controller refuses therefore shows as the next Send's error, once.
//   - Close half-closes the stream and waits, within its timeout, for the
//     controller's answer, so that the last report is processed, not only
//     written, before the agent exits.
//
// Threading: Send and Close from one thread at a time (the reporter's);
// Cancel from any.
#ifndef TRAINLET_AGENT_REPORTER_GRPC_H_
#define TRAINLET_AGENT_REPORTER_GRPC_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/reporter.h"
#include "rendezvous/tls_files.h"

namespace trainlet::agent {

class GrpcReportTransport : public ReportTransport {
 public:
  // `target`: "host:port"; `tls` disabled: plaintext.
  GrpcReportTransport(const std::string& target, std::string token,
                      const rendezvous::TlsConfig& tls, absl::Duration interval);
  // Cancels the stream, if any; waits for nothing.
  ~GrpcReportTransport() override;

  absl::Status Send(const v1::HealthReport& report, absl::Duration timeout) override;
  void Cancel() override;
  absl::Status Close(absl::Duration timeout) override;

  // Streams opened so far (tests).
  int streams_opened() const;

 private:
  struct Stub;
  struct StreamState;
  class Stream;
  struct Current {
    Stream* stream = nullptr;  // valid until Release.
    std::shared_ptr<StreamState> state;
    bool writing = false;    // a Send is waiting for its write.
    bool cancelled = false;  // Cancel hit it.
  };
  // Ends the current stream: cancels it when `cancel`, releases it; the
  // stream's state stays readable through the returned pointer.
  std::shared_ptr<StreamState> EndLocked(bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string token_;
  std::unique_ptr<Stub> stub_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Current> current_ ABSL_GUARDED_BY(mu_);
  int streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_REPORTER_GRPC_H_

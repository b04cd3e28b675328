// The reporter's gRPC transport to the controller at `target`, with the job
// token and, when configured, mutual TLS (the same material as the
// rendezvous). The channel re-dials at most every report interval while the
// controller is away, and pings a controller silent for
// kReportKeepaliveTime.
//
// Two ways, by what the report carries (NeedsAcknowledgement):
//   - A report with an event besides PERIODIC (a state change, a restart, a
//     hang and its evidence, the final state) is a unary
//     trainlet.v1.Controller/Report: OK means the controller checked and
//     took it, so the reporter forgets its events only then.
//   - A periodic report, which the next one supersedes, is written on one
//     long-lived ReportStream: a read in the controller instead of a whole
//     call (docs/controller.md, "Why a stream"). OK means gRPC took it. One
//     stream at a time, opened by the first such Send after the previous one
//     ended. A report the controller refuses ends the stream with its
//     status, which the next periodic Send returns (that report is not
//     sent); the one after opens a new stream. A write not taken within
//     `timeout` is DEADLINE_EXCEEDED and cancels the stream.
// Close half-closes the stream and waits, within its timeout, for the
// controller's answer.
//
// Threading: Send and Close from one thread at a time (the reporter's);
// Cancel from any.
#ifndef TRAINLET_AGENT_REPORTER_GRPC_H_
#define TRAINLET_AGENT_REPORTER_GRPC_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/reporter.h"
#include "rendezvous/tls_files.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace trainlet::agent {

// Idle time after which the report channel pings the controller, and how
// long it waits for the answer before it closes the connection.
inline constexpr absl::Duration kReportKeepaliveTime = absl::Seconds(30);
inline constexpr absl::Duration kReportKeepaliveTimeout = absl::Seconds(10);

// Whether `report` must be acknowledged (a unary Report), not only streamed:
// it carries an event other than PERIODIC, or hang evidence.
bool NeedsAcknowledgement(const v1::HealthReport& report);

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

  // Streams opened and unary reports sent so far (tests).
  int streams_opened() const;
  int unary_sent() const;

 private:
  struct Stub;
  struct StreamState;
  class StreamReactor;
  struct Outstanding;
  // How long the destructor waits for gRPC to finish with the streams.
  static constexpr absl::Duration kStreamDrainTimeout = absl::Seconds(2);
  struct Current {
    StreamReactor* stream = nullptr;  // valid until Release.
    std::shared_ptr<StreamState> state;
    bool writing = false;    // a Send is waiting for its write.
    bool cancelled = false;  // Cancel hit it.
  };
  // Ends the current stream: cancels it when `cancel`, releases it; the
  // stream's state stays readable through the returned pointer.
  std::shared_ptr<StreamState> EndLocked(bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SendUnary(const v1::HealthReport& report, absl::Duration timeout);
  absl::Status SendOnStream(const v1::HealthReport& report, absl::Duration timeout);

  const std::string token_;
  std::unique_ptr<Stub> stub_;
  const std::shared_ptr<Outstanding> outstanding_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Current> current_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* unary_in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  int streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  int unary_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_REPORTER_GRPC_H_

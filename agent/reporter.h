// The agent's health reports to the thin controller: the executor hands the
// reporter each new AgentStatus (Update); a sender thread of the reporter's
// own turns the latest one into a trainlet.v1.HealthReport and sends it
// through a ReportTransport (gRPC in production: reporter_grpc.h; a fake in
// tests), every `interval` and at once on a state change, at most one per
// kMinReportGap. What a report carries, when, and why the controller never
// affects the job: docs/controller.md.
//
// What the reporter adds to the agent's status: when each worker exited,
// which workers the agent stopped (STOPPED, whatever their exit code, so
// that only the worker that failed shows as FAILED), when a joining agent
// gives up (--join-timeout), the workers' command line until a report
// carrying it is answered, and the node's latest preflight (SetPreflight)
// in every report once there is one. Update and AddEvent never block (a copy under a
// lock and a wake-up); while the controller is away only the latest status,
// kMaxPendingEvents events and one hang evidence text are kept.
//
// Threading: Update and AddEvent from any thread; Start and Stop from the
// owner's. Step is the sender thread's body, public for tests that drive it
// with a SimulatedClock and no thread.
#ifndef TRAINLET_AGENT_REPORTER_H_
#define TRAINLET_AGENT_REPORTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/round.h"
#include "common/clock.h"
#include "common/logging.h"
#include "controller/report_limits.h"
#include "rendezvous/coordinator.h"
#include "trainlet/v1/controller.pb.h"
#include "trainlet/v1/preflight.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

// The seam the executor reports through (AgentSeams::reporter).
class StatusReporter {
 public:
  virtual ~StatusReporter() = default;
  // The agent's status now. Never blocks.
  virtual void Update(const AgentStatus& status) = 0;
  // An event for the next report: a hang (kind HANG, its cause, and the
  // evidence text that goes with it, kept up to kMaxHangEvidenceLength from
  // its end). Never blocks.
  virtual void AddEvent(v1::ReportEvent::Kind kind, std::string cause, std::string evidence) = 0;
  // The node's latest preflight (preflight::MakeReport's, docs/preflight.md),
  // whatever the policy: every report from the next one on carries it
  // (sent within kMinReportGap, as a state change), until another replaces
  // it. Its node_id and incarnation become the reporter's. One with a
  // failed check adds a PREFLIGHT event, "preflight: 2 failed: dns (1 of 3
  // names do not resolve: ...); gpu_ecc (...)", unless the last one failed
  // the same checks in the same round. Never blocks. The default drops it
  // (fakes that do not look at preflight).
  virtual void SetPreflight(v1::PreflightReport report) {}
};

// Sends one report; called only on the reporter's thread (Cancel from any).
class ReportTransport {
 public:
  virtual ~ReportTransport() = default;
  virtual absl::Status Send(const v1::HealthReport& report, absl::Duration timeout) = 0;
  // Ends the Send in flight, if any, early (the agent is exiting); later
  // Sends are not affected.
  virtual void Cancel() {}
  // The agent is done reporting: makes sure, within `timeout`, that what
  // was sent has reached the controller (a stream's end answered), then
  // lets go of the connection's state. Sends after it start afresh.
  virtual absl::Status Close(absl::Duration timeout) { return absl::OkStatus(); }
};

inline constexpr absl::Duration kMinReportGap = absl::Seconds(1);
// The events a report carries besides the one that says why it was sent.
inline constexpr int kMaxPendingEvents = controller::kMaxEvents - 1;

struct ReporterOptions {
  std::string job_id;
  std::string node_id;
  uint64_t incarnation = 0;
  absl::Duration interval = absl::Seconds(5);
  // One send's deadline: below the interval, so a black-holed controller
  // delays only its own reports.
  absl::Duration send_timeout = absl::Seconds(2);
  // Adds, on the sender thread, what AgentStatus does not hold: the
  // agent's RSS, GPU health, the coordinator's view. May be empty.
  std::function<void(v1::HealthReport*)> enrich;
  // The workers' command line (CommandLineOf), --nnodes MIN:MAX and
  // --join-timeout (zero: unknown), for the controller's views.
  std::string command;
  // The node's domains, "key=value,..." widest first (HealthReport.topology).
  std::string topology;
  int min_nodes = 0;
  int max_nodes = 0;
  absl::Duration join_timeout = absl::ZeroDuration();
};

class Reporter : public StatusReporter {
 public:
  // `clock` (monotonic: when to send) and `wall` (the times in reports)
  // and `transport` must outlive the reporter.
  Reporter(ReporterOptions options, ReportTransport* transport, Clock* clock,
           Clock* wall = Clock::Real());
  ~Reporter() override;
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  void Update(const AgentStatus& status) override;
  void AddEvent(v1::ReportEvent::Kind kind, std::string cause, std::string evidence) override;
  void SetPreflight(v1::PreflightReport report) override;

  // Starts the sender thread.
  void Start();
  // Stops it: cancels a send in flight, then, when the last send worked
  // and something is unsent (the agent's final state), sends once more,
  // and closes the transport, all within `flush`. Idempotent.
  void Stop(absl::Duration flush = absl::Milliseconds(500));

  // Sends a report when one is due; returns when the next one is due
  // (InfiniteFuture before the first Update).
  absl::Time Step();

  struct Stats {
    int64_t sent = 0;
    int64_t failed = 0;
    int64_t events_dropped = 0;
    int pending_events = 0;
  };
  Stats stats() const;

 private:
  void AddEventLocked(v1::ReportEvent::Kind kind, uint64_t round, std::string cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the next report (under the lock); Send happens outside it.
  std::optional<v1::HealthReport> BuildLocked(absl::Time now, bool force)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddWorkersLocked(const AgentStatus& s, v1::HealthReport* r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendAndRecord(v1::HealthReport report, absl::Duration timeout);
  void Loop();

  const ReporterOptions options_;
  ReportTransport* const transport_;
  Clock* const clock_;
  Clock* const wall_;
  LogLimiter fail_log_;

  mutable absl::Mutex mu_;
  std::optional<AgentStatus> status_ ABSL_GUARDED_BY(mu_);
  // What the reporter saw of each worker of `marks_round_`, by local rank.
  struct WorkerMark {
    bool stopped = false;        // running when the agent began stopping.
    int64_t exited_unix_ms = 0;  // when its exit was first seen.
  };
  uint64_t marks_round_ ABSL_GUARDED_BY(mu_) = 0;
  // The first of this node's workers that failed in `round` (exited
  // non-zero, not stopped by the agent): the RESTART event names it.
  struct Failure {
    uint64_t round = 0;
    int rank = -1;
    int exit_code = 0;
    int64_t exited_unix_ms = 0;
  };
  std::optional<Failure> failure_ ABSL_GUARDED_BY(mu_);
  std::map<int, WorkerMark> marks_ ABSL_GUARDED_BY(mu_);
  int64_t join_deadline_unix_ms_ ABSL_GUARDED_BY(mu_) = 0;
  bool command_delivered_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::PreflightReport> preflight_ ABSL_GUARDED_BY(mu_);
  // The round and failed checks of the last PREFLIGHT event (no event for
  // the same failure again); cleared by a preflight that passes.
  uint64_t preflight_event_round_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> preflight_event_checks_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ReportEvent> events_ ABSL_GUARDED_BY(mu_);
  std::string evidence_ ABSL_GUARDED_BY(mu_);
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // a state change not yet reported.
  absl::Time last_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool last_ok_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_event_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  bool stopped_ = false;
};

// The agent's resident set size from /proc/self/statm; 0 when unreadable.
uint64_t AgentRssBytes();

// The probe's GPUs as reports, each judged fatal when NVML says it needs a
// reset or a reboot, has uncorrectable (double-bit) ECC errors, or failed
// a row remap.
void AddGpuReports(const v1::NodeProbe& probe, v1::HealthReport* report);

// The coordinator's view, for the agent that hosts it: members of the
// current round, rounds opened, the nodes lost and not back, the latest
// restarts with their reasons (controller::TrimToLimits, which every report
// goes through, keeps the newest within the report's bounds), its phase,
// verdict, the joiners a gathering round has, min/max nodes and when the
// gathering gives up (from `now`, the agent's wall clock).
void AddCoordinatorView(const rendezvous::Coordinator::Snapshot& snapshot, v1::HealthReport* report,
                        absl::Time now = absl::Now());

// "preflight: 2 failed: dns (1 of 3 names do not resolve: ...); gpu_ecc
// (...)": the PREFLIGHT event's cause, the failed checks in the report's
// order (TrimToLimits cuts it to kMaxTextLength).
std::string PreflightEventCause(const v1::PreflightReport& report);

// The command line as a person would type it: arguments joined by spaces,
// each quoted for a POSIX shell where it needs to be.
std::string CommandLineOf(const std::vector<std::string>& command);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_REPORTER_H_

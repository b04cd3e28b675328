// The controller's core: what every agent's health reports say about its
// job, kept in memory, with no gRPC and no HTTP. The gRPC adapter
// (controller_service.h) feeds it reports and asks it for views; the history
// store (history_store.h) keeps what happened (rounds, restarts with their
// causes, hang evidence and verdicts, nodes that went silent) across
// controller restarts through the HistorySink seam.
//
// A node, as the controller sees it:
//
//          report                  no report for its staleness window
//   (new) --------> FRESH ----------------------------------------> STALE
//                     ^                                               |
//                     +--------------------- report ------------------+
//   STALE for forget_after: the node is forgotten (its history stays).
//   A report from another incarnation replaces the node's entry; the old
//   incarnation is fenced (its late reports: FailedPrecondition).
//
// A job is ACTIVE while a node is FRESH, STALE when none is, SUCCEEDED once
// every node reported DONE with exit code 0, FAILED once every node reported
// DONE and one of them with another code. Jobs are forgotten only to make
// room (ControllerOptions::max_jobs), least recently heard from first.
//
// Staleness window of a node: max(stale_after, 3 x its report interval).
//
// Memory is bounded (docs/controller.md states the totals): at most
// max_jobs jobs, max_nodes nodes over all jobs and max_nodes_per_job in one,
// each holding its latest report without hang evidence (a report is at most
// kMaxReportBytes); at most max_history_per_job history entries per job in
// memory, of which the newest kEvidenceKeptInMemory keep their evidence.
//
// Thin: the core never answers a report with anything an agent acts on, and
// nothing here waits for an agent.
//
// Threading: thread-safe; one mutex. The history sink is called after the
// mutex is released, from the thread that made the report (or Sweep()).
#ifndef TRAINLET_CONTROLLER_CONTROLLER_CORE_H_
#define TRAINLET_CONTROLLER_CONTROLLER_CORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

// One history entry of one job.
struct HistoryRecord {
  std::string job_id;
  v1::HistoryEntry entry;
};

// Where history goes to survive a restart (history_store.h; a fake in tests).
class HistorySink {
 public:
  virtual ~HistorySink() = default;
  // Called in the order the core made the entries of one report. An error
  // is logged by the core (rate-limited) and the entry stays in memory.
  virtual absl::Status Append(const std::vector<HistoryRecord>& records) = 0;
};

struct ControllerOptions {
  int max_jobs = 256;
  int max_nodes = 8192;  // over all jobs.
  int max_nodes_per_job = 4096;
  int max_history_per_job = 256;  // in memory; the store has its own retention.
  absl::Duration stale_after = absl::Seconds(15);
  absl::Duration forget_after = absl::Hours(1);
};

// How long a restart whose first reports name no cause (a node whose own
// workers were fine) waits for one that does (the failing node's), before it
// is recorded as "no node reported a cause".
inline constexpr absl::Duration kRestartCauseWait = absl::Seconds(5);

// History entries of a job that keep their hang evidence in memory (the
// store keeps all of it).
inline constexpr int kEvidenceKeptInMemory = 8;

class ControllerCore {
 public:
  // `clock` (wall time: ages are shown to people and history carries Unix
  // times) and `history` (may be null) must outlive the core.
  ControllerCore(ControllerOptions options, Clock* clock, HistorySink* history);

  // Puts back the history a previous controller kept (oldest first), as
  // jobs with no nodes (STALE) until their agents report. Call before the
  // first report. Beyond the caps, the oldest jobs and entries are left out.
  void Restore(const std::vector<HistoryRecord>& records);

  // An agent's report. InvalidArgument (ValidateHealthReport),
  // FailedPrecondition for a fenced incarnation, ResourceExhausted when the
  // job or node caps are reached. A report older than one already applied
  // (lower sequence) is ignored (OK).
  absl::Status Report(const v1::HealthReport& report);

  // Marks nodes stale (a NODE_STALE history entry each) and forgets those
  // stale for forget_after. The service runs it every second.
  void Sweep();

  v1::ListJobsResponse ListJobs() const;
  // NotFound naming the job when it is unknown.
  absl::StatusOr<v1::GetStatusResponse> GetStatus(absl::string_view job_id) const;

  struct Stats {
    int jobs = 0;
    int nodes = 0;
    int64_t reports = 0;           // applied.
    int64_t reports_rejected = 0;  // refused.
    int64_t history_entries = 0;   // in memory.
  };
  Stats stats() const;

 private:
  struct Node {
    v1::HealthReport latest;  // without hang_evidence.
    absl::Time last_report;
    absl::Duration stale_window;
    bool stale = false;
    uint64_t last_event_id = 0;
    std::vector<uint64_t> fenced;  // earlier incarnations, the newest last (at most 4).
  };
  struct PendingRestart {
    uint64_t round = 0;
    std::string node_id;  // the first node that reported the round.
    absl::Time at;        // when it happened.
    absl::Time noted;     // when the core learnt of it (clock_).
  };
  struct Job {
    std::map<std::string, Node> nodes;
    std::deque<v1::HistoryEntry> history;
    uint64_t round = 0;
    uint64_t last_restart_round = 0;
    // A restart whose cause no report has given yet (kRestartCauseWait).
    std::optional<PendingRestart> pending_restart;
    int64_t restarts = 0;
    int64_t hangs = 0;
    absl::Time last_heard = absl::InfinitePast();
  };

  absl::Status ReportLocked(const v1::HealthReport& report, std::vector<HistoryRecord>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds or makes room for `job_id`; null when every job is active.
  Job* JobForLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A restart into `round` learnt from `node_id`: recorded at once with a
  // cause, else held (pending) until a node gives one or kRestartCauseWait.
  void NoteRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                         const std::string& node_id, absl::Time at, std::string cause,
                         std::vector<HistoryRecord>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushPendingRestartLocked(const std::string& job_id, Job* job,
                                 std::vector<HistoryRecord>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddHistoryLocked(const std::string& job_id, Job* job, v1::HistoryEntry entry,
                        std::vector<HistoryRecord>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobSummary SummaryLocked(const std::string& job_id, const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(const std::vector<HistoryRecord>& records);

  const ControllerOptions options_;
  Clock* const clock_;
  HistorySink* const history_;
  LogLimiter reject_log_;
  LogLimiter sink_log_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  int nodes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t history_entries_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_CONTROLLER_CORE_H_

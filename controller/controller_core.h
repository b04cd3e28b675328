// The controller's core: what every agent's health reports say about its
// job, kept in memory and bounded, with no gRPC and no HTTP. The gRPC adapter
// (controller_service.h) feeds it reports and asks it for views
// (controller/snapshot.h renders them); the history store (history_store.h)
// keeps what happened and each job's summary across controller restarts,
// through the HistorySink seam. Thin: it never answers a report with
// anything an agent acts on, and nothing here waits for an agent. The
// design is in docs/controller.md: the node and job states below, who may
// write what, what the answers carry, what is kept and its bounds.
//
//          report          no report for max(stale_after, 3 report intervals)
//   (new) --------> FRESH --------------------------------------> STALE
//                   |  ^                                          |  |
//                   |  +----------------- report -----------------+  |
//                   | lost by the coordinator, or the job went on    |
//                   v to a later round (or finished) without it      v
//                  LOST (last state kept, counted nowhere) <---------+
//                   +--> a report of a later round: FRESH again
//   A job: ACTIVE (a member node FRESH) <--> STALE (none), until every
//   member is DONE or the coordinator's verdict: SUCCEEDED / FAILED, sticky
//   (a new incarnation in round 1 then begins a new run of it).
//
// Threading: thread-safe; one mutex. The history sink is called after the
// mutex is released, from the thread that made the report (or Sweep()).
#ifndef TRAINLET_CONTROLLER_CONTROLLER_CORE_H_
#define TRAINLET_CONTROLLER_CONTROLLER_CORE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "controller/goodput.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

// One history entry of one job.
struct HistoryRecord {
  std::string job_id;
  v1::HistoryEntry entry;
};

// What the core hands its sink at once: new history entries, and the
// summaries of jobs that changed (JobRecord, see controller.proto).
struct HistoryBatch {
  std::vector<HistoryRecord> entries;
  std::vector<std::pair<std::string, v1::JobRecord>> jobs;
  bool empty() const { return entries.empty() && jobs.empty(); }
};

// What a previous controller kept, as the store loads it at start: the
// summaries of the newest jobs and their newest entries, oldest first,
// evidence cut to kEvidenceSummaryBytes (evidence_bytes says how long).
struct StoredHistory {
  std::vector<std::pair<std::string, v1::JobRecord>> jobs;
  std::vector<HistoryRecord> entries;
};

// Where history goes to survive a restart (history_store.h; a fake in tests).
class HistorySink {
 public:
  virtual ~HistorySink() = default;
  // Called in the order the core made the entries. An error is logged by
  // the core (rate-limited) and the entries stay in memory.
  virtual absl::Status Append(const HistoryBatch& batch) = 0;
  // The whole evidence of entry `seq` of `job_id`; NotFound when there is
  // none.
  virtual absl::StatusOr<std::string> Evidence(const std::string& job_id, int64_t seq) {
    return absl::NotFoundError("no history database (--db)");
  }
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

// History entries of a job that keep their whole hang evidence in memory
// (the store keeps all of it), and the evidence in memory over all jobs.
inline constexpr int kEvidenceKeptInMemory = 4;
inline constexpr int64_t kMaxEvidenceBytesInMemory = 4 << 20;
// What an entry keeps of evidence that is no longer whole in memory.
inline constexpr size_t kEvidenceSummaryBytes = 256;

// Rounds a report may be ahead of the coordinator's view (or, without one,
// of the job's round).
inline constexpr uint64_t kMaxRoundStep = 4;
// How long after the job reached a round a node still in an older one
// counts as a member of the job (its report of the new round on its way).
inline constexpr absl::Duration kMembershipGrace = absl::Seconds(2);

// What answers (GetStatus, hence the views) and refusals show of an
// incarnation: its high 32 bits, as the agent's log prefix does
// (inc=1a2b3c4d), the low ones zero. The whole incarnation is what lets a
// report write its node's row, so nothing the controller says hands it out.
inline constexpr uint64_t ShownIncarnation(uint64_t incarnation) {
  return incarnation & 0xffffffff00000000ULL;
}

// Rounds kept per job (the timeline), in memory and in the store.
inline constexpr int kRoundsKept = 64;

// The progress series of a job.
inline constexpr int kSeriesPoints = 240;
inline constexpr int kSeriesFields = 4;  // numeric progress fields kept.
inline constexpr absl::Duration kSeriesEvery = absl::Seconds(5);

// Effectful events (HANG, RESTART, FINISHED) a node may send in a burst,
// and how often one more is allowed after it.
inline constexpr int kNodeEventBurst = 8;
inline constexpr absl::Duration kNodeEventEvery = absl::Seconds(5);

// A finished job's summary (JobRecord) is saved at once; a running one's at
// most this often.
inline constexpr absl::Duration kJobSaveEvery = absl::Seconds(30);

// Nodes a JobRecord keeps (failed and lost ones first, then by rank), the
// failed and hung workers it keeps of each, and its size: nodes past it are
// left out.
inline constexpr int kNodesStored = 256;
inline constexpr int kWorkersStoredPerNode = 16;
inline constexpr size_t kMaxJobRecordBytes = 512 * 1024;
// A job's summary is saved at once (a new round, a lost node, the verdict)
// at most this often; what changes in between is saved by the next Sweep.
inline constexpr absl::Duration kJobSaveAtOnceEvery = absl::Seconds(1);

// Nodes a job's summary names of those whose preflight failed a check
// (JobSummary.preflight_failed_nodes; nodes_preflight_failed counts all).
inline constexpr int kPreflightFailedNodesNamed = 16;

// The command line the core keeps per job.
inline constexpr size_t kMaxCommandLength = 1024;

class ControllerCore {
 public:
  // `clock` (wall time: ages are shown to people and history carries Unix
  // times) and `history` (may be null) must outlive the core.
  ControllerCore(ControllerOptions options, Clock* clock, HistorySink* history);

  // Puts back what a previous controller kept. Jobs come back with their
  // verdict, root cause, rounds, counts, command and times, and their nodes
  // as they last were (restored, stale) until their agents report. Call
  // before the first report. Beyond the caps, the oldest jobs and entries
  // are left out.
  void Restore(const StoredHistory& stored);

  // An agent's report, within "Who may write what" (docs/controller.md):
  // a node's row belongs to one incarnation, replaced only through a round
  // the old one is not in (kMembershipGrace); rounds move at most
  // kMaxRoundStep past the coordinator's view; events apply once, rate-limited
  // per node (kNodeEventBurst). InvalidArgument (ValidateHealthReport, a round too
  // far ahead), FailedPrecondition for an incarnation that is not the
  // node's (fenced, or not admitted by a round), ResourceExhausted when the
  // job or node caps are reached or the report is too large. A report older
  // than one already applied (lower sequence) is ignored (OK).
  absl::Status Report(const v1::HealthReport& report);

  // Marks nodes stale (a NODE_STALE history entry each) and lost (left in
  // an older round), forgets those stale for forget_after, records
  // restarts whose cause never came, and saves the summaries of jobs that
  // changed. The service runs it every second.
  void Sweep();
  // Saves the summary of every job that changed since it was last saved
  // (the host calls it at shutdown).
  void Flush();

  // What the answers carry (root cause, waiting, member counts, lost and
  // restored nodes, the round timeline, the progress series):
  // docs/controller.md, "What the controller keeps".
  v1::ListJobsResponse ListJobs() const;
  // NotFound naming the job when it is unknown.
  absl::StatusOr<v1::GetStatusResponse> GetStatus(absl::string_view job_id) const;
  // The whole evidence of history entry `seq` of a job: from memory, else
  // from the store. NotFound when there is none (or no longer any).
  absl::StatusOr<std::string> Evidence(absl::string_view job_id, int64_t seq) const;

  struct Stats {
    int jobs = 0;
    int nodes = 0;
    int64_t reports = 0;           // applied.
    int64_t reports_rejected = 0;  // refused.
    int64_t history_entries = 0;   // in memory.
    int64_t events_dropped = 0;    // over a node's rate limit, or repeated.
    int64_t evidence_bytes = 0;    // in memory.
  };
  Stats stats() const;

 private:
  // Per-node allowance of effectful events.
  struct Allowance {
    double tokens = kNodeEventBurst;
    absl::Time at = absl::InfinitePast();
  };
  struct Node {
    v1::HealthReport latest;  // without hang_evidence and events.
    absl::Time last_report = absl::InfinitePast();
    absl::Duration stale_window;
    bool stale = false;
    bool lost = false;
    absl::Time lost_at;
    uint64_t lost_round = 0;  // its round when it was lost.
    std::string lost_reason;
    bool restored = false;
    // First heard of after the job's verdict (a late goodbye): it changes
    // none of the job's causes.
    bool late = false;
    uint64_t last_event_id = 0;
    std::vector<uint64_t> fenced;  // earlier incarnations, the newest last (at most 4).
    // Its incarnation took the row while the one before still reported
    // (only kMembershipGrace let it in): that one, reporting the job's
    // round, takes it back.
    bool on_grace = false;
    Allowance allowance;
    // Fingerprints of its latest effectful events (de-duplication).
    std::array<uint64_t, 8> recent_events{};
    int next_recent = 0;
  };
  struct PendingRestart {
    uint64_t round = 0;
    std::string node_id;  // the first node that reported the round.
    absl::Time at;        // when it happened.
    absl::Time noted;     // when the core learnt of it (clock_).
  };
  struct SeriesPoint {
    int64_t at_ms = 0;
    int64_t step = -1;
    double rate = -1;
    std::array<double, kSeriesFields> values{};
  };
  struct Series {
    std::vector<std::string> keys;
    std::deque<SeriesPoint> points;
    absl::Duration every = kSeriesEvery;
    uint64_t round = 0;  // of the last point.
    std::string source;  // the node whose progress it follows.
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
    int64_t failures = 0;  // rounds ended by a failure (not a scale-up).
    absl::Time last_heard = absl::InfinitePast();
    absl::Time started = absl::InfinitePast();
    absl::Time ended = absl::InfinitePast();
    // SUCCEEDED or FAILED once decided; STATE_UNSPECIFIED before.
    v1::JobSummary::State verdict = v1::JobSummary::STATE_UNSPECIFIED;
    std::string command;
    int min_nodes = 0;
    int max_nodes = 0;
    int nnodes = 0;
    int world_size = 0;
    std::deque<v1::RoundInfo> rounds;
    Series series;
    // The coordinator's view and the node it comes from.
    std::string host;
    bool has_view = false;
    v1::CoordinatorView view;  // without restarts.
    int64_t next_seq = 1;
    bool restored = false;
    int64_t restored_step = -1;  // the step the database had.
    // Its summary changed since it was last saved (save_now: at once, not
    // at kJobSaveEvery); when it was.
    bool dirty = false;
    bool save_now = false;
    absl::Time saved = absl::InfinitePast();
    int64_t evidence_bytes = 0;  // in memory.
    // Its wall time by phase, and the restart under way (goodput.h).
    GoodputLedger goodput;
  };

  absl::Status ReportLocked(const v1::HealthReport& report, HistoryBatch* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds or makes room for `job_id`; null when every job is active.
  Job* JobForLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the job heard from longest ago that has no fresh node, other
  // than `keep`; false when there is none.
  bool EvictOneJobLocked(const std::string& keep, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `report` may write the row of its node (see "Who may write
  // what"); the reason when not.
  absl::Status AdmitLocked(const Job& job, const Node* node, const v1::HealthReport& report,
                           absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t RoundHorizonLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's coordinator view from `node_id`'s report: nodes it lists lost.
  void TakeViewLocked(const std::string& job_id, Job* job, const std::string& node_id,
                      const v1::CoordinatorView& view, absl::Time now, HistoryBatch* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkLostLocked(const std::string& job_id, Job* job, const std::string& node_id, Node* node,
                      absl::Time now, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyEventsLocked(const std::string& job_id, Job* job, const std::string& node_id,
                         Node* node, const v1::HealthReport& report, absl::Time now,
                         HistoryBatch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job reached `round` (a member's report, or the coordinator's view).
  void EnterRoundLocked(const std::string& job_id, Job* job, uint64_t round,
                        const std::string& node_id, const v1::HealthReport& report, absl::Time now,
                        HistoryBatch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A restart into `round` learnt from `node_id`: recorded at once with a
  // cause, else held (pending) until a node gives one or kRestartCauseWait.
  void NoteRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                         const std::string& node_id, absl::Time at, std::string cause,
                         HistoryBatch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushPendingRestartLocked(const std::string& job_id, Job* job, HistoryBatch* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                           const std::string& node_id, absl::Time at, std::string cause,
                           HistoryBatch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A candidate for why `round` ended; the earliest of the most telling
  // kind wins.
  void NoteCauseLocked(Job* job, v1::RootCause cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteWorkerCausesLocked(Job* job, const std::string& node_id, const v1::HealthReport& report,
                              absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the verdict once every member is done (or gone).
  void UpdateVerdictLocked(const std::string& job_id, Job* job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SampleLocked(Job* job, const v1::HealthReport& report, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new run of a finished job: nodes, rounds, verdict and series start
  // afresh (the history stays).
  void NewRunLocked(const std::string& job_id, Job* job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Goodput (goodput.h, docs/goodput.md): what this report says of the
  // job's phases (`changed`: its state or round did).
  void GoodputOfReportLocked(Job* job, const v1::HealthReport& report, bool changed, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job has fewer nodes that can run than its minimum.
  bool TooFewNodesLocked(const Job& job, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the failure that ended `round` happened: its root cause's time
  // (for a hang or a lost node, the round's last step when earlier); `or`
  // when unknown.
  absl::Time FailedAtLocked(const Job& job, uint64_t round, absl::Time otherwise) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the ledger's restart under way into its round's record.
  void SyncRestartLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PutRestartLocked(Job* job, uint64_t round, const v1::RestartTimes& times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddHistoryLocked(const std::string& job_id, Job* job, v1::HistoryEntry entry,
                        HistoryBatch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the evidence in memory within its bounds.
  void BoundEvidenceLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a job's goodput is counted to in answers: `now`, or its last
  // report while no node reports (STALE).
  absl::Time GoodputUntilLocked(const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobSummary SummaryLocked(const std::string& job_id, const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobRecord RecordLocked(const std::string& job_id, const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the summaries of dirty jobs due for saving (all with `all`).
  void SaveDueLocked(absl::Time now, bool all, HistoryBatch* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(const HistoryBatch& batch);

  const ControllerOptions options_;
  Clock* const clock_;
  HistorySink* const history_;
  LogLimiter reject_log_;
  LogLimiter sink_log_;
  LogLimiter event_log_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  int nodes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t history_entries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t events_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evidence_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_CONTROLLER_CORE_H_

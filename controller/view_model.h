// What the controller's views show (the page at `/`, `/api/jobs`, `/metrics`
// and `trainlet status`): plain structs with no gRPC, no HTTP and no
// protobuf, so that the renderers (views.h) are pure functions and the HTTP
// adapter (http_server.h) depends on nothing but this, and the one seam the
// HTTP adapter reads them through (ViewSource; the controller's core is
// adapted by snapshot.h's CoreViewSource). `trainlet status` parses the
// views back from JSON, or adapts the gRPC answers with snapshot.h.
//
// Every string here came from the network (an agent's report): the
// renderers escape it for their format and bound it; nothing here is
// trusted. Times are Unix milliseconds (wall clock, as the agents report
// them) and durations milliseconds; a negative duration or step means
// "unknown".
//
// Threading: plain values; a snapshot is built by one thread and then only
// read. A ViewSource is called from several threads at once.
#ifndef TRAINLET_CONTROLLER_VIEW_MODEL_H_
#define TRAINLET_CONTROLLER_VIEW_MODEL_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::controller {

enum class JobState { kUnknown, kActive, kStale, kSucceeded, kFailed };
enum class WorkerState { kUnknown, kRunning, kSucceeded, kFailed, kHung, kStopped };
// The agent's own state (its round): joining, running, ... done.
enum class AgentState { kUnknown, kJoining, kRunning, kAwaitingVerdict, kStopping, kDone };
// kDegraded: corrected errors or a pending row remap; kFatal: the agent
// judged the GPU unusable (the node leaves an elastic job).
enum class GpuStatus { kUnknown, kHealthy, kDegraded, kFatal };

// Lowercase names, as the JSON and the table show them ("active", "hung").
const char* JobStateName(JobState state);
const char* WorkerStateName(WorkerState state);
const char* AgentStateName(AgentState state);
const char* GpuStatusName(GpuStatus status);

struct WorkerView {
  int local_rank = 0;
  int rank = -1;  // global rank; -1 unknown.
  int pid = 0;    // 0 when not running.
  // kStopped: the agent stopped it (a round ended elsewhere); shown as
  // stopped, never as a failure, whatever its exit code.
  WorkerState state = WorkerState::kUnknown;
  int exit_code = 0;           // once exited; 128+N for signal N.
  int restarts = 0;            // restarts of this worker slot in the agent's life.
  int64_t exited_unix_ms = 0;  // 0 while it runs or unknown.
};

struct ProgressView {
  bool known = false;            // false: no worker reported progress yet.
  int64_t step = -1;             // -1: the line had no step.
  int local_rank = -1;           // the worker that wrote it; -1 unknown.
  double steps_per_second = -1;  // -1: unknown (fewer than two reports).
  int64_t age_ms = -1;           // since the worker wrote it, at the snapshot.
  // The progress line's other fields (loss=0.31 ...), in the line's order.
  std::vector<std::pair<std::string, std::string>> fields;
};

struct GpuView {
  int index = 0;
  std::string uuid;
  GpuStatus status = GpuStatus::kUnknown;
  std::string reason;  // empty when healthy.
};

// One preflight check's answer (docs/preflight.md): its name (a fixed
// label, [a-z0-9_]{1,32}), "pass", "fail" or "skipped", and why.
enum class CheckOutcome { kUnknown, kPass, kFail, kSkipped };
const char* CheckOutcomeName(CheckOutcome outcome);  // "pass", "fail", "skipped".

struct PreflightCheckView {
  std::string check;
  CheckOutcome outcome = CheckOutcome::kUnknown;
  std::string reason;
  double value = 0;  // measured, in `unit`, against `threshold`; 0 where none applies.
  std::string unit;
  double threshold = 0;
};

// One link the node measured to a neighbour.
struct PreflightLinkView {
  std::string to_node;
  double bandwidth_bytes_per_second = 0;  // 0 when not measured.
  double rtt_seconds = 0;                 // 0 unknown.
  std::string error;                      // empty when measured.
};

// The node's latest preflight: every check's answer, in the agent's order.
struct PreflightView {
  bool known = false;  // false: the node sent none (older agent, --preflight=off, not yet).
  uint64_t round = 0;  // the round it checked.
  int64_t started_unix_ms = 0;
  int64_t duration_ms = 0;
  std::vector<PreflightCheckView> checks;
  std::vector<PreflightLinkView> links;
  // Counted from `checks`.
  int passed() const { return Count(CheckOutcome::kPass); }
  int failed() const { return Count(CheckOutcome::kFail); }
  int skipped() const { return Count(CheckOutcome::kSkipped); }
  int Count(CheckOutcome outcome) const {
    int n = 0;
    for (const PreflightCheckView& c : checks) n += c.outcome == outcome;
    return n;
  }
};

struct NodeView {
  std::string node_id;
  int node_rank = -1;          // -1 before the first round.
  uint64_t incarnation = 0;    // shown in hex.
  bool up = false;             // reported within its staleness window.
  int64_t report_age_ms = -1;  // since its latest report arrived.
  // How late its latest report arrived (received minus sent, across two
  // clocks, so only roughly right); -1 unknown.
  int64_t report_lag_ms = -1;
  AgentState agent_state = AgentState::kUnknown;
  uint64_t round = 0;
  int restart_count = 0;  // the agent's restarts.
  std::string last_failure;
  // Where it sits, "zone=z1,switch=s0" widest first (docs/topology.md,
  // "Rank order"); empty: it said nothing.
  std::string topology;
  int exit_code = -1;  // once done; -1 before.
  uint64_t agent_rss_bytes = 0;
  std::vector<WorkerView> workers;  // ranks are the workers' `rank`.
  ProgressView progress;
  std::vector<GpuView> gpus;
  PreflightView preflight;
  // The coordinator lost it: what it shows is its last state (greyed); it
  // counts in no total and its rank is free.
  bool lost = false;
  int64_t lost_at_unix_ms = 0;
  std::string lost_reason;
  // Its last state from the history database; no report since the
  // controller started.
  bool restored = false;
};

// What one restart cost, phase by phase (docs/goodput.md): the same
// segments of the timeline the job's GoodputView adds up.
struct RestartTimesView {
  bool known = false;
  int64_t failed_unix_ms = 0;  // when the failure happened.
  int64_t detection_ms = 0;
  int64_t restart_ms = 0;
  int64_t waiting_ms = 0;
  int64_t rewarm_ms = 0;
  int64_t redone_ms = 0;
  int64_t failed_at_step = -1;     // -1 unknown.
  int64_t resumed_from_step = -1;  // -1 unknown.
  int64_t redone_steps = -1;       // -1 unknown.
  bool done = false;               // the durations are final.
  std::string node_id;             // who failed; may be empty.
  int rank = -1;                   // the failed worker's global rank; -1 unknown or none.
  int64_t lost_ms() const { return detection_ms + restart_ms + waiting_ms + rewarm_ms + redone_ms; }
};

// The phases of a job's wall time (docs/goodput.md), in the order the views
// show them; GoodputPhaseName gives "productive", "startup", ...
enum GoodputPhase {
  kPhaseProductive,
  kPhaseStartup,
  kPhaseWaiting,
  kPhaseDetection,
  kPhaseRestart,
  kPhaseRewarm,
  kPhaseRedone,
  kGoodputPhases
};
const char* GoodputPhaseName(int phase);

// A job's wall time by phase (they add up to wall_ms) and its ETTR.
struct GoodputView {
  bool known = false;
  int64_t wall_ms = 0;
  std::array<int64_t, kGoodputPhases> ms{};  // by GoodputPhase.
  double ettr = -1;                          // productive / wall; -1 unknown.
  std::string phase;                         // the phase now: a name above, or "ended".
  int64_t phase_since_unix_ms = 0;
};

// A restart of the job (a new round) and why.
struct RestartView {
  uint64_t round = 0;
  int64_t at_unix_ms = 0;
  std::string node_id;  // who reported it; may be empty.
  std::string cause;
  RestartTimesView times;  // what it cost (its round's).
};

// A worker declared hung: the verdict and a short summary of the evidence
// (the whole evidence: EvidenceView, `/api/jobs/JOB/evidence`).
struct HangView {
  uint64_t round = 0;
  int64_t at_unix_ms = 0;
  std::string node_id;
  std::string verdict;
  std::string evidence_summary;
  int64_t seq = 0;             // the history entry's number in its job; 0 unknown.
  int64_t evidence_bytes = 0;  // the whole evidence's size.
  bool suspect = false;        // the job's root cause names this hang.
};

// A hang's whole evidence (every line the agent sent).
struct EvidenceView {
  uint64_t round = 0;
  int64_t at_unix_ms = 0;
  std::string node_id;
  std::string verdict;
  std::string evidence;
  int64_t seq = 0;
};

// Why a round ended or the job failed: "rank 2 on node-b exited 3".
struct RootCauseView {
  bool known = false;
  std::string kind;  // worker-failed, worker-hung, node-lost, agent-failed, other.
  std::string node_id;
  int rank = -1;
  int local_rank = -1;
  int exit_code = -1;
  int64_t at_unix_ms = 0;
  uint64_t round = 0;
  std::string text;  // one line, without the time.
};

// A job waiting for nodes ("waiting for 1 more node (min 2), giving up in
// 4m50s").
struct WaitingView {
  bool waiting = false;
  int nodes = 0;      // waiting.
  int min_nodes = 0;  // 0 unknown.
  int max_nodes = 0;
  int64_t gives_up_unix_ms = 0;  // 0 unknown.
  uint64_t round = 0;
};

// One round of the job's timeline.
struct RoundView {
  uint64_t round = 0;
  int64_t started_unix_ms = 0;
  int64_t ended_unix_ms = 0;  // 0 while it runs.
  int nodes = 0;
  int world_size = 0;
  std::string restart_cause;  // why the restart that opened it happened; empty for the first.
  RootCauseView ended_by;     // why it ended; unknown while it runs or when it succeeded.
  RestartTimesView restart;   // what the restart that opened it cost; unknown for the first.
};

// The job's progress over time (the controller's memory only).
struct SeriesPointView {
  int64_t at_unix_ms = 0;
  int64_t step = -1;
  double steps_per_second = -1;
  std::vector<double> values;  // one per SeriesView::keys; NaN when missing.
};
struct SeriesView {
  std::vector<std::string> keys;        // numeric progress fields ("loss").
  std::vector<SeriesPointView> points;  // oldest first.
  int64_t every_ms = 0;
};

// Job-level figures the views derive from the nodes (TotalsOf; one
// definition for the table, the page's JSON and the metrics). Lost nodes
// count in `nodes_lost` only.
struct JobTotals {
  int nodes = 0;  // members (not lost).
  int nodes_up = 0;
  int nodes_lost = 0;
  int workers = 0;
  int workers_running = 0;
  bool progress_known = false;
  int64_t progress_step = -1;    // the highest step any member reported.
  double steps_per_second = -1;  // of the member with the highest step.
  int64_t progress_age_ms = -1;  // the freshest progress of any member; -1 once finished.
  int64_t report_lag_ms = -1;    // the largest lag of the members that are up.
  int gpus_fatal = 0;
  int gpus_degraded = 0;
  // Members whose latest preflight failed a check, and the first
  // kPreflightNodesNamed of them (in the order the nodes come).
  int nodes_preflight_failed = 0;
  std::vector<std::string> preflight_failed_nodes;
};

// A node whose workers the others wait for (--slow-nodes,
// docs/slow-nodes.md), as the coordinator named it.
struct SlowNodeView {
  std::string node_id;
  std::string cause;     // "cpu", "network", "progress" or "gpu".
  std::string evidence;  // one line for a person.
  int64_t since_unix_ms = 0;
  int slowdown_percent = 0;  // how much slower the job runs for it, estimated.
};

// Nodes JobTotals::preflight_failed_nodes names (the controller's summary
// names as many: kPreflightFailedNodesNamed).
inline constexpr size_t kPreflightNodesNamed = 16;

struct JobView {
  std::string job_id;
  JobState state = JobState::kUnknown;
  uint64_t round = 0;  // the current round.
  int64_t rounds = 0;  // rounds opened so far.
  int nnodes = 0;      // as the agents were told; 0 unknown.
  int world_size = 0;
  int64_t last_report_unix_ms = 0;
  std::vector<NodeView> nodes;  // in node-rank order, then node id.
  int64_t restarts_total = 0;
  int64_t hangs_total = 0;
  int64_t failures_total = 0;         // worker failures recorded.
  std::vector<RestartView> restarts;  // the latest, oldest first.
  std::vector<HangView> hangs;        // the latest, oldest first.
  // The coordinator's view (from the agent that hosts it): nodes declared
  // lost and not back, oldest first (at most 64).
  std::vector<std::string> lost_nodes;
  // ... and the current round's slow nodes (at most 16).
  std::vector<SlowNodeView> slow_nodes;

  // Over all its nodes, even when `nodes` holds a page of them.
  JobTotals totals;
  // `nodes` is nodes [nodes_from, nodes_from + nodes.size()) of
  // nodes_total (members first, lost nodes last).
  int64_t nodes_total = 0;
  int64_t nodes_from = 0;

  int64_t started_unix_ms = 0;  // its first report; 0 unknown.
  int64_t ended_unix_ms = 0;    // when it succeeded or failed; 0 before.
  std::string command;          // the workers' command line.
  int min_nodes = 0;            // --nnodes MIN:MAX; 0 unknown.
  int max_nodes = 0;
  bool restored = false;     // from the history database; no report since.
  RootCauseView root_cause;  // the headline.
  WaitingView waiting;
  std::vector<RoundView> rounds_timeline;  // oldest first.
  GoodputView goodput;                     // its wall time by phase, and ETTR.
  SeriesView series;
};

struct ControllerSnapshot {
  int64_t now_unix_ms = 0;
  int64_t uptime_ms = 0;
  int64_t reports_received = 0;
  int64_t reports_rejected = 0;
  std::string version;        // trainlet's version.
  std::vector<JobView> jobs;  // in job-id order.
};

// The one seam of the views: what they show, asked for on each request of
// the HTTP views (http_server.h), from several threads at once. The
// controller's is snapshot.h's CoreViewSource; tests use a fixed snapshot.
class ViewSource {
 public:
  virtual ~ViewSource() = default;
  // The controller's figures and every job's summary (no nodes, restarts,
  // hangs, rounds or series; totals as far as known without the nodes).
  virtual ControllerSnapshot Summary() = 0;
  // The controller's figures alone (no jobs).
  virtual ControllerSnapshot Figures() {
    ControllerSnapshot s = Summary();
    s.jobs.clear();
    return s;
  }
  // One job, its totals over all its nodes, and `max_nodes` of its nodes
  // from `first_node` (JobView::nodes_from/nodes_total). NotFound naming
  // the job when it is unknown.
  virtual absl::StatusOr<JobView> Job(absl::string_view job_id, size_t first_node,
                                      size_t max_nodes) = 0;
  // Every hang of the job, with its whole evidence, oldest first. NotFound.
  virtual absl::StatusOr<std::vector<EvidenceView>> Evidence(absl::string_view job_id) = 0;
};

// The totals of `job` over its `nodes` (all of them: call it where the
// whole list is at hand). A finished job has no progress age.
JobTotals TotalsOf(const JobView& job);
// `node` added to `totals` (TotalsOf one node at a time).
void AddToTotals(const NodeView& node, JobTotals* totals);
// The headline "rank 2 on node-b exited 3 at 18:34:53Z" (UTC).
std::string HeadlineOf(const RootCauseView& cause);
// "waiting for 1 more node (min 2), giving up in 4m50s" at `now_unix_ms`.
std::string WaitingText(const WaitingView& waiting, int64_t now_unix_ms);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_VIEW_MODEL_H_

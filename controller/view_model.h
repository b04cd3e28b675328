// What the controller's views show (the page at `/`, `/api/jobs`, `/metrics`
// and `trainlet status`): plain structs with no gRPC, no HTTP and no
// protobuf, so that the renderers (views.h) are pure functions and the HTTP
// adapter (http_server.h) depends on nothing but this. The controller's core
// is adapted to a ControllerSnapshot by one function the host provides
// (HttpServer's SnapshotFn); `trainlet status` parses one back from JSON.
//
// Every string here came from the network (an agent's report): the
// renderers escape it for their format and bound it; nothing here is
// trusted. Times are Unix milliseconds (wall clock, as the agents report
// them) and durations milliseconds; a negative duration or step means
// "unknown".
//
// Threading: plain values; a snapshot is built by one thread and then only
// read.
#ifndef TRAINLET_CONTROLLER_VIEW_MODEL_H_
#define TRAINLET_CONTROLLER_VIEW_MODEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  WorkerState state = WorkerState::kUnknown;
  int exit_code = 0;  // once exited; 128+N for signal N.
  int restarts = 0;   // restarts of this worker slot in the agent's life.
};

struct ProgressView {
  bool known = false;            // false: no worker reported progress yet.
  int64_t step = -1;             // -1: the line had no step.
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
  int exit_code = -1;  // once done; -1 before.
  uint64_t agent_rss_bytes = 0;
  std::vector<WorkerView> workers;  // ranks are the workers' `rank`.
  ProgressView progress;
  std::vector<GpuView> gpus;
};

// A restart of the job (a new round) and why.
struct RestartView {
  uint64_t round = 0;
  int64_t at_unix_ms = 0;
  std::string node_id;  // who reported it; may be empty.
  std::string cause;
};

// A worker declared hung: the verdict and a short summary of the evidence
// (the full evidence stays in the controller's history).
struct HangView {
  uint64_t round = 0;
  int64_t at_unix_ms = 0;
  std::string node_id;
  std::string verdict;
  std::string evidence_summary;
};

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
};

struct ControllerSnapshot {
  int64_t now_unix_ms = 0;
  int64_t uptime_ms = 0;
  int64_t reports_received = 0;
  int64_t reports_rejected = 0;
  std::string version;        // trainlet's version.
  std::vector<JobView> jobs;  // in job-id order.
};

// Job-level figures the views derive from the nodes (one definition for the
// table, the page's JSON and the metrics).
struct JobTotals {
  int nodes = 0;
  int nodes_up = 0;
  int workers = 0;
  int workers_running = 0;
  bool progress_known = false;
  int64_t progress_step = -1;    // the highest step any node reported.
  double steps_per_second = -1;  // of the node with the highest step.
  int64_t progress_age_ms = -1;  // the freshest progress of any node.
  int64_t report_lag_ms = -1;    // the largest lag of the nodes that are up.
  int gpus_fatal = 0;
  int gpus_degraded = 0;
};
JobTotals TotalsOf(const JobView& job);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_VIEW_MODEL_H_

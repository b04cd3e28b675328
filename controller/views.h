// The controller's views as text: the JSON documents of `/api/jobs` (every
// job's summary), `/api/jobs/JOB` (one job, its nodes a page at a time) and
// `/api/jobs/JOB/evidence` (every hang's whole evidence), the full document
// `trainlet status --json` prints, the Prometheus text exposition
// (`/metrics`), the table `trainlet status` prints, and the JSON read back
// (`trainlet status` fetches the documents). docs/controller-views.md lists
// every field and metric.
//
// Pure functions of the view model (view_model.h): no clock, no I/O.
// Everything in it came from the network, so each renderer escapes every
// string for its format, and bounds it.
//
// Threading: thread-safe (no state), except a PrometheusRenderer, which is
// one thread's.
#ifndef TRAINLET_CONTROLLER_VIEWS_H_
#define TRAINLET_CONTROLLER_VIEWS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/view_model.h"

namespace trainlet::controller {

// The documents' schema. 2: `/api/jobs` holds summaries (no nodes); a job's
// nodes come from `/api/jobs/JOB`, a page at a time.
inline constexpr int kViewsJsonSchema = 2;

// `/api/jobs`: the controller's figures and every job's summary: its state,
// times, command, root cause, waiting state and totals; no nodes, restarts
// or hangs (one line, UTF-8; invalid UTF-8 becomes U+FFFD; <, > and & are
// \u-escaped so that the document is safe inside HTML too).
std::string RenderJobsJson(const ControllerSnapshot& snapshot);

// `/api/jobs/JOB`: `job` with its nodes, restarts, hangs, rounds and
// series, under the controller's figures of `snapshot` (its jobs are not
// read). The nodes are written until the document reaches `max_bytes` (at
// least one is); `next_from` says where the next page starts (-1: none
// left). *nodes_written (may be null) says how many were.
std::string RenderJobJson(const ControllerSnapshot& snapshot, const JobView& job,
                          size_t max_bytes = SIZE_MAX, size_t* nodes_written = nullptr);

// Every job in full (`trainlet status --json`): the figures, then each job
// as RenderJobJson writes it, in `jobs`.
std::string RenderJson(const ControllerSnapshot& snapshot);

// `/api/jobs/JOB/evidence`.
std::string RenderEvidenceJson(absl::string_view job_id, const std::vector<EvidenceView>& hangs);

// The Prometheus text exposition format 0.0.4, with HELP and TYPE lines,
// each family's samples together. Per-worker series are at most
// kMaxWorkerSeries a family, passed or skipped preflight checks at most
// kMaxPreflightSeries (a failed check is always there); the counts left
// out are metrics.
inline constexpr int kMaxWorkerSeries = 16384;
inline constexpr int kMaxPreflightSeries = 16384;
class PrometheusRenderer {
 public:
  // The controller's figures of `snapshot` (its jobs are given to AddJob).
  explicit PrometheusRenderer(const ControllerSnapshot& snapshot);
  // One job with all its nodes (its totals as they are).
  void AddJob(const JobView& job);
  std::string Finish();

 private:
  struct Family {
    std::string type;
    std::string help;
    std::string samples;
  };
  Family& Of(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(Family& family, absl::string_view name,
              std::initializer_list<std::pair<absl::string_view, absl::string_view>> labels,
              absl::string_view value);

  std::string head_;
  std::vector<std::string> order_;
  std::map<std::string, Family, std::less<>> families_;
  int jobs_ = 0;
  int64_t worker_series_ = 0;
  int64_t worker_series_omitted_ = 0;
  int64_t preflight_series_ = 0;
  int64_t preflight_series_omitted_ = 0;
};
// RenderPrometheus of a snapshot whose jobs hold all their nodes.
std::string RenderPrometheus(const ControllerSnapshot& snapshot);

// The table `trainlet status` prints. With `job_id` non-empty, that job only
// (with its workers, rounds, restarts and hangs in full).
std::string RenderStatusTable(const ControllerSnapshot& snapshot, absl::string_view job_id = "");
// `trainlet status JOB --evidence`: every hang of the job, every line.
std::string RenderEvidenceText(absl::string_view job_id, const std::vector<EvidenceView>& hangs);

// Reads RenderJobsJson's or RenderJson's document back (the jobs' nodes
// when it has them). InvalidArgument naming what is wrong when `json` is
// not one (or is over `max_bytes`).
absl::StatusOr<ControllerSnapshot> ParseSnapshotJson(absl::string_view json,
                                                     size_t max_bytes = 64 << 20);
// Reads RenderJobJson's document back: the figures into *snapshot (no
// jobs), the job into *job, and its next page into *next_from (-1: none).
absl::Status ParseJobJson(absl::string_view json, ControllerSnapshot* snapshot, JobView* job,
                          int64_t* next_from, size_t max_bytes = 64 << 20);
absl::StatusOr<std::vector<EvidenceView>> ParseEvidenceJson(absl::string_view json,
                                                            size_t max_bytes = 64 << 20);

// Escaping, exposed for the tests.
std::string JsonQuote(absl::string_view text);
std::string PrometheusLabelValue(absl::string_view text);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_VIEWS_H_

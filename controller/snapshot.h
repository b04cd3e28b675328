// What the controller's views show, taken from its core: the one adapter
// from ControllerCore's answers (ListJobs, GetStatus: the same messages the
// gRPC service returns) to the views' plain model (view_model.h), and the
// ViewSource the HTTP views read (CoreViewSource). `trainlet status` uses
// the same functions on the answers it gets over gRPC.
//
// Bounded: a summary is ListJobs' (no node is copied); a job's detail copies
// that one job from the core (GetStatus) and converts only the page of its
// nodes that was asked for.
//
// Threading: thread-safe (the core and the tracker are).
#ifndef TRAINLET_CONTROLLER_SNAPSHOT_H_
#define TRAINLET_CONTROLLER_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "controller/controller_core.h"
#include "controller/step_rate.h"
#include "controller/view_model.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

// Characters of a hang's evidence the views show with the job; the whole is
// at EvidenceOf / `/api/jobs/JOB/evidence`.
inline constexpr size_t kEvidenceSummaryLength = 240;

// A job's summary from ListJobs (no nodes; totals the core counts).
JobView SummaryViewOf(const v1::JobSummary& summary, int64_t now_unix_ms);

// One job from GetStatus's answer at `now_unix_ms`: its totals over all its
// nodes, and nodes [first_node, first_node + max_nodes). `rates` (may be
// null) turns consecutive progress steps into steps per second.
JobView JobViewOf(const v1::GetStatusResponse& status, StepRateTracker* rates, int64_t now_unix_ms,
                  size_t first_node = 0, size_t max_nodes = SIZE_MAX);

// Every hang in GetStatus's history, oldest first, with the evidence it
// carries.
std::vector<EvidenceView> EvidenceOf(const v1::GetStatusResponse& status);

// The views of a ControllerCore.
class CoreViewSource : public ViewSource {
 public:
  // `clock` is wall time (the core's); `started` when the controller
  // started. All must outlive the source.
  CoreViewSource(const ControllerCore* core, StepRateTracker* rates, Clock* clock,
                 absl::Time started, std::string version)
      : core_(core),
        rates_(rates),
        clock_(clock),
        started_(started),
        version_(std::move(version)) {}

  ControllerSnapshot Summary() override;
  ControllerSnapshot Figures() override;
  absl::StatusOr<JobView> Job(absl::string_view job_id, size_t first_node,
                              size_t max_nodes) override;
  absl::StatusOr<std::vector<EvidenceView>> Evidence(absl::string_view job_id) override;

 private:
  const ControllerCore* const core_;
  StepRateTracker* const rates_;
  Clock* const clock_;
  const absl::Time started_;
  const std::string version_;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_SNAPSHOT_H_

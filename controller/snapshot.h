// What the controller's views show, taken from its core: the one adapter
// from ControllerCore's answers (ListJobs, GetStatus: the same messages the
// gRPC service returns) to the views' plain model (view_model.h). The HTTP
// adapter calls it for every request of `/`'s JSON, `/api/jobs` and
// `/metrics`.
//
// Threading: thread-safe (the core and the tracker are).
#ifndef TRAINLET_CONTROLLER_SNAPSHOT_H_
#define TRAINLET_CONTROLLER_SNAPSHOT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "controller/controller_core.h"
#include "controller/step_rate.h"
#include "controller/view_model.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

// Characters of a hang's evidence the views show; the history keeps it all.
inline constexpr size_t kEvidenceSummaryLength = 240;

// `now` (wall time) is the snapshot's; `started` when the controller
// started. `rates` turns consecutive progress steps into steps per second.
ControllerSnapshot SnapshotOf(const ControllerCore& core, StepRateTracker* rates, absl::Time now,
                              absl::Time started, const std::string& version);

// One job, from GetStatus's answer at `now_unix_ms` (exposed for tests).
JobView JobViewOf(const v1::GetStatusResponse& status, StepRateTracker* rates, int64_t now_unix_ms);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_SNAPSHOT_H_

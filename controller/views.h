// The controller's views as text: the JSON the page and `trainlet status
// --json` show (`/api/jobs`), the Prometheus text exposition (`/metrics`),
// and the table `trainlet status` prints; and the JSON read back into a
// snapshot (`trainlet status` fetches `/api/jobs`). docs/controller-views.md
// lists every field and metric.
//
// Pure functions of a ControllerSnapshot (view_model.h): no clock, no I/O.
// Everything in a snapshot came from the network, so each renderer escapes
// every string for its format, and bounds it.
//
// Threading: thread-safe (no state).
#ifndef TRAINLET_CONTROLLER_VIEWS_H_
#define TRAINLET_CONTROLLER_VIEWS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/view_model.h"

namespace trainlet::controller {

// The JSON document of `/api/jobs`, schema version 1 (one line, UTF-8;
// invalid UTF-8 becomes U+FFFD; <, > and & are \u-escaped so that the
// document is safe inside HTML too).
std::string RenderJson(const ControllerSnapshot& snapshot);

// The Prometheus text exposition format 0.0.4, with HELP and TYPE lines.
std::string RenderPrometheus(const ControllerSnapshot& snapshot);

// The table `trainlet status` prints. With `job_id` non-empty, that job only
// (with its workers, restarts and hangs in full).
std::string RenderStatusTable(const ControllerSnapshot& snapshot, absl::string_view job_id = "");

// Reads RenderJson's document back. InvalidArgument naming what is wrong
// when `json` is not one (or is over `max_bytes`).
absl::StatusOr<ControllerSnapshot> ParseSnapshotJson(absl::string_view json,
                                                     size_t max_bytes = 64 << 20);

// Escaping, exposed for the tests.
std::string JsonQuote(absl::string_view text);
std::string PrometheusLabelValue(absl::string_view text);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_VIEWS_H_

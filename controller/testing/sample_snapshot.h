// A fixed ControllerSnapshot for the views' tests and the fake controller
// (fake_controller_http.cc): "demo" with four nodes (one stale, one lost, a
// hung worker, a stopped one, a fatal GPU, restarts with causes, a rounds
// timeline, a series, its root cause, a passed preflight and one that
// failed two checks), "done" (succeeded an hour ago),
// "wait" (waiting for a node), and one whose strings need escaping in
// every format; totals set (TotalsOf). `tick` moves the progress on (step, ages), so
// that a page polling the fake controller sees values change.
//
// Test-only; thread-compatible.
#ifndef TRAINLET_CONTROLLER_TESTING_SAMPLE_SNAPSHOT_H_
#define TRAINLET_CONTROLLER_TESTING_SAMPLE_SNAPSHOT_H_

#include <cstdint>

#include "controller/view_model.h"

namespace trainlet::controller::testing {

ControllerSnapshot SampleSnapshot(int64_t tick = 0);

}  // namespace trainlet::controller::testing

#endif  // TRAINLET_CONTROLLER_TESTING_SAMPLE_SNAPSHOT_H_

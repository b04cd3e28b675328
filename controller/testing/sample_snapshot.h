// A fixed ControllerSnapshot for the views' tests and the fake controller
// (fake_controller_http.cc): two jobs, one with three nodes (one stale, a
// hung worker, a fatal GPU, restarts with causes), strings that need
// escaping in every format. `tick` moves the progress on (step, ages), so
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

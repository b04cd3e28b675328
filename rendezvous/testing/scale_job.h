// A whole job on the coordinator core, driven inline on the calling thread,
// for coordinator_scale_test (which counts the core's walks over its
// members) and bench/coordinator_scale.cc (which times it): every node joins
// with a tick after each join (as the 20 ms ticker gives while joins
// arrive), opens its stream, heartbeats three times, has its stream break and
// re-opens it, then succeeds; elastic, one node leaves first and the
// survivors re-join round 2. No gRPC, no threads of its own.
#ifndef TRAINLET_RENDEZVOUS_TESTING_SCALE_JOB_H_
#define TRAINLET_RENDEZVOUS_TESTING_SCALE_JOB_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainlet::rendezvous::testing {

struct ScaleJobCost {
  // CPU time of this process while the job ran (the core runs every
  // callback inline, so this is the core's).
  absl::Duration cpu;
  // Coordinator::MemberWalksForTest() at the end of the job.
  uint64_t member_walks = 0;
};

// The job with `nodes` nodes; an error names the step that did not go as
// planned (a join not answered, a round that did not close, no success).
absl::StatusOr<ScaleJobCost> RunScaleJob(int nodes, bool elastic);

}  // namespace trainlet::rendezvous::testing

#endif  // TRAINLET_RENDEZVOUS_TESTING_SCALE_JOB_H_

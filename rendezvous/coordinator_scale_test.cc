// Pins the coordinator core's complexity: a whole job (every node joins, with
// a tick after each join, opens its stream, heartbeats, has its stream break
// and re-opens it, then succeeds; and an elastic restart after one node
// leaves: rendezvous/testing/scale_job.h) with 10x the nodes must walk over
// its members no more often than the small job. A per-join, per-tick or
// per-heartbeat walk over the members makes the count grow with the nodes
// (and made the 10x job cost 83-92x the CPU). The count is exact on any
// machine; the CPU ratio itself (at most 15x for 10x the nodes) is measured
// by bench/coordinator_scale.cc (docs/benchmarks.md), not by a test sharing
// the machine with others.
#include <string>

#include "gtest/gtest.h"
#include "rendezvous/testing/scale_job.h"

namespace trainlet::rendezvous {
namespace {

using testing::RunScaleJob;
using testing::ScaleJobCost;

void ExpectWalksIndependentOfTheNodes(bool elastic) {
  constexpr int kSmall = 300;
  absl::StatusOr<ScaleJobCost> small = RunScaleJob(kSmall, elastic);
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<ScaleJobCost> large = RunScaleJob(10 * kSmall, elastic);
  ASSERT_TRUE(large.ok()) << large.status();
  ::testing::Test::RecordProperty("walks_small", static_cast<int>(small->member_walks));
  ::testing::Test::RecordProperty("walks_large", static_cast<int>(large->member_walks));
  EXPECT_LE(large->member_walks, small->member_walks)
      << kSmall << " nodes: " << small->member_walks << " walks over the members, " << 10 * kSmall
      << " nodes: " << large->member_walks;
  // A few per phase of the job, never one per node.
  EXPECT_LT(small->member_walks, kSmall / 10)
      << "walks over the members of a " << kSmall << "-node job";
}

TEST(CoordinatorScale, StaticJob_TenTimesTheNodes_NoMoreWalksOverTheMembers) {
  ExpectWalksIndependentOfTheNodes(/*elastic=*/false);
}

TEST(CoordinatorScale, ElasticRestart_TenTimesTheNodes_NoMoreWalksOverTheMembers) {
  ExpectWalksIndependentOfTheNodes(/*elastic=*/true);
}

}  // namespace
}  // namespace trainlet::rendezvous

// The coordinator core's complexity in CPU time: the whole job of
// rendezvous/testing/scale_job.h (every node joins with a tick after each
// join, opens its stream, heartbeats, re-opens a broken stream, succeeds;
// elastic: one node leaves and the survivors re-join) at --nodes and at 10x
// --nodes, static and elastic. Target: the 10x job costs at most 15x the CPU
// (a per-join walk over the members made it 83-92x, a walk of the parked
// joins on every tick 24-28x). coordinator_scale_test checks the same jobs'
// walks over the members, which are exact on any machine; this reports the
// ratio the walks stand for.
//
// CPU time of this process (the core runs inline), best of --runs, the sizes
// taken in turn so that both see the same heap and neighbours; freed memory
// stays in the heap, grown to the large job's size first, so that page
// faults are not counted as the core's. 300 and 3,000 nodes both fit in the
// CPU caches (at 10,000 and more, cache misses alone add 20-50% per lookup).
// Exits 0 when both ratios meet the target.
//
// Build and run (never part of ctest):
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINLET_BUILD_TESTS=OFF
//   ninja -C build-bench -j2 bench_coordinator_scale
//   build-bench/bench/bench_coordinator_scale [--nodes=300] [--runs=5]
#include <malloc.h>
#include <stdio.h>

#include <algorithm>
#include <string>

#include "absl/time/time.h"
#include "bench/flags.h"
#include "common/logging.h"
#include "rendezvous/testing/scale_job.h"

namespace {

using trainlet::rendezvous::testing::RunScaleJob;
using trainlet::rendezvous::testing::ScaleJobCost;

constexpr double kTargetRatio = 15.0;

// Best CPU time of `runs` runs at `nodes` and at 10x; false (with a message)
// when a job did not go as planned.
bool Measure(int nodes, int runs, bool elastic, double* ratio) {
  absl::Duration small = absl::InfiniteDuration(), large = absl::InfiniteDuration();
  uint64_t walks_small = 0, walks_large = 0;
  for (int i = 0; i < runs; ++i) {
    for (const int n : {nodes, 10 * nodes}) {
      absl::StatusOr<ScaleJobCost> cost = RunScaleJob(n, elastic);
      if (!cost.ok()) {
        fprintf(stderr, "coordinator_scale: %d-node %s job: %s\n", n,
                elastic ? "elastic" : "static", std::string(cost.status().message()).c_str());
        return false;
      }
      (n == nodes ? small : large) = std::min(n == nodes ? small : large, cost->cpu);
      (n == nodes ? walks_small : walks_large) = cost->member_walks;
    }
  }
  *ratio = absl::FDivDuration(large, small);
  printf(
      "%-8s %6d nodes: %9.2f ms CPU, %3llu walks | %6d nodes: %9.2f ms CPU, %3llu walks | "
      "ratio %5.2fx (target <= %.0fx): %s\n",
      elastic ? "elastic" : "static", nodes, absl::ToDoubleMilliseconds(small),
      static_cast<unsigned long long>(walks_small), 10 * nodes, absl::ToDoubleMilliseconds(large),
      static_cast<unsigned long long>(walks_large), *ratio, kTargetRatio,
      *ratio <= kTargetRatio ? "met" : "NOT met");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 300, runs = 5;
  std::string v;
  trainlet::bench::UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (trainlet::bench::Flag(argv[i], "--nodes", &v)) {
      bad.Int("--nodes", v, &nodes);
    } else if (trainlet::bench::Flag(argv[i], "--runs", &v)) {
      bad.Int("--runs", v, &runs);
    } else {
      bad.Unknown(argv[i]);
    }
  }
  bad.AtLeast("--nodes", nodes, 2);
  bad.AtLeast("--runs", runs, 1);
  if (bad.Print(argv[0])) {
    fprintf(stderr, "usage: %s [--nodes=300] [--runs=5]\n", argv[0]);
    return 64;
  }
  trainlet::SetLogLevel(trainlet::LogLevel::kError);  // the elastic job's "left" lines
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  if (!RunScaleJob(10 * nodes, /*elastic=*/true).ok()) return 1;  // grow the heap first
  double static_ratio = 0, elastic_ratio = 0;
  if (!Measure(nodes, runs, /*elastic=*/false, &static_ratio) ||
      !Measure(nodes, runs, /*elastic=*/true, &elastic_ratio)) {
    return 1;
  }
  return static_ratio <= kTargetRatio && elastic_ratio <= kTargetRatio ? 0 : 1;
}

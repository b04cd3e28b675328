// Node probe wall time: ProbeNode (topology/probe.h) on the synthetic 8-GPU,
// 2-socket fixture (topology/testing/sysfs_builder.h: 8 H100 behind 4+4 PCIe
// switches, 9 InfiniBand/RoCE devices, 2 NUMA nodes of 56 CPUs), with the
// in-process fake NVML (topology/testing/fake_read_nvml.h) so that the merge runs
// as on a GPU node, or with NVML skipped. The fixture is built once in a temp
// dir; each run is a full probe (sysfs scan, /proc facts, statvfs, getrlimit,
// merge, visibility), timed with a steady clock around the call.
//
// Printed, in microseconds: median, p90 and max over --runs probes, plus the
// probe's own probe_micros of the median run. The target is 20 ms
// (20000 us) at most; the exit status is 0 when the median meets it.
//
// --sysfs-root=/sys probes the live machine instead of the fixture (its
// /proc too), to compare.
//
// Build and run (never add to ctest):
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINLET_BUILD_TESTS=OFF
//   ninja -C build-bench -j2 bench_topology_probe
//   build-bench/bench/bench_topology_probe [--runs=200] [--nvml=fake|none] [--sysfs-root=DIR]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "common/logging.h"
#include "topology/probe.h"
#include "topology/testing/fake_read_nvml.h"
#include "topology/testing/sysfs_builder.h"

namespace {

using trainlet::bench::Flag;

}  // namespace

int main(int argc, char** argv) {
  using trainlet::topology::ProbeNode;
  using trainlet::topology::ProbeOptions;
  namespace testing = trainlet::topology::testing;
  int runs = 200;
  std::string nvml = "fake", sysfs_root, v;
  trainlet::bench::UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--runs", &v)) {
      bad.Int("--runs", v, &runs);
    } else if (Flag(argv[i], "--nvml", &v)) {
      bad.OneOf("--nvml", v, {"fake", "none"});
      nvml = v;
    } else if (Flag(argv[i], "--sysfs-root", &v)) {
      sysfs_root = v;
    } else {
      bad.Unknown(argv[i]);
    }
  }
  bad.AtLeast("--runs", runs, 1);
  if (bad.Print(argv[0])) {
    fprintf(stderr, "usage: %s [--runs=200] [--nvml=fake|none] [--sysfs-root=DIR]\n", argv[0]);
    return 64;
  }
  trainlet::SetLogLevel(trainlet::LogLevel::kWarning);

  testing::ScopedTempDir dir;
  testing::SysfsBuilder builder(dir.path());
  ProbeOptions options;
  options.nvml.library = "";
  options.nccl_library = "";
  if (sysfs_root.empty()) {
    testing::BuildDgxH100(builder);
    options.sysfs_root = builder.sys();
    options.proc_root = builder.proc();
    options.dev_root = builder.dev();
  } else {
    options.sysfs_root = sysfs_root;
  }
  if (nvml == "fake") options.read_nvml = testing::FakeH100Nvml(testing::DgxGpuBusIds());

  std::vector<int64_t> wall;
  std::vector<int64_t> own;
  int gpus = 0, nics = 0;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    trainlet::v1::NodeProbe probe = ProbeNode(options);
    wall.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count());
    own.push_back(probe.probe_micros());
    gpus = probe.gpus_size();
    nics = probe.nics_size();
  }
  std::vector<int64_t> sorted = wall;
  std::sort(sorted.begin(), sorted.end());
  const int64_t median = sorted[sorted.size() / 2];
  const int64_t p90 = sorted[std::min(sorted.size() - 1, sorted.size() * 9 / 10)];
  std::sort(own.begin(), own.end());
  printf("topology probe (%s, nvml=%s): %d runs, %d GPUs, %d NICs\n",
         sysfs_root.empty() ? "8-GPU fixture" : sysfs_root.c_str(), nvml.c_str(), runs, gpus, nics);
  printf("wall per ProbeNode (us): median %lld  p90 %lld  max %lld  (probe_micros median %lld)\n",
         static_cast<long long>(median), static_cast<long long>(p90),
         static_cast<long long>(sorted.back()), static_cast<long long>(own[own.size() / 2]));
  printf("target: median <= 20000 us: %s\n", median <= 20000 ? "met" : "NOT met");
  return median <= 20000 ? 0 : 1;
}

// The NVML reader's wall time (topology/nvml_reader.h): ReadNvml through the
// reader the static trainlet carries, against the fake libnvidia-ml.so.1 on
// the 8-GPU fixture (topology/testdata/nvml_h100x8.json: 8 H100s, 18 NVLinks
// each, health counters), one read after another. Each read is what the
// static build's probe pays: inflate the reader into a memfd, fork, exec it
// through this machine's dynamic loader, NVML's calls in the child, the
// answer back over the pipe, its checks, the reap. The same reads in-process
// (what a dynamic build pays, the library already loaded) are printed to
// compare.
//
// Printed, in microseconds: median, p90 and max over --runs reads each way,
// and the CPU time a read costs (this process and its reaped children, user
// and system: getrusage). --health=0 reads as the slow-node sampler does
// (progress/gpu_sample.h: clocks, no health counters), once an interval.
// The target is 50 ms (50000 us) for the reader; the exit status is 0
// when the median meets it.
//
// Build and run (in a build with the tests, which builds the fake; never add
// to ctest):
//   ninja -C build -j2 bench_nvml_reader trainlet_fake_nvml
//   build/bench/bench_nvml_reader [--runs=50] [--fake=LIB] [--fixture=JSON] [--health=1]
#include "topology/nvml_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "topology/nvml.h"

namespace {

using trainlet::bench::Flag;
using trainlet::topology::NvmlOptions;

struct Stats {
  int64_t median = 0, p90 = 0, max = 0;
};

// CPU seconds so far of this process and of its reaped children.
double CpuSeconds() {
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    total += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  return total;
}

Stats Summarise(std::vector<int64_t> us) {
  std::sort(us.begin(), us.end());
  Stats s;
  s.median = us[us.size() / 2];
  s.p90 = us[std::min(us.size() - 1, us.size() * 9 / 10)];
  s.max = us.back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50;
  int health = 1;
  std::string fake = BENCH_FAKE_NVML, fixture = BENCH_NVML_FIXTURE, v;
  trainlet::bench::UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--runs", &v)) {
      bad.Int("--runs", v, &runs);
    } else if (Flag(argv[i], "--fake", &v)) {
      fake = v;
    } else if (Flag(argv[i], "--fixture", &v)) {
      fixture = v;
    } else if (Flag(argv[i], "--health", &v)) {
      bad.Int("--health", v, &health);
    } else {
      bad.Unknown(argv[i]);
    }
  }
  bad.AtLeast("--runs", runs, 1);
  bad.Require(!fake.empty(), "--fake=LIB is required (this build has no fake libnvidia-ml.so.1)");
  if (bad.Print(argv[0])) {
    fprintf(stderr, "usage: %s [--runs=50] [--fake=LIB] [--fixture=JSON] [--health=1]\n", argv[0]);
    return 64;
  }
  if (!trainlet::topology::NvmlReaderBuiltIn()) {
    fprintf(stderr, "%s: this build carries no NVML reader (TRAINLET_NVML_READER is off)\n",
            argv[0]);
    return 69;
  }
  setenv("FAKE_NVML_FIXTURE", fixture.c_str(), 1);

  std::vector<int64_t> reader_us, in_process_us;
  double reader_cpu = 0, in_process_cpu = 0;
  size_t gpus = 0;
  for (NvmlOptions::Via via : {NvmlOptions::Via::kReader, NvmlOptions::Via::kInProcess}) {
    std::vector<int64_t>& times = via == NvmlOptions::Via::kReader ? reader_us : in_process_us;
    const double cpu_before = CpuSeconds();
    for (int i = 0; i < runs; ++i) {
      NvmlOptions options;
      options.library = fake;
      options.via = via;
      options.health = health != 0;
      trainlet::v1::NodeProbe probe;
      std::vector<trainlet::v1::Gpu> read;
      const auto start = std::chrono::steady_clock::now();
      trainlet::topology::ReadNvml(options, &probe, &read);
      times.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
      if (probe.nvml().status() != trainlet::v1::Source::OK) {
        fprintf(stderr, "%s: NVML not read: %s\n", argv[0], probe.nvml().reason().c_str());
        return 1;
      }
      gpus = read.size();
    }
    (via == NvmlOptions::Via::kReader ? reader_cpu : in_process_cpu) =
        (CpuSeconds() - cpu_before) / runs;
  }
  const Stats reader = Summarise(reader_us);
  const Stats in_process = Summarise(in_process_us);
  printf("NVML reader on %s: %d runs, %zu GPUs, health %s\n", fixture.c_str(), runs, gpus,
         health != 0 ? "read" : "not read (the slow-node sampler's reads)");
  printf("through the reader (us): median %lld  p90 %lld  max %lld\n",
         static_cast<long long>(reader.median), static_cast<long long>(reader.p90),
         static_cast<long long>(reader.max));
  printf("in-process (us):         median %lld  p90 %lld  max %lld\n",
         static_cast<long long>(in_process.median), static_cast<long long>(in_process.p90),
         static_cast<long long>(in_process.max));
  printf(
      "CPU per read (us, this process and the reader): through the reader %.0f, "
      "in-process %.0f\n",
      reader_cpu * 1e6, in_process_cpu * 1e6);
  printf("target: reader median <= 50000 us: %s\n", reader.median <= 50000 ? "met" : "NOT met");
  return reader.median <= 50000 ? 0 : 1;
}

// The GPU loopback (--preflight-gpu, docs/preflight.md "The GPU loopback"):
// device memory bandwidth per GPU and, with 2+ GPUs, an NCCL all-reduce among
// the pod's GPUs, measured by a Python program (gpu_loopback.py, embedded)
// that the COMMAND's interpreter runs in a process of its own, so that the
// image's torch, CUDA and NCCL are loaded there and never in the agent.
//
//   RunGpuLoopback: fork (pidfd) -> exec python -c PROGRAM ... in its own
//     process group -> read stdout (at most kMaxOutputBytes) until EOF or the
//     timeout -> SIGKILL the group on the timeout -> reap (the agent's
//     Supervisor may reap it first: then its output alone decides)
//   ParseGpuLoopbackOutput: the last line, JSON, each field checked ->
//     gpu_memory_bandwidth, gpu_nccl_busbw
//
// Never fatal: a program that hangs, crashes or prints garbage gives FAIL
// with the reason; one that cannot start (no interpreter) and one that finds
// no torch or no CUDA give SKIPPED (absent is not failed).
//
// Blocking; thread-compatible. Takes seconds: the agent runs it only when
// --preflight-gpu asks and a check is due.
#ifndef TRAINLET_PREFLIGHT_GPU_LOOPBACK_H_
#define TRAINLET_PREFLIGHT_GPU_LOOPBACK_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

// The embedded program (gpu_loopback.py).
absl::string_view GpuLoopbackProgram();

// What the program may print; more is a broken program, killed.
inline constexpr size_t kMaxGpuLoopbackOutputBytes = 64 << 10;

struct GpuLoopbackOptions {
  // The interpreter and its options: the COMMAND's Python, or {"python3"}.
  std::vector<std::string> python = {"python3"};
  std::vector<std::string> env;  // NAME=VALUE, the program's environment.
  int copy_mib = 256;            // per GPU, per copy
  int iterations = 5;
  int nccl_mib = 256;  // the all-reduce's buffer
  absl::Duration timeout = absl::Seconds(120);
  // --preflight-min-gpu-busbw in GB/s (1e9 bytes/s); 0: none.
  double min_busbw_gbps = 0;
  // A GPU whose memory bandwidth is below this fraction of the median of
  // the pod's GPUs fails.
  double min_fraction_of_median = 0.5;
};

// nccl-tests' bus bandwidth of an all-reduce among `ranks`:
// algbw * 2 (n - 1) / n (nccl-tests doc/PERFORMANCE.md). 0 for n < 2.
double AllReduceBusBandwidth(double algbw, int ranks);

// The program's output (stdout) made results, or INVALID_ARGUMENT saying
// what is wrong with it.
absl::StatusOr<std::vector<v1::CheckResult>> ParseGpuLoopbackOutput(
    absl::string_view output, const GpuLoopbackOptions& options);

// Runs the program bounded by options.timeout (and a second to reap) and
// returns gpu_memory_bandwidth and gpu_nccl_busbw.
std::vector<v1::CheckResult> RunGpuLoopback(const GpuLoopbackOptions& options);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_GPU_LOOPBACK_H_

// GPU health checks: uncorrectable ECC errors, row-remap failures and
// pending remaps, the recovery action NVML asks for, retired and
// pending-retirement pages, and GPU memory held by processes that are not
// this job's. Each is a pure function of facts the node probe read through
// NVML (topology/nvml.cc), so each costs microseconds; reading NVML is the
// probe's job and is bounded there.
//
// Absent is not failed: a fact NVML could not give (no NVML, a consumer GPU
// without ECC, MIG, an old driver) leaves its check SKIPPED with the reason,
// and a node without GPUs skips them all.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_PREFLIGHT_GPU_CHECKS_H_
#define TRAINLET_PREFLIGHT_GPU_CHECKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/v1/preflight.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::preflight {

// A process with a context on a GPU, as NVML lists it (its pid is in the
// namespace NVML sees, often the host's).
struct GpuProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_bytes;  // nullopt: NVML could not say.
};

// One GPU's health, each fact nullopt when NVML could not say.
struct GpuFacts {
  int index = -1;  // NVML index, for the reason text.
  std::string pci_bus_id;
  std::optional<uint64_t> ecc_dbe_volatile;  // uncorrectable errors since the driver loaded.
  std::optional<bool> remap_failure;         // a row could not be remapped.
  std::optional<bool> remap_pending;         // a remap waits for a GPU reset.
  std::optional<uint32_t> recovery_action;   // 0 none; see topology.proto's GpuHealth.
  std::optional<uint64_t> retired_pages;     // single- and double-bit, lifetime.
  std::optional<bool> retirement_pending;    // retired pages wait for a reset.
  std::optional<std::vector<GpuProcess>> processes;
};

// What the GPU checks look at: whether NVML answered, and the GPUs this
// node's workers use.
struct GpuInputs {
  bool nvml_ok = false;
  std::string nvml_reason;  // why not, when !nvml_ok ("static build", "no libnvidia-ml.so.1").
  std::vector<GpuFacts> gpus;
};

// The probe's visible GPUs with the facts its GpuHealth holds (the
// *_known flags give nullopt when false; retired pages are the single- and
// double-bit ones together; processes are the first 64 NVML listed).
GpuInputs GpuInputsFromProbe(const v1::NodeProbe& probe);

struct GpuThresholds {
  // Retired pages above which a GPU fails (0: only pending retirement
  // fails; the count is reported either way).
  uint64_t max_retired_pages = 0;
  // GPU memory other processes may hold on one GPU before it fails.
  uint64_t max_foreign_memory_bytes = 0;
  // Whether a process NVML lists is this job's (its workers, when the
  // check runs beside their start). Empty: none is.
  std::function<bool(uint32_t pid)> is_ours;
};

// volatile double-bit ECC > 0 on any GPU: FAIL. Value: the largest count.
v1::CheckResult CheckGpuEcc(const GpuInputs& in);
// A row-remap failure or a pending remap on any GPU: FAIL. Value: GPUs affected.
v1::CheckResult CheckGpuRowRemap(const GpuInputs& in);
// A recovery action other than 0 (reset, reboot, drain) on any GPU: FAIL.
// Value: the largest action.
v1::CheckResult CheckGpuRecoveryAction(const GpuInputs& in);
// Pages pending retirement, or more retired pages than the threshold: FAIL.
// Value: the most retired pages on one GPU.
v1::CheckResult CheckGpuRetiredPages(const GpuInputs& in, const GpuThresholds& t);
// Memory held on one GPU by processes that are not ours, above the
// threshold, or a process not ours whose memory NVML cannot say: FAIL.
// Value: the most such memory on one GPU, in bytes.
v1::CheckResult CheckGpuForeignMemory(const GpuInputs& in, const GpuThresholds& t);

// All five, in the order above.
std::vector<v1::CheckResult> CheckGpus(const GpuInputs& in, const GpuThresholds& t);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_GPU_CHECKS_H_

// The vocabulary every preflight check shares: the names of the checks (a
// label on /metrics, so they never change), the caps on what a report may
// hold (everything in it travels over the network), a builder that keeps a
// result within them, and the validation a receiver runs on a report or a
// plan before it uses one (proto/trainlet/v1/preflight.proto lists the caps).
//
// Pure functions; thread-safe.
#ifndef TRAINLET_PREFLIGHT_CHECK_RESULT_H_
#define TRAINLET_PREFLIGHT_CHECK_RESULT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

// The checks (docs/preflight.md has each one's threshold and cost).
inline constexpr char kCheckGpuEcc[] = "gpu_ecc";
inline constexpr char kCheckGpuRowRemap[] = "gpu_row_remap";
inline constexpr char kCheckGpuRecoveryAction[] = "gpu_recovery_action";
inline constexpr char kCheckGpuRetiredPages[] = "gpu_retired_pages";
inline constexpr char kCheckGpuForeignMemory[] = "gpu_foreign_memory";
inline constexpr char kCheckShmSize[] = "shm_size";
inline constexpr char kCheckMemlock[] = "memlock";
inline constexpr char kCheckDns[] = "dns";
inline constexpr char kCheckPathFreeSpace[] = "path_free_space";
inline constexpr char kCheckPathRoundTrip[] = "path_round_trip";
inline constexpr char kCheckClockOffset[] = "clock_offset";
inline constexpr char kCheckGpuMemoryBandwidth[] = "gpu_memory_bandwidth";  // --preflight-gpu
inline constexpr char kCheckGpuNcclBusbw[] = "gpu_nccl_busbw";              // --preflight-gpu

// Units of CheckResult.value and .threshold.
inline constexpr char kUnitBytes[] = "bytes";
inline constexpr char kUnitCount[] = "count";
inline constexpr char kUnitSeconds[] = "seconds";
inline constexpr char kUnitBytesPerSecond[] = "bytes_per_second";

// Caps on a report (preflight.proto's header).
inline constexpr size_t kMaxCheckNameBytes = 32;
inline constexpr size_t kMaxReasonBytes = 512;
inline constexpr size_t kMaxUnitBytes = 16;
inline constexpr size_t kMaxNodeIdBytes = 253;  // rendezvous/protocol.h's kMaxIdLength.
inline constexpr size_t kMaxErrorBytes = 512;
inline constexpr int kMaxResults = 32;
inline constexpr int kMaxLinks = 8;
inline constexpr size_t kMaxHostBytes = 253;
inline constexpr int kMaxTargets = 8;
inline constexpr int64_t kMaxMillisPerLink = 10000;  // NetworkPlan.max_millis_per_link.

// A result within the caps: `reason` longer than kMaxReasonBytes ends in
// "...". Callers pass text from outside (a peer, a file name) through
// SafeForLog first; `check` and `unit` are the constants above.
v1::CheckResult MakeResult(absl::string_view check, v1::CheckResult::Outcome outcome,
                           absl::string_view reason, double value = 0, absl::string_view unit = "",
                           double threshold = 0);
inline v1::CheckResult Skipped(absl::string_view check, absl::string_view reason) {
  return MakeResult(check, v1::CheckResult::SKIPPED, reason);
}

// `text` cut to `max` bytes, its end replaced by "..." when cut.
std::string Truncated(absl::string_view text, size_t max);

// "1.5 GiB", "64 MiB", "12 KiB", "512 bytes": sizes in reasons.
std::string HumanBytes(uint64_t bytes);
// "1.2 GB/s", "95.3 MB/s" (decimal, as link rates are quoted).
std::string HumanRate(double bytes_per_second);

// OK when every field of `report` is within the caps above (names,
// outcomes, finite non-negative numbers, list lengths); else
// INVALID_ARGUMENT naming the field. A receiver refuses a report that is
// not OK, whole.
absl::Status ValidateReport(const v1::PreflightReport& report);
// The same for a plan (before an agent measures what it says).
absl::Status ValidatePlan(const v1::NetworkPlan& plan);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_CHECK_RESULT_H_

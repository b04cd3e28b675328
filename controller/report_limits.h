// The bounds of every HealthReport field that comes from the network
// (proto/trainlet/v1/controller.proto documents them), and the one check
// that enforces them. The controller refuses a report that breaks one with
// InvalidArgument naming the field, its limit and the value; the agent's
// reporter trims what it sends to the same bounds (TrimToLimits), so a
// well-behaved agent is never refused.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_CONTROLLER_REPORT_LIMITS_H_
#define TRAINLET_CONTROLLER_REPORT_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

// The whole HealthReport; a larger one is refused with ResourceExhausted,
// as one over the 64 KiB the gRPC server reads at all is.
inline constexpr size_t kMaxReportBytes = 60 * 1024;
inline constexpr size_t kMaxJobIdLength = 128;   // [A-Za-z0-9._-]
inline constexpr size_t kMaxNodeIdLength = 253;  // printable ASCII, no spaces.
inline constexpr int kMaxWorkers = 1024;
inline constexpr int kMaxProgressFields = 16;
inline constexpr size_t kMaxProgressKeyLength = 64;  // [A-Za-z0-9_.-]
inline constexpr size_t kMaxProgressValueLength = 128;
inline constexpr int kMaxGpus = 64;
inline constexpr size_t kMaxGpuUuidLength = 96;
inline constexpr size_t kMaxGpuReasonLength = 256;
inline constexpr int kMaxLostNodes = 64;
inline constexpr int kMaxRestartReasons = 16;
// CoordinatorView.slow_nodes (docs/slow-nodes.md): at most this many, each
// estimating the job at most kMaxSlowdownPercent slower.
inline constexpr int kMaxSlowNodes = 16;
inline constexpr int kMaxSlowdownPercent = 100000;
inline constexpr size_t kMaxTextLength = 1024;         // last_failure, causes, reasons.
inline constexpr size_t kMaxCommandTextLength = 1024;  // command.
inline constexpr size_t kMaxHangEvidenceLength = 16 * 1024;
inline constexpr int kMaxEvents = 16;
inline constexpr uint64_t kMaxRound = uint64_t{1} << 40;
inline constexpr int kMaxRank = 1 << 24;
inline constexpr absl::Duration kMinReportInterval = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxReportInterval = absl::Hours(1);

// OK when `report` is within every bound above and names who sends it
// (job_id, node_id, non-zero incarnation, sequence >= 1), and its preflight
// (if any) passes preflight::ValidateReport and is this node's and
// incarnation's. InvalidArgument naming the field, or ResourceExhausted for
// a report over kMaxReportBytes.
absl::Status ValidateHealthReport(const v1::HealthReport& report);

// Cuts what may legitimately grow past the bounds (texts, lists: the
// oldest events and the highest local ranks go first; a preflight that
// breaks its caps is dropped) so that ValidateHealthReport accepts a report
// whose identity is valid.
void TrimToLimits(v1::HealthReport* report);

// Makes `text` valid UTF-8 (invalid bytes as '?') of at most `max_bytes`,
// cut on a character boundary (protobuf refuses to send a string that is
// not valid UTF-8).
void FitText(std::string* text, size_t max_bytes);

// [A-Za-z0-9._-]{1,128}.
bool IsValidJobId(absl::string_view job_id);

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_REPORT_LIMITS_H_

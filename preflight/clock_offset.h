// The clock offset to the coordinator, NTP style (RFC 5905, section 8):
// from the four wall-clock timestamps of one request and its answer,
//   t1 the agent sent, t2 the coordinator received, t3 it answered,
//   t4 the agent received,
// the coordinator's clock is ahead of the agent's by
//   offset = ((t2 - t1) + (t3 - t4)) / 2,  known to within rtt / 2, where
//   rtt    = (t4 - t1) - (t3 - t2).
// The rendezvous messages carry the timestamps; this is the arithmetic and
// the threshold. A skewed clock breaks what compares time across nodes:
// TLS certificates' validity, the progress and hang times on the
// controller's page, merged logs.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_PREFLIGHT_CLOCK_OFFSET_H_
#define TRAINLET_PREFLIGHT_CLOCK_OFFSET_H_

#include <optional>

#include "absl/time/time.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

struct ClockSample {
  absl::Time agent_sent;            // t1, the agent's wall clock.
  absl::Time coordinator_received;  // t2, the coordinator's.
  absl::Time coordinator_answered;  // t3, the coordinator's.
  absl::Time agent_received;        // t4, the agent's.
};

struct ClockOffset {
  absl::Duration offset;  // the coordinator's clock minus the agent's.
  absl::Duration rtt;     // the network's share of the exchange; the offset is +- rtt/2.
};

// nullopt when the timestamps cannot come from one exchange (a time
// missing or infinite, t4 before t1, t3 before t2, or the coordinator's
// part longer than the whole).
std::optional<ClockOffset> ComputeClockOffset(const ClockSample& sample);

// kCheckClockOffset: FAIL when |offset| is more than `max_offset` even at
// the edge of the uncertainty (|offset| - rtt/2 > max_offset); PASS when it is
// within it everywhere (|offset| + rtt/2 <= max_offset); SKIPPED when the
// uncertainty straddles the threshold, the sample is inconsistent, or there is
// none yet. Value: the offset in seconds (signed), threshold: max_offset.
v1::CheckResult CheckClockOffset(const std::optional<ClockSample>& sample,
                                 absl::Duration max_offset = absl::Seconds(1));

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_CLOCK_OFFSET_H_

#include "rendezvous/protocol.h"

#include <algorithm>
#include <cmath>

namespace trainlet::rendezvous {

namespace {
// How long one Report from each of `nnodes` members takes at
// kMaxHeardReportsPerSecond.
absl::Duration ReportsAtTheCap(int nnodes) {
  return absl::Seconds(std::max(nnodes, 0)) / kMaxHeardReportsPerSecond;
}
}  // namespace

absl::Duration HeardReportInterval(absl::Duration heartbeat_timeout, int nnodes) {
  const absl::Duration interval = HeartbeatInterval(heartbeat_timeout);
  return std::max({interval, heartbeat_timeout - interval, ReportsAtTheCap(nnodes)});
}

absl::Duration FirstReportDelay(absl::Duration heartbeat_timeout, int nnodes, int node_rank) {
  const absl::Duration interval = HeartbeatInterval(heartbeat_timeout);
  const absl::Duration needed = ReportsAtTheCap(nnodes);
  const absl::Duration window = std::min(heartbeat_timeout / 2 - interval, needed);
  if (needed <= interval || window <= absl::ZeroDuration()) return interval;
  // The fractional part of rank x (golden ratio - 1): a low-discrepancy
  // sequence, so consecutive ranks land far apart in the window.
  const double step = 0.6180339887498949 * static_cast<double>(std::max(node_rank, 0));
  const double fraction = step - std::floor(step);
  return interval + window * fraction;
}

absl::Duration AckInterval(absl::Duration heartbeat_timeout) { return heartbeat_timeout / 4; }

absl::Duration HeartbeatInterval(absl::Duration heartbeat_timeout) {
  return std::max(heartbeat_timeout / kHeartbeatsPerTimeout - kMaxTickDelay - kLivenessCoalesce,
                  heartbeat_timeout / (2 * kHeartbeatsPerTimeout));
}

absl::Duration SilenceLimit(absl::Duration heartbeat_timeout) {
  // (The budget is in protocol.h.) Never below the interval itself.
  return std::max(heartbeat_timeout + heartbeat_timeout / (2 * kHeartbeatsPerTimeout) -
                      kMaxTickDelay - kLivenessCoalesce,
                  2 * HeartbeatInterval(heartbeat_timeout));
}

absl::Duration UdpHeardWithin(absl::Duration heartbeat_timeout) {
  return 2 * HeartbeatInterval(heartbeat_timeout) + kLivenessCoalesce;
}

}  // namespace trainlet::rendezvous

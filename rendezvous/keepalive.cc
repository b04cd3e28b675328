#include "rendezvous/keepalive.h"

#include <algorithm>

namespace trainlet::rendezvous {

KeepaliveSettings KeepaliveFor(absl::Duration heartbeat_timeout) {
  KeepaliveSettings s;
  s.time = std::max(heartbeat_timeout, absl::Seconds(1));
  s.timeout = std::max(2 * heartbeat_timeout, absl::Seconds(2));
  return s;
}

bool WatchLivenessUsable(absl::Duration heartbeat_timeout) {
  return heartbeat_timeout >= kMinWatchLivenessTimeout;
}

KeepaliveSettings WatchLivenessKeepalive(absl::Duration heartbeat_timeout) {
  KeepaliveSettings s;
  s.time = heartbeat_timeout / kWatchLivenessPingsPerTimeout;
  // The first unanswered ping goes out 0 to `time` after the peer fell
  // silent; centre the close (plus the core's grace) on the timeout.
  s.timeout = heartbeat_timeout - s.time / 2 - kStreamLossGrace - kLossCheckDelay;
  return s;
}

absl::Duration WatchLivenessReportInterval(absl::Duration heartbeat_timeout) {
  return heartbeat_timeout / kWatchLivenessReportsPerTimeout;
}

absl::Duration WatchLivenessReportLimit(absl::Duration heartbeat_timeout) {
  return heartbeat_timeout + WatchLivenessReportInterval(heartbeat_timeout);
}

absl::Duration MinPermittedPingInterval() { return KeepaliveFor(absl::ZeroDuration()).time / 2; }

}  // namespace trainlet::rendezvous

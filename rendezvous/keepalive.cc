#include "rendezvous/keepalive.h"

#include <algorithm>

namespace trainlet::rendezvous {

KeepaliveSettings KeepaliveFor(absl::Duration heartbeat_timeout) {
  KeepaliveSettings s;
  s.time = std::max(heartbeat_timeout, absl::Seconds(1));
  s.timeout = std::max(2 * heartbeat_timeout, absl::Seconds(2));
  return s;
}

absl::Duration MinPermittedPingInterval() { return KeepaliveFor(absl::ZeroDuration()).time / 2; }

}  // namespace trainlet::rendezvous

// gRPC keepalive for trainlet's connections, derived from the heartbeat
// timeout so that keepalive can never declare a node lost before heartbeats
// do. Liveness datagrams (UDP) or Report heartbeats, every ~timeout/10, are
// how the coordinator detects a silent node, within +-5% of
// --heartbeat-timeout; keepalive is only the fallback that notices a half-open TCP connection (a
// peer host that vanished without a FIN or RST), on either side.
//
// A transport is closed by keepalive when a ping it sent is not acknowledged
// within `timeout`. The ping may go out just after the peer fell silent, so
// silence is noticed after `timeout` at the earliest and `time + timeout` at
// the latest. With timeout = 2 x heartbeat timeout, a transport is never
// closed by keepalive before twice the heartbeat timeout of silence; by then
// the coordinator has declared the node lost through heartbeats anyway.
//
// The server permits a ping every MinPermittedPingInterval (half of the
// smallest KeepaliveFor(...).time), so a client that uses these settings,
// whatever its heartbeat timeout and its timer's jitter, is never sent GOAWAY
// too_many_pings.
//
// Liveness itself is not keepalive's: agents send UDP liveness datagrams
// (or, where UDP does not get through, Report heartbeats) every heartbeat
// interval, and the coordinator core decides (protocol.h, SilenceLimit).
// The server uses KeepaliveFor too.
//
// Pure functions, no gRPC include: the client and the server both use them.
#ifndef TRAINLET_RENDEZVOUS_KEEPALIVE_H_
#define TRAINLET_RENDEZVOUS_KEEPALIVE_H_

#include "absl/time/time.h"

namespace trainlet::rendezvous {

struct KeepaliveSettings {
  absl::Duration time;     // GRPC_ARG_KEEPALIVE_TIME_MS: ping after this long.
  absl::Duration timeout;  // GRPC_ARG_KEEPALIVE_TIMEOUT_MS: close if not acked.
};

// time = max(heartbeat_timeout, 1 s); timeout = max(2 x heartbeat_timeout, 2 s).
KeepaliveSettings KeepaliveFor(absl::Duration heartbeat_timeout);

// A member whose directive stream closes while the job runs, and who has
// not said that the coordinator's acks reach it (protocol.h,
// kStreamProbeWindow), is lost unless it re-opens the stream (or a
// heartbeat or a probe's answer arrives) within this: an agent that
// died (kill -9) is noticed this fast, while a stream that only broke (a
// reset connection) is re-opened by its agent within ~20 ms and is no loss.
inline constexpr absl::Duration kStreamLossGrace = absl::Milliseconds(150);
// GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS for the server:
// 500 ms, half of the shortest keepalive time any client uses.
absl::Duration MinPermittedPingInterval();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_KEEPALIVE_H_

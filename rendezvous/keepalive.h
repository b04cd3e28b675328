// gRPC keepalive for trainlet's connections, derived from the heartbeat
// timeout so that keepalive can never declare a node lost before heartbeats
// do. Heartbeats (Report RUNNING every timeout/10) are how the coordinator
// detects a silent node, within +-5% of --heartbeat-timeout; keepalive is only
// the fallback that notices a half-open TCP connection (a peer host that
// vanished without a FIN or RST), on either side.
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
// Watch liveness (JoinRequest.watch_liveness, docs/protocol.md): for
// heartbeat timeouts of at least kMinWatchLivenessTimeout the coordinator's
// server pings every connection every timeout/10 (WatchLivenessKeepalive) and
// closes one whose ping goes unanswered for timeout - timeout/20 -
// kStreamLossGrace - kLossCheckDelay (gRPC restarts the ping timer whenever
// it reads from the connection, so the first unanswered ping leaves 0 to
// timeout/10 after the last thing the node sent). The agent's Watch stream
// on it then ends, and the core
// counts the node as lost kStreamLossGrace later: a frozen (SIGSTOP) or cut
// off node is lost 0.95 to 1.05 timeouts after it fell silent, as with
// heartbeats every timeout/10, but an HTTP/2 PING costs the coordinator a
// fraction of a unary Report (no call, no headers, no token, no core lock).
// Members that use it send their Report heartbeat only every timeout/2
// (kWatchLivenessReportsPerTimeout): it tells the agent that the
// coordinator is alive, and it catches an agent whose main loop hung while
// gRPC's threads still answer pings (lost after WatchLivenessReportLimit).
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

// A member whose directive stream closes while the job runs is lost unless
// it re-opens the stream (or a heartbeat arrives) within this: an agent that
// died (kill -9) is noticed this fast, while a stream that only broke (a
// reset connection) is re-opened by its agent within ~20 ms and is no loss.
inline constexpr absl::Duration kStreamLossGrace = absl::Milliseconds(150);
// Half the coordinator's 20 ms tick (coordinator_host.cc): the core notices a
// closed stream's grace running out 0 to 20 ms late.
inline constexpr absl::Duration kLossCheckDelay = absl::Milliseconds(10);

// Below this heartbeat timeout the coordinator ignores watch_liveness: the
// ping timeout would be too short to tell a busy agent from a dead one.
inline constexpr absl::Duration kMinWatchLivenessTimeout = absl::Seconds(1);
inline constexpr int kWatchLivenessPingsPerTimeout = 10;
inline constexpr int kWatchLivenessReportsPerTimeout = 2;

bool WatchLivenessUsable(absl::Duration heartbeat_timeout);
// The coordinator server's pings with watch liveness: time = timeout/10,
// timeout = heartbeat timeout - timeout/20 - kStreamLossGrace -
// kLossCheckDelay. Only for
// WatchLivenessUsable timeouts.
KeepaliveSettings WatchLivenessKeepalive(absl::Duration heartbeat_timeout);
// How often a watch-liveness member sends its Report heartbeat: timeout/2.
absl::Duration WatchLivenessReportInterval(absl::Duration heartbeat_timeout);
// A watch-liveness member with its stream open and no Report for this long is
// lost (its agent hung while gRPC answers pings): timeout + the interval.
absl::Duration WatchLivenessReportLimit(absl::Duration heartbeat_timeout);

// GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS for the server:
// 500 ms, half of the shortest keepalive time any client uses.
absl::Duration MinPermittedPingInterval();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_KEEPALIVE_H_

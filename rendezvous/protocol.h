// What both sides of the rendezvous protocol agree on besides its messages
// (proto/trainlet/v1/rendezvous.proto): the liveness timing both derive from
// the heartbeat timeout T (how often an agent proves it lives, when the
// coordinator declares it lost, the Report cadence at scale, acks), the
// bounds a request may carry, and when streams are released. The agent
// (agent/round.h) and the coordinator (coordinator.h) both include this, so
// that neither restates the other's numbers; docs/protocol.md and
// docs/elastic.md are the prose.
//
// Constants and pure functions; thread-safe.
#ifndef TRAINLET_RENDEZVOUS_PROTOCOL_H_
#define TRAINLET_RENDEZVOUS_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "rendezvous/liveness_datagram.h"

namespace trainlet::rendezvous {

// Liveness and its +-5% budget. An agent proves it is alive every
// HeartbeatInterval(T) (a UDP liveness datagram, or a Report where UDP does
// not get through); whatever arrives sets the member's last_heard to the
// coordinator's clock when the core applies it. A member is lost once
// now - last_heard >= SilenceLimit(T), checked by Tick.
//
// From the moment a node falls silent, detection takes
//   SilenceLimit - a + c + k
// where a in [0, interval] is how long before falling silent it sent its
// last datagram, c in [0, kLivenessCoalesce] is the liveness thread's
// coalescing wait before it applies a batch (coordinator_host.h), and k in
// [0, kMaxTickDelay] is how late the 20 ms tick notices. With
//   interval = T/10 - kMaxTickDelay - kLivenessCoalesce
//   SilenceLimit = T + T/20 - kMaxTickDelay - kLivenessCoalesce
// that is 0.95 T to 1.05 T (network latency, a few hundred microseconds in a
// cluster, adds to c). Below T = 500 ms the interval is floored at T/20
// and the lower bound loosens to T - 30 ms.
inline constexpr int kHeartbeatsPerTimeout = 10;
// The coordinator's tick period (coordinator_host.h kCoordinatorTickEvery).
inline constexpr absl::Duration kMaxTickDelay = absl::Milliseconds(20);
// How long the liveness thread lets datagrams gather after a wake-up.
inline constexpr absl::Duration kLivenessCoalesce = absl::Milliseconds(10);
absl::Duration HeartbeatInterval(absl::Duration heartbeat_timeout);
absl::Duration SilenceLimit(absl::Duration heartbeat_timeout);
// A member whose datagrams the core accepted within this is "heard over
// UDP" (ReportResponse.udp_heard): two intervals plus the coalescing wait.
absl::Duration UdpHeardWithin(absl::Duration heartbeat_timeout);

// Reports at scale. A member the coordinator hears over UDP still sends a
// Report now and then (it repeats its state and tells the agent the
// coordinator lives); each costs the coordinator about 115 us of CPU, against
// a few us for a datagram (docs/benchmarks-history.md, section 7). So the Report
// interval of such a member grows with the round, keeping them at most
// kMaxHeardReportsPerSecond: max(T - interval, n / 500 s), 4.53 s at 5 s up
// to 2,265 nodes, 20 s at 10,000 (Assignment.report_interval_ms).
inline constexpr int kMaxHeardReportsPerSecond = 500;
absl::Duration HeardReportInterval(absl::Duration heartbeat_timeout, int nnodes);
// When member `node_rank` of a round of `nnodes` sends its first Report
// (Assignment.first_report_delay_ms; it learns from the answer whether its
// datagrams are heard): one interval for a round whose first Reports fit in
// kMaxHeardReportsPerSecond over one interval; otherwise spread by rank
// (golden-ratio steps, so any n ranks cover the window evenly) over
// [interval, interval + min(T/2 - interval, n / 500 s)]. A member whose
// datagrams never arrive still reports before T/2 (from the moment its
// answer left: Coordinator::AnswerSent), well within its T.
absl::Duration FirstReportDelay(absl::Duration heartbeat_timeout, int nnodes, int node_rank);

// Acknowledgements: the coordinator answers an accepted datagram with an ack
// (liveness_datagram.h) when it has not acked that member within
// AckInterval (T/4): the agent's proof that the coordinator lives and hears
// it, which lets it stop its periodic Reports (agent/round.h). A few us of
// CPU each, sent in one sendmmsg per batch; an agent older than the acks
// never reads them.
absl::Duration AckInterval(absl::Duration heartbeat_timeout);

// Stream loss (coordinator.h, "Stream loss"). A member whose directive
// stream closes while its round runs, and whose UDP is heard, is probed: a
// PROBE datagram at once and every kStreamProbeEvery; lost at once when its
// port refuses one, and when none is answered within kStreamProbeWindow of
// the close where it said that the coordinator's acks reach it
// (ALIVE_ACKED), else within kStreamLossGrace (keepalive.h). An agent
// answers a probe from a thread of its own (LivenessSender), so a busy main
// loop does not delay the answer: the window is one thread's wake-up on a
// loaded host, many times over, and five probes, so that a lost datagram
// costs nothing. A member whose acks do not reach it has kStreamLossGrace
// to re-open its stream or report.
inline constexpr absl::Duration kStreamProbeEvery = absl::Milliseconds(10);
inline constexpr absl::Duration kStreamProbeWindow = absl::Milliseconds(50);

// Bounds on what a request may carry (INVALID_ARGUMENT beyond them).
inline constexpr size_t kMaxJoinRequestBytes = 32 * 1024;  // the whole JoinRequest.
inline constexpr size_t kMaxIdLength = 253;                // node_id, job_id: a DNS name.
inline constexpr int kMaxLocalWorldSize = 1024;
inline constexpr int kMaxRankHint = 1 << 20;
inline constexpr uint64_t kMaxRound = uint64_t{1} << 40;
inline constexpr int kMaxRestartCount = 1 << 20;
inline constexpr int kMaxGpusPerNode = 64;       // topology.gpu_uuids entries, gpu_count.
inline constexpr size_t kMaxGpuUuidLength = 96;  // "GPU-8f6c2a4e-..." is 40.
inline constexpr size_t kMaxNcclVersionLength = 64;
inline constexpr size_t kMaxHostIdentityLength = 64;  // topology.boot_id, .ipc_namespace.
inline constexpr int kMaxNumaNodes = 1024;
inline constexpr size_t kMaxSshKeyLength = 8192;  // one OpenSSH public key line.
// JoinRequest.domains: entries, key length (a Kubernetes label key: a
// 253-byte prefix, '/', a 63-byte name), value length.
inline constexpr int kMaxTopologyDomains = 16;
inline constexpr size_t kMaxTopologyKeyLength = 317;
inline constexpr size_t kMaxTopologyValueLength = 256;
inline constexpr size_t kMaxSchedulerPlacementLength = 128;
inline constexpr size_t kMaxRankOrderNoteLength = 512;
// ReportRequest.message and LeaveRequest.reason are cut to this many bytes.
inline constexpr size_t kMaxMessageLength = 1024;

// An assignment is sent by datagram only when its Directive is at most this
// large: the next round's may be a little larger (a longer master address).
inline constexpr size_t kMaxReleasedAssignmentBytes = kMaxDirectivePayloadBytes - 128;

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_PROTOCOL_H_

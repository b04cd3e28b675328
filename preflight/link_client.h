// The client side of the link measurer: connect to a ring neighbour's
// LinkServer, time a few ping-pongs (the smallest is the link's RTT), then
// send up to max_bytes for at most max_time, in two samples, and count what
// the peer's kernel acknowledged (the bytes sent minus those still queued,
// SIOCOUTQ): a slow link is timed within max_time however large the socket
// buffers, and nothing waits for a queue to drain. The better sample is the
// link's bandwidth, as the smallest round trip is its RTT: a busy host's late
// wake-up slows one sample, a slow link both.
//
// Every step has a deadline: connecting and being accepted within
// connect_timeout (a peer still at the previous round, refusing or BUSY is
// retried until then), the pings within ping_timeout, the transfer within
// max_time; so one link costs at most their sum, and a healthy LAN link a
// few ms plus the transfer. Each failure is an error on the LinkResult,
// never an exception or a crash.
//
// Defaults: 16 MiB and 250 ms per link; a node measures two links
// (ring.h) and is measured by two, so it moves at most 64 MiB a round.
//
// Thread-safe: no shared state; each call uses its own socket.
#ifndef TRAINLET_PREFLIGHT_LINK_CLIENT_H_
#define TRAINLET_PREFLIGHT_LINK_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "preflight/dns.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

// Who measures: what the Hello carries.
struct LinkIdentity {
  std::string job_id;
  std::string node_id;
  uint64_t round = 0;
  uint64_t nonce = 0;
};

struct MeasureOptions {
  uint64_t max_bytes = uint64_t{16} << 20;  // for all the samples together.
  absl::Duration max_time = absl::Milliseconds(250);
  // The transfer in this many parts (each max_bytes/samples within
  // max_time/samples, on a connection of its own); the best counts.
  int samples = 3;
  int pings = 5;
  absl::Duration connect_timeout = absl::Seconds(1);
  absl::Duration ping_timeout = absl::Milliseconds(500);  // for all the pings together.
};
inline constexpr int kMaxPings = 64;  // the server's default limit.
inline constexpr int kMaxSamples = 8;

// Measures the link to `target`. `resolver` resolves a target host that is
// not a numeric address (nullptr: such a target fails).
v1::LinkResult MeasureLink(const LinkIdentity& me, const v1::LinkTarget& target,
                           const MeasureOptions& options, Resolver* resolver);

// Every target of `plan`, one after the other (so the two links of a node
// do not share its NIC while timed), with me.round and me.nonce from the
// plan and the plan's limits over `options`; INVALID_ARGUMENT for a plan
// that fails ValidatePlan.
absl::StatusOr<std::vector<v1::LinkResult>> MeasurePlan(LinkIdentity me,
                                                        const v1::NetworkPlan& plan,
                                                        const MeasureOptions& options,
                                                        Resolver* resolver);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_LINK_CLIENT_H_

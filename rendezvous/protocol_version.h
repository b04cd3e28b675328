// The version of the rendezvous protocol (proto/trainlet/v1/rendezvous.proto
// and the rules in docs/protocol.md) that this build speaks. Agents send it
// in JoinRequest.protocol_version; the coordinator refuses a join whose
// version differs from its own, so that one job never mixes agents that
// disagree on the protocol. Bump it with any change that an older peer
// would misread. Header only; no threads.
#ifndef TRAINLET_RENDEZVOUS_PROTOCOL_VERSION_H_
#define TRAINLET_RENDEZVOUS_PROTOCOL_VERSION_H_

#include <cstdint>

namespace trainlet::rendezvous {

// 1 was the protocol before JoinRequest carried a version (such an agent
// sends 0). 2 added watch liveness (HTTP/2 pings); 3 replaced it with UDP
// liveness datagrams (JoinRequest.udp_liveness).
inline constexpr uint32_t kProtocolVersion = 3;

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_PROTOCOL_VERSION_H_

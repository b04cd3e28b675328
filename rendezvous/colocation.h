// Finds the pods of a closing round that share one machine, so NCCL can treat
// them as one host: pure function, no state.
//
// NCCL's host hash is the hostname plus the kernel's boot_id, and a pod's
// hostname is its own, so two pods on one node look like two hosts and lose
// NVLink and shared memory between them (nccl #1781, #797, #324). Members
// whose topology reports the same boot_id run on one kernel; among them, a
// group that also shares an IPC namespace, and whose members each see every
// GPU of the group (equal gpu_uuids: pods that were given all of the node's
// GPUs, not a device plugin's disjoint shares), gets NCCL_HOSTID = that
// boot_id (the same value on each, distinct across machines). Other
// co-located pods are only counted: NCCL's SHM and P2P need the shared
// namespace and GPUs each process can open, and a common host id without them
// turns a slow job into a failing one ("CUDA IPC mapping failed", nccl #324).
#ifndef TRAINLET_RENDEZVOUS_COLOCATION_H_
#define TRAINLET_RENDEZVOUS_COLOCATION_H_

#include "absl/types/span.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

// Sets colocated and nccl_hostid on every entry of `nodes` from
// `topologies[i]` (the topology node i reported): its boot_id and
// ipc_namespace (an entry without a boot_id gets colocated 0 and no host id).
// The sizes should be equal; an entry of `nodes` past the topologies counts
// as one without a boot_id. O(n) expected in the number of nodes; only the
// machines with two or more members cost more (their GPU sets are compared),
// so a round of 10,000 pods on 10,000 machines allocates one hash table.
void MarkColocated(absl::Span<const trainlet::v1::Topology* const> topologies,
                   absl::Span<trainlet::v1::NodeAssignment> nodes);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COLOCATION_H_

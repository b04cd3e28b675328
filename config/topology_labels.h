// Where this node sits, for the rank order (docs/topology.md, "Rank order"):
// --topology=KEY=VALUE,... and the downward API's labels and annotations
// files (--topology-file), read for the keys in --topology-keys, plus the
// marks a topology-aware scheduler leaves on the pods it placed by index.
// Pure parsing: the caller reads the files.
#ifndef TRAINLET_CONFIG_TOPOLOGY_LABELS_H_
#define TRAINLET_CONFIG_TOPOLOGY_LABELS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::agent {

// --topology-keys' default: the node labels the clouds, NVIDIA's Topograph
// and the GPU operator publish, widest first within each family (a node
// carries one family; levels it lacks are skipped). Topograph's chart
// before it renamed its keys (NVIDIA/topograph#208) wrote datacenter for
// today's core and block for today's leaf: both are read, in their places.
inline constexpr absl::string_view kDefaultTopologyKeys =
    "topology.kubernetes.io/zone,"
    "topology.k8s.aws/network-node-layer-1,topology.k8s.aws/network-node-layer-2,"
    "topology.k8s.aws/network-node-layer-3,topology.k8s.aws/network-node-layer-4,"
    "cloud.google.com/gce-topology-block,cloud.google.com/gce-topology-subblock,"
    "cloud.google.com/gce-topology-host,"
    "network.topology.nvidia.com/core,network.topology.nvidia.com/datacenter,"
    "network.topology.nvidia.com/spine,network.topology.nvidia.com/leaf,"
    "network.topology.nvidia.com/block,network.topology.nvidia.com/accelerator,"
    "nvidia.com/gpu.clique";

// The labels and annotations that say a topology-aware scheduler placed
// the pod by its index, consecutive indices close together: Kueue TAS's pod
// label (it assigns domains in rank order) and KAI's segments annotation
// (segment = index / segment size, each segment in one domain). Not the
// marks of a placement that only keeps the whole job inside one domain and
// ignores the index (Volcano's volcano.sh/network-topology-mode, KAI's
// kai.scheduler/topology alone): under those the pods' indices still
// interleave the narrower domains, and topology order is what fixes that.
inline constexpr absl::string_view kSchedulerPlacementKeys[] = {"kueue.x-k8s.io/tas",
                                                                "kai.scheduler/segment-size"};

using Domains = std::vector<std::pair<std::string, std::string>>;

// "zone=z1,switch=s2" -> {(zone, z1), (switch, s2)}, in the order given;
// each key and value checked as the coordinator checks them. `origin` names
// the input in errors ("--topology", "TRAINLET_TOPOLOGY").
absl::StatusOr<Domains> ParseTopologyPairs(absl::string_view text, absl::string_view origin);

// "k1,k2" -> {k1, k2}: the keys checked, distinct.
absl::StatusOr<std::vector<std::string>> ParseTopologyKeys(absl::string_view text,
                                                           absl::string_view origin);

// A downward API file (metadata.labels or metadata.annotations): one
// `key="value"` line per entry, the value quoted as Go's %q does
// (backslash escapes: quote, backslash, n, t, xHH, uHHHH...). `origin`
// names the file in errors.
absl::StatusOr<std::map<std::string, std::string>> ParseDownwardApiFile(absl::string_view text,
                                                                        absl::string_view origin);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_TOPOLOGY_LABELS_H_

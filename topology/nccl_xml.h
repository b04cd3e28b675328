// NCCL's topology file (NCCL_TOPO_FILE) from a node probe, and a strict
// linter that mirrors the rules of NCCL's own XML parser (src/graph/xml.cc),
// since NCCL does not export its parser and a file it rejects fails every
// communicator's init. The file is a skeleton (<system>, a <cpu> per NUMA
// node, the PCIe switch chain, leaf <pci> entries for GPUs and NICs, no
// <gpu> or <nic> children); what goes in, what is left out and why:
// docs/topology.md, "The NCCL topology file". Values go in only after
// validation: NCCL's parser decodes no entities, so nothing is escaped.
//
// Pure functions; safe from any thread.
#ifndef TRAINLET_TOPOLOGY_NCCL_XML_H_
#define TRAINLET_TOPOLOGY_NCCL_XML_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// The topology file for `probe`; it passes LintNcclXml (checked before it is
// returned). FailedPrecondition when the node has more devices than NCCL's
// parser takes (256 elements, 640 children).
absl::StatusOr<std::string> NcclTopologyXml(const v1::NodeProbe& probe);

// OK when NCCL's parser would accept `text` and it is well-formed by the
// rules NCCL relies on; else InvalidArgument naming the line and the rule:
//  - no <?xml ...?> declaration; no tab anywhere; no newline inside a tag;
//  - attributes separated by single spaces, values quoted ('"' or '\''), no
//    space before "/>" (NCCL would add an empty attribute);
//  - at most 16 attributes per element, 255 characters per name or value,
//    640 children per element and 256 elements in all;
//  - the root is <system version="1">; the element tree is
//    system > cpu > (pci | nic), pci > (pci | gpu | nic | pcilink),
//    gpu > (nvlink | c2c), nic > net, and no other element;
//  - bus ids (pci busid, pcilink and nvlink target) are lowercase
//    %04x:%02x:%02x.%x (nvlink also takes NCCL's NVSwitch id
//    "fffffff:ffff:ff"); cpu numaid is an integer, affinity hex cpumap
//    groups; required attributes are there (cpu numaid, pci busid, net name);
//  - only whitespace and <!-- comments --> between elements, close tags
//    match, nothing after </system>.
absl::Status LintNcclXml(absl::string_view text);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_NCCL_XML_H_

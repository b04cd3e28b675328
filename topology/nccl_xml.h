// NCCL's topology file (NCCL_TOPO_FILE) from a node probe, and a strict
// linter that mirrors the rules of NCCL's own XML parser (src/graph/xml.cc;
// see shared reference gpu-topology.md §1.4), since NCCL does not export its
// parser and a file it rejects fails every communicator's init.
//
// The file is a "skeleton", the style cloud vendors ship (Azure's
// ndv4/ndv5-topo.xml): <system version="1">, one <cpu> per NUMA node (numaid,
// cpumap-format affinity, arch, vendor, familyid, modelid), under it the
// chain of PCIe switches NCCL itself would build from sysfs (it keeps every
// second bus id on the way up: a switch's upstream port, never its
// downstream ports or the root port), and leaf <pci> entries for each GPU and
// NIC (busid, class and, for GPUs, vendor, device, link_speed, link_width).
// No <gpu> or <nic> children: NCCL needs `rank` on a <gpu> and sets it only
// for its own GPU, a <gpu> with an <nvlink> child makes NCCL skip NVML's
// NVLink detection (a stale file would hide a broken link), and <net>
// attributes in a file override what the network plugin detects. NCCL fills
// in those from NVML and its plugins at run time, by bus id, and fills any
// attribute the file leaves out (a switch's link) from sysfs. A device whose
// PCI path is unknown (NVML saw it, sysfs did not) is left out: a <pci> with
// a parent stops NCCL's own sysfs walk, so a guessed place would be worse
// than none.
//
// Values go in only after validation (bus ids, hex ids, the PCIe speeds NCCL
// knows, cpumap groups, plain names): NCCL's parser does not decode entities,
// so nothing is escaped; an invalid value is left out instead.
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

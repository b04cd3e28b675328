// Environment advice from a node probe (probe.h): the NCCL/CUDA variables a
// training job on this node should have, and the pod problems that make NCCL
// hang (a small /dev/shm, a memlock limit). `trainlet probe --format=env`
// prints it (FormatEnvAdvice); the agent applies the variables to its workers
// where the user set nothing.
//
// Pure functions of their arguments, except InterfaceRoutingTo (asks the
// kernel); all safe from any thread.
#ifndef TRAINLET_TOPOLOGY_ENV_ADVICE_H_
#define TRAINLET_TOPOLOGY_ENV_ADVICE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

struct EnvContext {
  // The interface towards the job's other nodes (JobSocketInterface), e.g.
  // "net1" with Multus. Wins over advertise_addr.
  std::string socket_interface;
  // The address this node advertises to its peers (numeric); the interface
  // carrying it (Nic.addrs) becomes NCCL_SOCKET_IFNAME.
  std::string advertise_addr;
  // Non-empty when this node shares its host with other pods of the job
  // (equal boot_id in the join): the NCCL_HOSTID they all get (the node name).
  std::string nccl_hostid;
  // The user's environment: a variable set there (even to "") is never
  // advised, only noted.
  std::map<std::string, std::string> user_env;
};

struct EnvVar {
  std::string name;
  std::string value;
};

struct EnvAdvice {
  std::vector<EnvVar> vars;           // in a stable order.
  std::vector<std::string> warnings;  // one line each, for a person.
  std::vector<std::string> notes;     // why a variable was left out.
};

// Whether NCCL advice applies at all: a GPU of the probe is visible to the
// workers. Without one nothing uses NCCL (a CPU job's gloo reads none of
// its variables), so AdviseEnv advises nothing but the pod limits, with a
// note saying so (the agent does not even ask it).
bool NcclAdviceApplies(const v1::NodeProbe& probe);

// Derives, when NcclAdviceApplies(probe):
//  - NCCL_SOCKET_IFNAME="=<if>" (exact match) for context.socket_interface,
//    else the NET interface whose addrs hold context.advertise_addr;
//  - NCCL_IB_HCA="=dev:port,..." (exact match): the ACTIVE ports of the
//    InfiniBand devices, or of the RoCE (Ethernet link layer) devices when
//    there is no InfiniBand one (an Ethernet port on an InfiniBand node is
//    storage or management, and NCCL should not mix them);
//  - CUDA_DEVICE_ORDER=PCI_BUS_ID when there are GPUs (CUDA ordinals then
//    follow the bus order NVML and the probe use);
//  - NCCL_HOSTID=context.nccl_hostid when set, with a note on what else
//    co-located pods need;
// and always the warnings: PodLimitWarnings(probe).
EnvAdvice AdviseEnv(const v1::NodeProbe& probe, const EnvContext& context);

// The pod-limit warnings (also in NodeProbe.warnings): /dev/shm under 1 GiB
// (with the fix, an emptyDir of medium Memory at /dev/shm) and a memlock
// limit when the node has GPUs or InfiniBand/RoCE devices (with the fix).
std::vector<std::string> PodLimitWarnings(const v1::NodeProbe& probe);

// The NCCL socket interface of a multi-node job's node, derived the same way
// on every node: the interface this host routes to the first numeric
// address of `job_addrs` (MASTER_ADDR, then every node's address in rank
// order, this node's own included: routing to it gives the interface that
// carries it). Names are skipped, never resolved. "" when no address is
// numeric or the kernel cannot tell.
std::string JobSocketInterface(const std::vector<std::string>& job_addrs);

// The local interface the kernel would use to reach `numeric_addr` (an IPv4
// or IPv6 address): a UDP connect(2), which sends nothing, then getsockname(2)
// matched against getifaddrs(3). "" when it cannot tell. For
// EnvContext.socket_interface, with the master's address.
std::string InterfaceRoutingTo(const std::string& numeric_addr);

// The variables NCCL loads from its own configuration files, which it sets
// without overwriting the environment (so they count as the user's):
// $NCCL_CONF_FILE, else $HOME/.nccl.conf, and /etc/nccl.conf, read below
// `root` ("" for "/"), each at most 64 KiB; "KEY=VALUE" lines, '#' comments.
// An earlier file wins, as in NCCL.
std::map<std::string, std::string> NcclConfFileVars(const std::map<std::string, std::string>& env,
                                                    const std::string& root = "");

// `value` in single quotes for sh ("it's" -> 'it'\''s').
std::string ShellQuote(absl::string_view value);

// For `--format=env`: "export NAME='value'" lines (names that are not shell
// identifiers are dropped), then warnings and notes as "# warning: ..." and
// "# note: ..." lines (control bytes escaped, so a line cannot break out).
std::string FormatEnvAdvice(const EnvAdvice& advice);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_ENV_ADVICE_H_

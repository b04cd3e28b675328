// `trainlet probe`: what this node has (GPUs, NICs, NUMA nodes, /dev/shm,
// memlock, NVML and NCCL), printed as JSON (the trainlet.v1.NodeProbe
// message), as an NCCL topology file (NCCL_TOPO_FILE), or as the environment
// advice the agent applies (sh `export` lines). The same probe every agent
// runs at start (topology/probe.h), plus NCCL's version.
//
// Single-threaded apart from the bounded probe thread (agent/node_probe.h).
#ifndef TRAINLET_CMD_PROBE_COMMAND_H_
#define TRAINLET_CMD_PROBE_COMMAND_H_

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/options.h"
#include "topology/probe.h"

namespace trainlet::agent {

struct ProbeCommandOptions {
  bool help = false;
  std::string format = "json";  // json, nccl-topo or env.
  absl::Duration timeout = absl::Seconds(10);
  topology::ProbeOptions probe;
};

// Parses the words after "probe" and the TRAINLET_* variables.
// InvalidArgument naming the input.
absl::StatusOr<ProbeCommandOptions> ParseProbeOptions(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env);

// Probes as parsed; writes the result to `out` and errors to `err`; returns
// the exit code: 0, 69 (the probe did not finish within --timeout), 78 (an
// NCCL topology file for this node would exceed NCCL's parser limits).
int RunProbe(const ProbeCommandOptions& options, const std::map<std::string, std::string>& env,
             std::ostream& out, std::ostream& err);

// Both, with `args` (the words after "probe"): 64 for a usage error.
int RunProbeCommand(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env, std::ostream& out,
                    std::ostream& err);

std::string ProbeHelpText();
// Its option table (drives parsing, TRAINLET_* names and help).
const std::vector<OptionSpec>& ProbeOptionTable();

// The interface of the default IPv4 route in a /proc/net/route text; empty
// when there is none.
std::string DefaultRouteInterface(const std::string& route_text);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_PROBE_COMMAND_H_

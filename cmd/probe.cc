// `trainlet probe [OPTIONS]`: what this node has (cmd/probe_command.h,
// docs/topology.md).
#include <iostream>
#include <utility>

#include "cmd/command.h"
#include "cmd/probe_command.h"

namespace trainlet::cmd {
namespace {

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env& env) {
  absl::StatusOr<agent::ProbeCommandOptions> options = agent::ParseProbeOptions(args, env);
  if (!options.ok()) return options.status();
  Invocation invocation;
  invocation.help = options->help;
  invocation.run = [options = *std::move(options), env](std::string*) {
    return agent::RunProbe(options, env, std::cout, std::cerr);
  };
  return invocation;
}

}  // namespace

const Command kProbeCommand = {
    "probe",
    "probe [options]",
    "Print what this node has (GPUs, NICs, NUMA, /dev/shm, NVML, NCCL) as\n"
    "JSON, an NCCL topology file, or NCCL environment advice.",
    /*reads_env=*/true,
    /*entrypoint=*/false,
    /*exits_at_once=*/true,  // a probe past its timeout may still be inside NVML.
    Parse,
    agent::ProbeHelpText,
};

}  // namespace trainlet::cmd

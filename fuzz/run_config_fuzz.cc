// Fuzz target: ParseRunConfig, the whole config layer of `trainlet run`, over
// fuzzed arguments, environment and machine facts: the config is a pure
// function of them (no hardware, no DNS: the node probe is the agent's), so
// every input must give a config that holds together or a usage or
// configuration error (exit 64 or 78), never a crash.
// Input: lines; "E:NAME=VALUE" lines go to the environment, "S:KEY=VALUE"
// set a fact of the machine (hostname, fqdn, cpus, gpus, gpu_devices, probe,
// deferrable), every other line is one argument.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/exit_codes.h"
#include "config/run_config.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

namespace {

void SetFact(const std::string& key, const std::string& value, agent::SystemInfo* sys) {
  int n = 0;
  const bool number = absl::SimpleAtoi(value, &n);
  if (key == "hostname") sys->hostname = value;
  if (key == "fqdn") sys->fqdn = value;
  if (key == "cpus" && number) sys->cpu_count = n;
  if (key == "gpus" && number) sys->gpu_count = n;
  if (key == "gpu_devices" && number) sys->gpu_devices = n;
  if (key == "probe") sys->node_probe_available = value == "1";
  if (key == "deferrable") sys->node_probe_deferrable = value == "1";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  agent::SystemInfo sys;
  sys.root = "/nonexistent";  // no token Secret, no NCCL config files
  sys.hostname = "fuzz-host";
  sys.local_addrs = [] { return std::vector<std::string>{"10.0.0.7"}; };
  for (std::string& line : trainlet::fuzz::SplitLines(trainlet::fuzz::AsText(data, size))) {
    const size_t eq = line.find('=');
    if (absl::StartsWith(line, "E:") && eq != std::string::npos) {
      env[line.substr(2, eq - 2)] = line.substr(eq + 1);
    } else if (absl::StartsWith(line, "S:") && eq != std::string::npos) {
      SetFact(line.substr(2, eq - 2), line.substr(eq + 1), &sys);
    } else {
      args.push_back(std::move(line));
    }
  }
  absl::StatusOr<agent::RunConfig> c = agent::ParseRunConfig(args, env, sys);
  if (c.ok() && c->node_probe_timing == agent::NodeProbeTiming::kBeforeWorkers) {
    // The agent's probe did not answer in time: the count from the facts.
    absl::Status s = agent::ResolveWithNodeProbe(nullptr, "fuzz", env, sys, &*c);
    if (!s.ok()) c = s;
  }
  if (!c.ok()) {
    FUZZ_CHECK(trainlet::ExitCodeForConfigError(c.status()) != trainlet::kExitInternal,
               c.status().ToString());
    return 0;
  }
  if (c->help_requested) return 0;
  FUZZ_CHECK(!c->command.empty(), "no command");
  FUZZ_CHECK(c->nnodes.min >= 1 && c->nnodes.min <= c->nnodes.max, "nnodes");
  FUZZ_CHECK(c->node_rank_hint < c->nnodes.max, "rank hint >= nnodes");
  FUZZ_CHECK(c->nproc_per_node >= 1 && c->nproc_per_node <= agent::kMaxNprocPerNode,
             std::to_string(c->nproc_per_node));
  FUZZ_CHECK(c->coordinator_port >= 0 && c->coordinator_port <= 65535, "coordinator port");
  FUZZ_CHECK(!c->coordinator_host.empty(), "no coordinator host");
  FUZZ_CHECK(!c->bind_addr.empty() && !c->health_bind_addr.empty(), "no listening address");
  FUZZ_CHECK(!c->node_id.empty() && !c->job_id.empty(), "no identity");
  FUZZ_CHECK(c->join_timeout > absl::ZeroDuration(), "join timeout");
  FUZZ_CHECK(c->policy.heartbeat_timeout > absl::ZeroDuration(), "heartbeat timeout");
  FUZZ_CHECK(!c->in_process_coordinator || c->nnodes.max == 1, "in-process with several nodes");
  FUZZ_CHECK(c->host_coordinator != agent::HostCoordinator::kNo || !c->in_process_coordinator,
             "in-process but not hosting");
  FUZZ_CHECK(c->health_port == 0 || c->health_port != c->master_port, "port clash");
  return 0;
}

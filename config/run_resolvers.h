// The steps of RunConfigFromOptions() (run_config.h), one concern each, run
// in this order; each reads the parsed options, the machine's facts and what
// the steps before it resolved, and fills in its part of the RunConfig:
//
//   ResolveTopology           Kubernetes discovery, --standalone, torchrun's
//                             --rdzv-backend, Volcano tasks, nnodes
//   ResolveWorkers            the node probe's plan, --gpu-binding,
//                             --bind-numa, nproc-per-node
//   ResolveCoordinatorAddress the node rank hint, where the coordinator is,
//                             that every node can find it
//   ResolveCoordinatorHost    a single-node run, who hosts the coordinator,
//                             the listening addresses
//   ResolveIdentity           job id, node id, the advertised address
//   ResolveSecurity           token, TLS
//   ResolveServices           MASTER_PORT, health port, controller reports,
//                             ports that clash
//   ResolveRoundPolicy        timeouts, restarts, output, log level, the
//                             warnings about the whole job
//
// Each value: its flag, else its TRAINLET_* variable, else Kubernetes
// discovery, else the option table's default (the table is the only place a
// default is written; RunOptionTable()). Pure functions but for the reads
// run_config.h names; thread-compatible.
#ifndef TRAINLET_CONFIG_RUN_RESOLVERS_H_
#define TRAINLET_CONFIG_RUN_RESOLVERS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/k8s_discovery.h"
#include "config/options.h"
#include "config/run_config.h"
#include "config/system_probe.h"

namespace trainlet::agent {

// What every step reads, and what a step found that later ones need to
// decide or to explain (in their errors) but RunConfig does not hold.
struct RunInputs {
  const ParsedOptions& parsed;
  const std::vector<OptionSpec>& table;  // RunOptionTable(), maybe with a command's own.
  const RunConfigMode& mode;
  const std::map<std::string, std::string>& env;
  const SystemInfo& sys;

  bool launcher() const { return mode.mpi == MpiRole::kLauncher; }
  bool mpi_worker() const { return mode.mpi == MpiRole::kWorker; }

  // ResolveTopology: what Kubernetes says (less what --standalone drops),
  // where nnodes came from, and whether the job has several nodes.
  KubernetesDiscovery k8s;
  OptionValue nnodes_value;
  bool multi_node = false;
  // ResolveCoordinatorAddress: where the rank hint came from, and whether a
  // coordinator address was configured at all.
  std::optional<OptionValue> rank_value;
  bool coordinator_configured = false;
  // ResolveCoordinatorHost: nothing configured, a local single-node run.
  bool single_local = false;
};

absl::Status ResolveTopology(RunInputs* in, RunConfig* c);
absl::Status ResolveWorkers(RunInputs* in, RunConfig* c);
absl::Status ResolveCoordinatorAddress(RunInputs* in, RunConfig* c);
absl::Status ResolveCoordinatorHost(RunInputs* in, RunConfig* c);
absl::Status ResolveIdentity(RunInputs* in, RunConfig* c);
absl::Status ResolveSecurity(RunInputs* in, RunConfig* c);
absl::Status ResolveServices(RunInputs* in, RunConfig* c);
absl::Status ResolveRoundPolicy(RunInputs* in, RunConfig* c);
absl::Status ResolveRankOrder(RunInputs* in, RunConfig* c);

// The steps in the order RunConfigFromOptions() runs them.
using RunStep = absl::Status (*)(RunInputs* in, RunConfig* c);
inline constexpr RunStep kRunSteps[] = {
    &ResolveTopology,        &ResolveWorkers,     &ResolveCoordinatorAddress,
    &ResolveCoordinatorHost, &ResolveIdentity,    &ResolveSecurity,
    &ResolveServices,        &ResolveRoundPolicy, &ResolveRankOrder,
};

// The worker count from c->nproc_kind and c->nproc_request over these GPU
// facts (SystemInfo's, or the node probe's visible GPUs): ResolveWorkers
// calls it unless the probe runs before the workers, ResolveWithNodeProbe
// then. Adds the discovery note that says how the count was found.
absl::Status ResolveWorkerCount(int cpu_count, int gpu_count, const std::string& gpu_note,
                                RunConfig* c);

// ---- Shared by the steps.

// The value of `name` from its flag or TRAINLET_* variable, else from
// Kubernetes discovery, else nullopt.
std::optional<OptionValue> Pick(const ParsedOptions& parsed, absl::string_view name,
                                const std::optional<Discovered>& discovered);

// "from --nnodes", "from PET_NNODES", "the default".
std::string OriginPhrase(const OptionValue& v);

// Records a value Kubernetes discovery gave in c->discovery_notes
// ("node rank 2 from JOB_COMPLETION_INDEX").
void NoteDiscovered(const OptionValue& v, absl::string_view what, RunConfig* c);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_RUN_RESOLVERS_H_

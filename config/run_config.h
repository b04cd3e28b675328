// The configuration of `trainlet run [OPTIONS] -- COMMAND [ARGS...]`: one
// agent per node that joins the job's coordinator (hosting it when it is node
// rank 0, or when the coordinator address is this host's own), starts
// nproc-per-node workers and supervises them.
//
// ParseRunConfig() turns the words after "run", the process environment and
// the machine's facts (SystemInfo) into a validated RunConfig. It does no I/O
// on hardware: where the node probe's answer can change the workers (their
// count, placement, NCCL advice), the config plans the probe
// (node_probe_timing) and the agent runs it (agent/node_probe.h), then hands
// its answer to ResolveWithNodeProbe(). The steps are config/run_resolvers.h's,
// each a pure function of its inputs. Each value comes from, in
// order: its flag, its TRAINLET_* variable, Kubernetes discovery
// (k8s_discovery.h), its default. With nothing set at all the result is a
// local single-node run, like plain torchrun --standalone: nnodes 1, node
// rank 0, one worker per visible GPU (or 1), the coordinator hosted on
// 127.0.0.1 on a free port, no health server outside Kubernetes.
// docs/configuration.md is the user copy.
//
// Errors: InvalidArgument for a malformed or unknown flag or value, a
// torchrun flag (with trainlet's equivalent), no way to find the
// coordinator, or more than one worker per node for Paddle's launcher
// (DetectNestedLauncher(); nproc-per-node defaults to 1 for it) (exit 64);
// FailedPrecondition for values that are well-formed but cannot make a job:
// rank hint >= nnodes, a JobSet/Kubeflow pod without a node count, a Volcano
// job of several tasks without an explicit node count and coordinator
// (KubernetesDiscovery::volcano_tasks), an unreadable or empty token file,
// TLS options given in part or naming unusable files, gpu workers without GPUs, no hostname for the
// node id (exit 78; see ExitCodeForConfigError()).
//
// Pure function except for reading the token, TLS and NCCL config files and
// calling SystemInfo::resolve (at most once: for a coordinator name that is
// neither loopback, an address of this host nor its own name, when no rank
// hint decides who hosts it; or for this host's canonical name when it hosts
// a multi-node job with no coordinator address and no FQDN); thread-compatible.
#ifndef TRAINLET_CONFIG_RUN_CONFIG_H_
#define TRAINLET_CONFIG_RUN_CONFIG_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "config/k8s_discovery.h"
#include "config/options.h"
#include "config/system_probe.h"
#include "progress/output_progress.h"
#include "trainlet/v1/rendezvous.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

// kDefault: the visible GPUs, or 1 without any (torchrun's default is 1).
enum class NprocKind { kDefault, kFixed, kAuto, kGpu, kCpu };

// The numbers inside the option table's computed defaults (RunOptionTable()
// prints them, the resolvers apply them; kDefaultCoordinatorPort is
// options.h's).
inline constexpr int kDefaultMasterPort = 29500;
inline constexpr int kKubernetesHealthPort = 29401;
inline constexpr int kDefaultControllerPort = 29600;
inline constexpr int kMaxNprocPerNode = 1024;

// When the agent runs the node probe (topology/probe.h, agent/node_probe.h).
enum class NodeProbeTiming {
  kOff,  // --probe-timeout=0, or a caller that runs none (SystemInfo::node_probe_available).
  // Before the workers start, waiting at most --probe-timeout, its answer
  // given to ResolveWithNodeProbe(): the worker count, placement and NCCL
  // advice may depend on it.
  kBeforeWorkers,
  // Once the workers run and the agent first idles, only to log its summary
  // and warnings (a small /dev/shm, say): its answer could change no
  // worker's environment (a single-node run, no /dev/nvidia* device and no
  // NVML, no --bind-numa), so nobody waits for it, and a job that ends first
  // never pays for it.
  kOnceWorkersRun,
};

// --nproc-per-node as given, kept so that the worker count can be resolved
// once the node probe has answered (ResolveWithNodeProbe()).
// Its kind is RunConfig::nproc_kind.
struct NprocRequest {
  int fixed = 0;                     // kFixed's N.
  std::optional<OptionValue> value;  // where it came from; none: the default.
  bool nested_paddle = false;        // COMMAND is Paddle's launcher: 1 by default.
};

// Whether this agent runs the job's coordinator.
enum class HostCoordinator {
  kNo,   // join the one at coordinator_host:coordinator_port.
  kYes,  // host it (node rank 0, or a single-node run); fail if the port is taken.
  // Host it if this agent can bind the port, else join the agent that did:
  // a local coordinator address and no node rank (several agents on one
  // host), as torchrun's c10d rendezvous does.
  kIfPortFree,
};

// Every value is set by the resolvers (run_resolvers.h) from the options,
// the machine's facts and RunOptionTable()'s defaults: no default lives here.
struct RunConfig {
  bool help_requested = false;  // -h/--help: print RunHelpText(), exit 0.
  NnodesRange nnodes;           // --nnodes N | MIN:MAX
  // --nproc-per-node N|auto|gpu|cpu, resolved to nproc_per_node with
  // SystemInfo: default = visible GPUs, else 1; auto = GPUs if any, else
  // CPUs; gpu = GPUs (error if none); cpu = CPUs; N in 1..1024.
  NprocKind nproc_kind = NprocKind::kDefault;
  // 0 until resolved: with node_probe_timing kBeforeWorkers, by
  // ResolveWithNodeProbe().
  int nproc_per_node = 0;
  NprocRequest nproc_request;
  int node_rank_hint = -1;  // --node-rank; -1 = none (the coordinator picks).
  // The hint is the pod's index found by Kubernetes discovery, not an
  // explicit --node-rank: the topology order may move it (JoinRequest).
  bool node_rank_from_index = false;
  // The rank order (docs/topology.md, "Rank order"): --topology's domains,
  // then those --topology-file holds for --topology-keys, widest first;
  // the scheduler's mark found there (kueue.x-k8s.io/tas...); --rank-order.
  std::vector<std::pair<std::string, std::string>> topology_domains;
  std::string scheduler_placement;
  v1::RankOrder rank_order = v1::RANK_ORDER_AUTO;
  std::string coordinator_host;  // --coordinator HOST[:PORT]; unbracketed IPv6.
  // 0: any free port (a single-node run with nothing configured); the agent
  // hosting the coordinator then dials the port it bound.
  int coordinator_port = 0;
  HostCoordinator host_coordinator = HostCoordinator::kNo;  // --host-coordinator
  // Where the coordinator listens (an IP literal, unbracketed IPv6):
  // --bind-addr, else loopback for a single-node job or a loopback
  // coordinator address ("::1" when that address is ::1, else 127.0.0.1),
  // else 0.0.0.0. The hosting agent dials the coordinator at this address
  // (127.0.0.1 for 0.0.0.0, ::1 for ::).
  std::string bind_addr;
  // Where the health server listens: --bind-addr, else 0.0.0.0 in Kubernetes
  // (kubelet probes the pod IP), else bind_addr.
  std::string health_bind_addr;
  std::string job_id;  // --job-id
  // --token-file, else in Kubernetes kKubernetesTokenPath when that file
  // exists; empty = no authentication.
  std::string token_file;
  std::string token;  // its content minus trailing whitespace; never empty with a file.
  // --tls-cert/--tls-key/--tls-ca/--tls-dir, checked (ParseTlsOptions);
  // tls.server_name from --tls-server-name, else empty (CoordinatorTlsName).
  rendezvous::TlsConfig tls;
  // --master-port; 0 (a single-node run with nothing configured): a free port
  // the agent picks at start.
  int master_port = 0;
  // --grace-period. Its default leaves room below Kubernetes' default
  // terminationGracePeriodSeconds (30), so that trainlet's SIGKILL and exit
  // come before the kubelet's (docs/kubernetes.md).
  absl::Duration grace_period;
  absl::Duration join_timeout;  // --join-timeout
  // --hang-timeout: a worker that reported progress and then stays silent
  // this long is declared hung (docs/progress.md); zero: off.
  absl::Duration hang_timeout;
  std::string node_id;  // --node-id, default hostname.
  // The address every peer can reach this node at; MASTER_ADDR and the other
  // address variables when this node is rank 0. --advertise-addr, else, on a
  // node that may host the coordinator (host_coordinator != kNo): the
  // coordinator host when it was configured and is not loopback (exactly what
  // peers dial); "127.0.0.1" (or "::1") when the whole job is on this host
  // (outside Kubernetes, or a single-node job); else this host's FQDN,
  // canonical name or hostname. Empty on other nodes: the coordinator
  // records the address their join comes from.
  std::string advertise_addr;
  // The name peers dial this node's coordinator at when it is not
  // advertise_addr: an MPI launcher in a JobSet or Volcano pod with no
  // coordinator and no --advertise-addr configured advertises its FQDN, but
  // its workers dial <hostname>.<subdomain>. Empty otherwise.
  std::string coordinator_dialled_name;
  // --health-port; 0 = no health server. Default 29401 in Kubernetes, else 0.
  int health_port = 0;
  // --controller as "host:port" (port 29600 unless given); empty: no
  // health reports (agent/reporter.h).
  std::string controller;
  absl::Duration report_interval;  // --report-interval, 100ms..1h.
  // --kubeflow-progress: send the progress to Kubeflow Trainer's status
  // endpoint where the pod has one (kubeflow/trainer_status.h).
  bool kubeflow_progress = true;
  // A single-node run with no coordinator configured (or --standalone): the
  // coordinator runs inside this agent and is called directly, with no
  // server, client or socket (docs/configuration.md, "A single-node run").
  bool in_process_coordinator = false;
  // --progress-from-output (progress/output_progress.h); in effect where
  // the agent reads the workers' output: prefix_output or relay_output.
  OutputProgressSpec progress_from_output;
  bool prefix_output = false;  // --prefix-output
  // The agent relays the workers' output unchanged (no prefix) to read it:
  // --progress-from-output set explicitly (flag or env) to anything
  // but off, without --prefix-output. The default auto relays nothing
  // (docs/progress.md, "Progress from output").
  bool relay_output = false;
  GpuBinding gpu_binding = GpuBinding::kList;  // --gpu-binding
  bool bind_numa = false;                      // --bind-numa
  bool warm_workers = false;                   // --warm-workers
  std::vector<std::string> preload;            // --preload; empty: torch if importable
  std::string preflight_path;                  // --preflight-path; "": none
  bool preflight_gpu = false;                  // --preflight-gpu
  int preflight_min_gpu_busbw = 0;             // --preflight-min-gpu-busbw, GB/s; 0: none
  int preflight_port = 0;                      // --preflight-port; 0: any free port
  bool agent_store = false;                    // --agent-store
  int agent_store_port = 0;                    // --agent-store-port; 0: master_port - 1
  absl::Duration probe_timeout;                // --probe-timeout; 0: no probe.
  NodeProbeTiming node_probe_timing = NodeProbeTiming::kOff;
  // The node probe's result (ResolveWithNodeProbe()); null when it is off,
  // unavailable, too slow or not waited for. Placement, NCCL advice and the
  // join's topology come from it.
  std::shared_ptr<const v1::NodeProbe> node_probe;
  std::vector<int> allowed_cpus;  // SystemInfo's, for --bind-numa.
  // The variables NCCL's own config files set (topology::NcclConfFileVars),
  // read once at start with the probe: NCCL advice never overrides them.
  std::map<std::string, std::string> nccl_conf_vars;
  LogLevel log_level = LogLevel::kInfo;  // --log-level
  RoundPolicy policy;  // --max-restarts, --last-call, --heartbeat-timeout, --min-nodes-timeout
  std::vector<std::string> command;  // after `--`; never empty unless help.
  // Lines the agent logs at INFO once at start, as they are: what it made
  // of a torchrun flag that changes nothing here (--rdzv-backend=c10d).
  std::vector<std::string> notes;
  // "node rank 2 from JOB_COMPLETION_INDEX", ... one per value that did not
  // come from a flag or TRAINLET_* variable, for a startup log line.
  std::vector<std::string> discovery_notes;
  // Configuration the agent should warn about once at start (a multi-node
  // job without a token, ...). Each entry is one complete sentence.
  std::vector<std::string> warnings;
};

// Which command the configuration is for. The MPI commands share `run`'s
// config layer with these differences (docs/mpi.md):
//   kLauncher  --nnodes counts worker pods (the job has one node more: the
//              launcher); it hosts the coordinator unless --coordinator names
//              another host; no node rank; COMMAND required.
//   kWorker    never hosts the coordinator: --coordinator, else in a JobSet
//              pod <jobset>-launcher-0-0.<subdomain>; --nnodes optional; no
//              COMMAND; advertises its own name (the hostfiles' entry).
// In JobSet pods both take the job id <jobset> (the hostname prefix without
// its replicated-job name), so that launcher and workers agree.
struct RunConfigMode {
  absl::string_view usage;  // quoted in errors.
  MpiRole mpi = MpiRole::kNone;
};

// `args` are the words after "run"; `env` the agent's environment.
absl::StatusOr<RunConfig> ParseRunConfig(const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys);

// The config from options already parsed against `table` (which holds every
// option of RunOptionTable(), maybe hidden, plus the command's own).
absl::StatusOr<RunConfig> RunConfigFromOptions(const ParsedOptions& parsed,
                                               const std::vector<OptionSpec>& table,
                                               const RunConfigMode& mode,
                                               const std::map<std::string, std::string>& env,
                                               const SystemInfo& sys);

// The rest of the config once the node probe planned before the workers
// (node_probe_timing kBeforeWorkers) has answered, as the agent ran it:
// `probe` its answer, null when it did not finish within probe_timeout
// (`note` says why: a warning, and the worker count from /dev/nvidia*).
// Resolves the worker count (where NVML or the NVIDIA driver listed the
// container's GPUs, its visible GPUs count) and reads NCCL's own config
// files (`env`, below sys.root). Errors: FailedPrecondition for
// --nproc-per-node=gpu without a GPU; InvalidArgument for several workers
// under Paddle's launcher. Pure but for those files.
absl::Status ResolveWithNodeProbe(std::shared_ptr<const v1::NodeProbe> probe,
                                  absl::string_view note,
                                  const std::map<std::string, std::string>& env,
                                  const SystemInfo& sys, RunConfig* config);

// The name the coordinator's TLS certificate must carry, as this agent
// checks it: --tls-server-name; else, when this agent hosts the coordinator
// (it dials it on loopback), the address its peers dial
// (coordinator_dialled_name, else advertise_addr);
// else empty: the host of --coordinator, which the client dials.
std::string CoordinatorTlsName(const RunConfig& config, bool hosting);

// The option table of `trainlet run` (drives parsing, env names and help).
const std::vector<OptionSpec>& RunOptionTable();
std::string RunHelpText();

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_RUN_CONFIG_H_

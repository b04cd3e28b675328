#include "config/run_config.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kRunUsage = "trainlet run [OPTIONS] -- COMMAND [ARGS...]";
constexpr absl::string_view kRunDescription =
    "Joins the job's coordinator (hosting it on node rank 0, or when the\n"
    "coordinator address is this host's own), then runs COMMAND as nproc-per-node\n"
    "worker processes with RANK, WORLD_SIZE, MASTER_ADDR, ... set, and supervises\n"
    "them. With no options at all it is a single-node run, like torchrun\n"
    "--standalone: one worker per visible GPU (or 1), the coordinator inside the\n"
    "agent (no network). See docs/configuration.md and docs/environment.md.";

// torchrun's --log-dir, --redirects and --tee write each local rank's
// output to DIR/<run id>_*/attempt_<restart>/<local rank>/{stdout,stderr}.log
// (--tee: and to the console). trainlet passes the output through to the
// pod's log, where a log collector finds it; a file per rank is COMMAND's.
constexpr absl::string_view kLogFilesHint =
    "trainlet writes no log files: every worker's output goes to the agent's stdout and stderr "
    "(the pod's log), and --prefix-output starts each line with its rank. For a file per rank, "
    "let COMMAND write it: `-- sh -c 'exec python train.py > DIR/rank$RANK.log 2>&1'` (as "
    "--redirects=3), or `-- bash -c 'exec > >(tee DIR/rank$RANK.log) 2>&1; exec python "
    "train.py'` (as --tee=3)";

// torchrun's flags that trainlet does not take, with what to do instead.
const std::vector<ForeignFlag>& TorchrunFlags() {
  static const std::vector<ForeignFlag>* flags = new std::vector<ForeignFlag>{
      {"master-addr",
       "use --coordinator=HOST[:PORT] on every node (the address of the node that hosts the "
       "coordinator), or --advertise-addr=ADDR on the node that hosts it (the MASTER_ADDR every "
       "worker gets)"},
      {"rdzv-conf",
       "not needed: its settings are flags here: join_timeout is --join-timeout, "
       "last_call_timeout is --last-call, is_host is --host-coordinator"},
      {"local-addr", "use --advertise-addr=ADDR"},
      {"redirects", std::string(kLogFilesHint)},
      {"r", std::string(kLogFilesHint)},
      {"tee", std::string(kLogFilesHint)},
      {"t", std::string(kLogFilesHint)},
      {"log-dir", std::string(kLogFilesHint)},
      {"local-ranks-filter",
       "not supported: every worker's output goes to the pod's log; --prefix-output starts each "
       "line with its rank, so a reader can keep the ranks it wants"},
      {"monitor-interval", "not needed: the agent sees a worker's exit at once"},
      {"start-method", "not needed: workers are started with fork and exec"},
      {"role", "not supported: every worker has ROLE_NAME=default"},
      {"run-path", "not needed: put the command after --, as in `-- python train.py`"},
      {"m", "to run a module, put it after --: `-- python -m MODULE`"},
      {"module", "to run a module, put it after --: `-- python -m MODULE`"},
      {"no-python", "not needed: trainlet runs COMMAND as given"},
      {"use-env", "not needed: workers get LOCAL_RANK in their environment"},
      {"local-rank", "not needed: workers get LOCAL_RANK in their environment"},
  };
  return *flags;
}

}  // namespace

const std::vector<OptionSpec>& RunOptionTable() {
  static const std::vector<OptionSpec>* table = [] {
    auto* t = new std::vector<OptionSpec>{
        {"nnodes", OptionKind::kString, "N|MIN:MAX", "1",
         "Number of nodes, or MIN:MAX for an elastic job. Kubernetes: PET_NNODES (required in "
         "a JobSet or Kubeflow pod)."},
        {"nproc-per-node", OptionKind::kString, "N|auto|gpu|cpu",
         "the visible GPUs, or 1 without any; 1 for Paddle's launcher",
         "Workers on this node: N (1..1024), auto (GPUs if any, else CPUs), gpu or cpu. GPUs "
         "are /dev/nvidia[0-9]* narrowed by NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES. "
         "Kubernetes: PET_NPROC_PER_NODE."},
        {"node-rank", OptionKind::kInt, "N", "",
         "Preferred node rank, below nnodes; rank 0 hosts the coordinator, any other rank needs "
         "--coordinator. Kubernetes: PET_NODE_RANK, JOB_COMPLETION_INDEX, JobSet hostname."},
        {"coordinator", OptionKind::kString, "HOST[:PORT]",
         "none: a single-node run runs one inside the agent (no network)",
         absl::StrCat("Coordinator address, port ", kDefaultCoordinatorPort,
                      " unless given; IPv6 as [::1]:", kDefaultCoordinatorPort,
                      ". An address of this host (loopback, its own address or name) means "
                      "this agent hosts it. Kubernetes: PET_MASTER_ADDR (a host only), then "
                      "JobSet pod <jobset>-<rjob>-0-0.<subdomain>. --rdzv-endpoint is torchrun's "
                      "spelling."),
         /*hidden=*/false, /*flag_only=*/false, /*aliases=*/{"rdzv-endpoint"}},
        {"standalone", OptionKind::kBool, "", "false",
         "torchrun's --standalone: a single-node job on this host (nnodes 1, coordinator on "
         "loopback, any free port), whatever Kubernetes says; not with --nnodes>1, "
         "--coordinator or --node-rank>0."},
        {"job-id", OptionKind::kString, "ID", "trainlet",
         "Job id, [A-Za-z0-9._-]{1,128}; every node must use the same. Kubernetes: the "
         "JobSet hostname prefix <jobset>-<rjob>. torchrun's --rdzv-id sets it when this does "
         "not."},
        // torchrun's rendezvous flags that change nothing here: accepted, with
        // an INFO line (RunConfig::notes).
        {"rdzv-id", OptionKind::kString, "ID", "", "torchrun's: the job id, unless --job-id.",
         /*hidden=*/true, /*flag_only=*/true},
        {"rdzv-backend", OptionKind::kString, "c10d|static", "",
         "torchrun's: trainlet's own rendezvous serves either.", /*hidden=*/true,
         /*flag_only=*/true},
        {"token-file", OptionKind::kString, "PATH",
         "in Kubernetes /var/run/secrets/trainlet/token if present, else none",
         "File holding the job's shared secret (trailing whitespace ignored; an empty file is an "
         "error); none: no authentication."},
        {"master-port", OptionKind::kInt, "PORT",
         absl::StrCat(kDefaultMasterPort,
                      "; a free port for a single-node run with no coordinator"),
         "MASTER_PORT given to the workers (listened on by rank 0). Kubernetes: "
         "PET_MASTER_PORT."},
        {"bind-addr", OptionKind::kString, "ADDR",
         "127.0.0.1 for one node or a loopback coordinator, else 0.0.0.0",
         "IP address the coordinator and health servers listen on (:: for IPv6). Without it, "
         "the health server listens on 0.0.0.0 in Kubernetes."},
        {"grace-period", OptionKind::kDuration, "DURATION", "25s",
         "Time between SIGTERM and SIGKILL when stopping workers. In Kubernetes keep the pod's "
         "terminationGracePeriodSeconds at least 5 s above it (the defaults, 25 s and 30 s, "
         "do)."},
        {"join-timeout", OptionKind::kDuration, "DURATION", "10m",
         "Give up (exit 69) when no round has closed after this long."},
        {"hang-timeout", OptionKind::kDuration, "DURATION", "0",
         "0: off. Declare a local worker hung once it has reported progress "
         "(TRAINLET_PROGRESS_FILE, or its output: --progress-from-output) and then stays "
         "silent this long: every node saves every "
         "worker's evidence, then the job names the suspect (the rank not in a collective, "
         "else the oldest progress) and fails the round for it (exit 80 on its node when the "
         "job gives up on it); docs/progress.md."},
        {"node-id", OptionKind::kString, "ID", "the hostname",
         "Stable name of this node, unique in the job."},
        {"advertise-addr", OptionKind::kString, "ADDR",
         "on the node hosting the coordinator: the coordinator host, else 127.0.0.1 when the "
         "whole job is on this host, else this host's FQDN",
         "Address every peer reaches this node at (MASTER_ADDR when it is rank 0); on other "
         "nodes none: the address its join came from."},
        {"health-port", OptionKind::kInt, "PORT",
         absl::StrCat(kKubernetesHealthPort, " in Kubernetes, else 0 (none)"),
         "gRPC health port (grpc.health.v1, for kubelet probes); 0 disables it."},
        {"controller", OptionKind::kString, "HOST[:PORT]", "none (no reports)",
         absl::StrCat("Thin controller to send health reports to (`trainlet controller`), port ",
                      kDefaultControllerPort,
                      " unless given; reporting never blocks the job or changes its exit code.")},
        {"report-interval", OptionKind::kDuration, "DURATION", "5s",
         "At most one health report per interval to --controller, and one at once on a state "
         "change; 100ms..1h."},
        {"kubeflow-progress", OptionKind::kBool, "", "true",
         "Where the pod has Kubeflow Trainer's status endpoint (KUBEFLOW_TRAINER_SERVER_URL, "
         "Trainer's TrainJobStatus feature gate), the agent of node rank 0 sends the job's "
         "progress (percentage, remaining seconds, the progress line's numeric fields) into the "
         "TrainJob's status.trainerStatus, at most every 5s; false: never. docs/kubernetes.md."},
        {"host-coordinator", OptionKind::kString, "auto|yes|no", "auto",
         "Whether this agent runs the coordinator: auto = with node rank hint 0, or when "
         "--coordinator is an address of this host (with no rank hint and several nodes: the "
         "agent that binds the port); no = always join the one at --coordinator (a standalone "
         "`trainlet coordinator`)."},
        {"prefix-output", OptionKind::kBool, "", "false",
         "Prefix each line of worker output with the worker's rank."},
        {"progress-from-output", OptionKind::kString, "auto|off|FORMAT|REGEX", "auto",
         "Progress with no code: read each worker's step (and total, loss, lr) from the lines "
         "it prints, for --hang-timeout and the reports. Set explicitly without "
         "--prefix-output, the agent relays the output to read it, unchanged; the default auto "
         "reads only what --prefix-output relays. FORMAT: hf (Hugging Face Trainer), lightning, "
         "torchtitan, megatron (Megatron-LM, NeMo), deepspeed, demo; auto: the first of them a "
         "worker's lines match; REGEX: RE2 with named groups step (required), total, loss, lr. A "
         "worker that writes TRAINLET_PROGRESS_FILE is read from its file; docs/progress.md."},
        {"gpu-binding", OptionKind::kString, "list|single|none", "list",
         "How a worker sees its GPU (worker l's is visible GPU l, in PCI order): list = every "
         "visible GPU, so cuda:LOCAL_RANK is its own (torchrun's convention); single = only its "
         "own, as device 0; none = leave CUDA_VISIBLE_DEVICES alone."},
        {"bind-numa", OptionKind::kBool, "", "false",
         "Bind each worker's CPUs and memory to its GPU's NUMA node (without GPUs: spread "
         "workers over the NUMA nodes)."},
        {"warm-workers", OptionKind::kBool, "", "false",
         "Keep a standby Python interpreter per worker, --preload's modules imported, that "
         "becomes the next round's worker after a restart instead of a cold start; for COMMANDs "
         "`python [OPTIONS] SCRIPT|-m MODULE ...` (docs/warm-workers.md)."},
        {"preload", OptionKind::kString, "MODULES", "torch, when it is importable",
         "Comma-separated modules a warm standby imports while it waits (--warm-workers)."},
        {"preflight-path", OptionKind::kString, "PATH", "none",
         "Directory --preflight checks before each round: free space and a write, fsync, read "
         "and delete of a small file (typically the checkpoint directory)."},
        {"preflight-port", OptionKind::kInt, "PORT", "any free port",
         "Port of this agent's link measurer, which its ring neighbours connect to for "
         "--preflight's network measurement (docs/preflight.md, \"The network\")."},
        {"preflight-gpu", OptionKind::kBool, "", "false",
         "Add the GPU loopback to --preflight's checks before a join, when due: each GPU's "
         "memory bandwidth and an NCCL all-reduce among the pod's GPUs, in a helper process "
         "with the COMMAND's Python and torch (seconds; docs/preflight.md)."},
        {"preflight-min-gpu-busbw", OptionKind::kInt, "GB/s", "0 (none)",
         "--preflight-gpu: the NCCL all-reduce's bus bandwidth below which this node fails."},
        {"agent-store", OptionKind::kBool, "", "false",
         "Host torch's c10d store in the agent (a Python process with torch imported, listening "
         "before the agent joins) instead of in rank 0, as torchrun does: a restarted round's "
         "workers find it listening at once (docs/warm-workers.md, \"The agent's store\")."},
        {"agent-store-port", OptionKind::kInt, "PORT", "--master-port - 1",
         "Port of --agent-store's store: the workers' MASTER_PORT (JAX, TF, XGBoost and Paddle "
         "keep --master-port)."},
        {"topology", OptionKind::kString, "KEY=VALUE,...", "none",
         "Where this node sits, widest domain first (zone=z1,switch=sw-12): the coordinator "
         "gives nodes sharing the narrowest domain neighbouring ranks (docs/topology.md, "
         "\"Rank order\")."},
        {"topology-file", OptionKind::kString, "PATH[,PATH]", "none",
         "Downward API labels or annotations file(s) (fieldPath metadata.labels or "
         "metadata.annotations) to read the --topology-keys from, and a topology-aware "
         "scheduler's placement by pod index (Kueue TAS, KAI segments)."},
        {"topology-keys", OptionKind::kString, "KEYS",
         "the EKS, GKE, Topograph, GPU-operator and zone labels, widest first",
         "Comma-separated label keys --topology-file is read for, widest domain first."},
        {"rank-order", OptionKind::kString, "auto|index|topology", "auto",
         "How node ranks are ordered: index = pod index (hints), as torchrun; topology = nodes "
         "sharing a domain get neighbouring ranks; auto = topology when a node sent its "
         "domains and no scheduler placed the pods by index. An explicit node rank wins."},
        {"probe-timeout", OptionKind::kDuration, "DURATION", "2s",
         "Time the node probe (GPUs, NICs, NUMA, /dev/shm; `trainlet probe`) may take at start "
         "before the agent goes on without it; 0 turns it off."},
    };
    for (OptionSpec& spec : TlsOptionSpecs(/*client=*/true)) t->push_back(std::move(spec));
    for (OptionSpec& spec : RoundPolicyOptionSpecs()) {
      if (spec.name == "max-restarts")
        absl::StrAppend(&spec.help, " Kubernetes: PET_MAX_RESTARTS.");
      t->push_back(std::move(spec));
    }
    return t;
  }();
  return *table;
}

std::string CoordinatorTlsName(const RunConfig& config, bool hosting) {
  if (!config.tls.server_name.empty()) return config.tls.server_name;
  if (!hosting) return "";
  return config.coordinator_dialled_name.empty() ? config.advertise_addr
                                                 : config.coordinator_dialled_name;
}

std::string RunHelpText() {
  return HelpText(kRunUsage, kRunDescription, RunOptionTable(), /*kubernetes_discovery=*/true);
}

absl::StatusOr<RunConfig> ParseRunConfig(const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys) {
  const std::vector<OptionSpec>& table = RunOptionTable();
  absl::StatusOr<ParsedOptions> parsed_or =
      ParseOptions(table, args, env, kRunUsage, TorchrunFlags());
  if (!parsed_or.ok()) return parsed_or.status();
  return RunConfigFromOptions(*parsed_or, table, RunConfigMode{kRunUsage, MpiRole::kNone}, env,
                              sys);
}

absl::StatusOr<RunConfig> RunConfigFromOptions(const ParsedOptions& parsed,
                                               const std::vector<OptionSpec>& table,
                                               const RunConfigMode& mode,
                                               const std::map<std::string, std::string>& env,
                                               const SystemInfo& sys) {
  RunConfig c;
  if (parsed.help_requested) {
    c.help_requested = true;
    return c;
  }
  if (mode.mpi == MpiRole::kWorker) {
    if (parsed.saw_separator) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainlet mpi-worker takes no COMMAND (the launcher's mpirun starts the ranks through "
          "this pod's sshd); usage: ",
          mode.usage));
    }
  } else if (!parsed.saw_separator || parsed.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no COMMAND after --; usage: ", mode.usage,
                     mode.mpi == MpiRole::kLauncher
                         ? " (e.g. trainlet mpi-launcher --nnodes=2 -- mpirun -np 4 ./app)"
                         : " (e.g. trainlet run --nnodes=2 -- python train.py)"));
  }
  c.command = parsed.command;
  RunInputs in{parsed, table, mode, env, sys};
  for (RunStep step : kRunSteps) {
    if (absl::Status s = step(&in, &c); !s.ok()) return s;
  }
  return c;
}

std::optional<OptionValue> Pick(const ParsedOptions& parsed, absl::string_view name,
                                const std::optional<Discovered>& discovered) {
  if (const OptionValue* v = parsed.Find(name)) return *v;
  if (discovered.has_value()) {
    return OptionValue{discovered->text, discovered->origin, ValueSource::kDiscovery};
  }
  return std::nullopt;
}

std::string OriginPhrase(const OptionValue& v) {
  return v.source == ValueSource::kDefault ? "the default" : absl::StrCat("from ", v.origin);
}

void NoteDiscovered(const OptionValue& v, absl::string_view what, RunConfig* c) {
  if (v.source == ValueSource::kDiscovery) {
    c->discovery_notes.push_back(absl::StrCat(what, " ", v.text, " from ", v.origin));
  }
}

}  // namespace trainlet::agent

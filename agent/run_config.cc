#include "agent/run_config.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/k8s_discovery.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kRunUsage = "trainlet run [OPTIONS] -- COMMAND [ARGS...]";
constexpr absl::string_view kRunDescription =
    "Joins the job's coordinator (hosting it on node rank 0), then runs COMMAND as\n"
    "nproc-per-node worker processes with RANK, WORLD_SIZE, MASTER_ADDR, ... set,\n"
    "and supervises them. With no options at all it is a single-node run, like\n"
    "plain torchrun. See docs/configuration.md and docs/environment.md.";

// The value of `name` from its flag or TRAINLET_* variable, else from
// Kubernetes discovery, else nullopt.
std::optional<OptionValue> Pick(const ParsedOptions& parsed, absl::string_view name,
                                const std::optional<Discovered>& discovered) {
  if (const OptionValue* v = parsed.Find(name)) return *v;
  if (discovered.has_value()) {
    return OptionValue{discovered->text, discovered->origin, ValueSource::kDiscovery};
  }
  return std::nullopt;
}

// "from --nnodes", "from PET_NNODES", "the default".
std::string OriginPhrase(const OptionValue& v) {
  return v.source == ValueSource::kDefault ? "the default" : absl::StrCat("from ", v.origin);
}

void Note(RunConfig* c, const OptionValue& v, absl::string_view what) {
  if (v.source == ValueSource::kDiscovery) {
    c->discovery_notes.push_back(absl::StrCat(what, " ", v.text, " from ", v.origin));
  }
}

absl::Status ResolveNproc(const OptionValue& v, const SystemInfo& sys, RunConfig* c) {
  std::string kind = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v.text));
  int cpus = std::clamp(sys.cpu_count, 1, kMaxNprocPerNode);
  std::string how;
  if (kind == "auto") {
    c->nproc_kind = NprocKind::kAuto;
    c->nproc_per_node = sys.gpu_count > 0 ? std::min(sys.gpu_count, kMaxNprocPerNode) : cpus;
    how = sys.gpu_count > 0 ? absl::StrCat("auto: ", sys.gpu_count, " GPUs")
                            : absl::StrCat("auto: no GPU, ", cpus, " CPUs");
  } else if (kind == "gpu") {
    c->nproc_kind = NprocKind::kGpu;
    if (sys.gpu_count <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          v.origin, "=gpu: no GPU found (looked for /dev/nvidia[0-9]*); use auto, cpu or N"));
    }
    c->nproc_per_node = std::min(sys.gpu_count, kMaxNprocPerNode);
    how = absl::StrCat("gpu: ", sys.gpu_count, " GPUs");
  } else if (kind == "cpu") {
    c->nproc_kind = NprocKind::kCpu;
    c->nproc_per_node = cpus;
    how = absl::StrCat("cpu: ", cpus, " CPUs");
  } else {
    absl::StatusOr<int> n = ParseIntValue(v, 1, kMaxNprocPerNode);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected N in 1..%d, auto, gpu or cpu, got \"%s\"", v.origin,
                          kMaxNprocPerNode, absl::CEscape(v.text)));
    }
    c->nproc_kind = NprocKind::kFixed;
    c->nproc_per_node = *n;
  }
  if (v.source == ValueSource::kDiscovery) {
    c->discovery_notes.push_back(absl::StrCat("nproc-per-node ", c->nproc_per_node, " from ",
                                              v.origin, "=", v.text,
                                              how.empty() ? "" : absl::StrCat(" (", how, ")")));
  } else if (!how.empty()) {
    c->discovery_notes.push_back(
        absl::StrCat("nproc-per-node ", c->nproc_per_node, " (", how, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeId(const OptionValue& v) {
  bool ok = !v.text.empty() && v.text.size() <= 253 &&
            std::all_of(v.text.begin(), v.text.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected 1 to 253 printable ASCII characters without spaces, got \"%s\"", v.origin,
        absl::CEscape(v.text)));
  }
  return absl::OkStatus();
}

// Ports this agent may listen on must differ from each other.
absl::Status CheckPortClash(absl::string_view a_flag, int a, absl::string_view b_flag, int b) {
  if (a != b) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: port %d is also %s; this node would listen on it twice, pick another",
                      a_flag, a, b_flag));
}

}  // namespace

const std::vector<OptionSpec>& RunOptionTable() {
  static const std::vector<OptionSpec>* table = [] {
    auto* t = new std::vector<OptionSpec>{
        {"nnodes", OptionKind::kString, "N|MIN:MAX", "1",
         "Number of nodes, or MIN:MAX for an elastic job. Kubernetes: PET_NNODES."},
        {"nproc-per-node", OptionKind::kString, "N|auto|gpu|cpu", "auto",
         "Workers on this node: N (1..1024), auto (GPUs if any, else CPUs), gpu or cpu. "
         "Kubernetes: PET_NPROC_PER_NODE."},
        {"node-rank", OptionKind::kInt, "N", "",
         "Preferred node rank, below nnodes; rank 0 hosts the coordinator. Kubernetes: "
         "PET_NODE_RANK, JOB_COMPLETION_INDEX, JobSet hostname."},
        {"coordinator", OptionKind::kString, "HOST[:PORT]",
         "127.0.0.1:29400 when no node count or coordinator is configured",
         "Coordinator address, port 29400 unless given; IPv6 as [::1]:29400. Kubernetes: "
         "PET_MASTER_ADDR, then JobSet pod <jobset>-<rjob>-0-0.<subdomain>."},
        {"job-id", OptionKind::kString, "ID", "trainlet",
         "Job id, [A-Za-z0-9._-]{1,128}; every node must use the same. Kubernetes: the "
         "JobSet hostname prefix <jobset>-<rjob>."},
        {"token-file", OptionKind::kString, "PATH", "",
         "File holding the job's shared secret (trailing whitespace ignored); none: no "
         "authentication."},
        {"master-port", OptionKind::kInt, "PORT", "29500",
         "MASTER_PORT given to the workers (listened on by rank 0). Kubernetes: "
         "PET_MASTER_PORT."},
        {"grace-period", OptionKind::kDuration, "DURATION", "30s",
         "Time between SIGTERM and SIGKILL when stopping workers."},
        {"join-timeout", OptionKind::kDuration, "DURATION", "10m",
         "Give up (exit 69) when no round has closed after this long."},
        {"node-id", OptionKind::kString, "ID", "the hostname",
         "Stable name of this node, unique in the job."},
        {"advertise-addr", OptionKind::kString, "ADDR", "",
         "Address peers use to reach this node (MASTER_ADDR when it is rank 0); none: the "
         "address its join came from."},
        {"health-port", OptionKind::kInt, "PORT", "29401",
         "gRPC health port (grpc.health.v1, for kubelet probes); 0 disables it."},
        {"host-coordinator", OptionKind::kString, "auto|yes|no", "auto",
         "Whether this agent runs the coordinator: auto = when its node rank hint is 0; no = "
         "always join the one at --coordinator (a standalone `trainlet coordinator`)."},
        {"prefix-output", OptionKind::kBool, "", "false",
         "Prefix each line of worker output with the worker's rank."},
    };
    for (OptionSpec& spec : RoundPolicyOptionSpecs()) t->push_back(std::move(spec));
    return t;
  }();
  return *table;
}

std::string RunHelpText() { return HelpText(kRunUsage, kRunDescription, RunOptionTable()); }

absl::StatusOr<RunConfig> ParseRunConfig(const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys) {
  const std::vector<OptionSpec>& table = RunOptionTable();
  absl::StatusOr<ParsedOptions> parsed_or = ParseOptions(table, args, env, kRunUsage);
  if (!parsed_or.ok()) return parsed_or.status();
  const ParsedOptions& parsed = *parsed_or;
  RunConfig c;
  if (parsed.help_requested) {
    c.help_requested = true;
    return c;
  }
  if (!parsed.saw_separator || parsed.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no COMMAND after --; usage: ", kRunUsage,
                     " (e.g. trainlet run --nnodes=2 -- python train.py)"));
  }
  c.command = parsed.command;
  const KubernetesDiscovery k8s = DiscoverKubernetes(env, sys);

  // nnodes.
  OptionValue nnodes_value =
      Pick(parsed, "nnodes", k8s.nnodes).value_or(ValueOrDefault(parsed, table, "nnodes"));
  absl::StatusOr<NnodesRange> nnodes = ParseNnodesValue(nnodes_value);
  if (!nnodes.ok()) return nnodes.status();
  c.nnodes = *nnodes;
  Note(&c, nnodes_value, "nnodes");

  // Workers on this node.
  OptionValue nproc_value = Pick(parsed, "nproc-per-node", k8s.nproc_per_node)
                                .value_or(ValueOrDefault(parsed, table, "nproc-per-node"));
  if (absl::Status s = ResolveNproc(nproc_value, sys, &c); !s.ok()) return s;

  // Node rank hint.
  std::optional<OptionValue> rank_value = Pick(parsed, "node-rank", k8s.node_rank);
  if (rank_value.has_value()) {
    absl::StatusOr<int> rank = ParseIntValue(*rank_value, 0, kMaxNodes - 1);
    if (!rank.ok()) return rank.status();
    c.node_rank_hint = *rank;
    Note(&c, *rank_value, "node rank");
  }

  // Coordinator.
  std::optional<OptionValue> coord_value = Pick(parsed, "coordinator", k8s.coordinator_host);
  if (coord_value.has_value() && coord_value->source == ValueSource::kDiscovery) {
    // Kubernetes gives a host only; the coordinator port stays ours.
    absl::StatusOr<std::string> host = ParseHostValue(*coord_value);
    if (!host.ok()) return host.status();
    c.coordinator_host = *host;
    Note(&c, *coord_value, "coordinator host");
  } else if (coord_value.has_value()) {
    absl::StatusOr<HostPort> hp = ParseHostPortValue(*coord_value, kDefaultCoordinatorPort);
    if (!hp.ok()) return hp.status();
    c.coordinator_host = hp->host;
    c.coordinator_port = hp->port;
  }
  if (c.node_rank_hint < 0 && c.coordinator_host.empty()) {
    if (c.nnodes.elastic() || c.nnodes.max > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot find the coordinator: pass --coordinator=HOST:PORT (or TRAINLET_COORDINATOR, "
          "PET_MASTER_ADDR), or --node-rank=0 on the node that hosts it; nnodes is ",
          NnodesToString(c.nnodes), " (", OriginPhrase(nnodes_value), ")"));
    }
    // Nothing configured: a local single-node run, like plain torchrun.
    c.node_rank_hint = 0;
    c.discovery_notes.push_back(
        "single-node run: no coordinator configured, hosting one on 127.0.0.1");
  }
  if (c.coordinator_host.empty()) c.coordinator_host = "127.0.0.1";  // Rank 0 hosts it.
  if (c.node_rank_hint >= c.nnodes.max) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: node rank %d must be below nnodes %s (%s); --nnodes is the number of nodes in the "
        "job",
        rank_value.has_value() ? rank_value->origin : "--node-rank", c.node_rank_hint,
        NnodesToString(c.nnodes), OriginPhrase(nnodes_value)));
  }
  const OptionValue host_value = ValueOrDefault(parsed, table, "host-coordinator");
  if (host_value.text == "auto") {
    c.host_coordinator = c.node_rank_hint == 0 ? HostCoordinator::kYes : HostCoordinator::kNo;
  } else if (host_value.text == "yes" || host_value.text == "no") {
    c.host_coordinator = host_value.text == "yes" ? HostCoordinator::kYes : HostCoordinator::kNo;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        host_value.origin, ": expected auto, yes or no, got \"", host_value.text, "\""));
  }

  // Job id.
  OptionValue job_value =
      Pick(parsed, "job-id", k8s.job_id).value_or(ValueOrDefault(parsed, table, "job-id"));
  if (absl::Status s = ValidateJobId(job_value); !s.ok()) return s;
  c.job_id = job_value.text;
  Note(&c, job_value, "job id");

  // Token.
  if (const OptionValue* token_file = parsed.Find("token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(*token_file);
    if (!token.ok()) return token.status();
    c.token_file = token_file->text;
    c.token = *std::move(token);
  }

  // Ports.
  OptionValue master_value = Pick(parsed, "master-port", k8s.master_port)
                                 .value_or(ValueOrDefault(parsed, table, "master-port"));
  absl::StatusOr<int> master_port = ParseIntValue(master_value, 1, 65535);
  if (!master_port.ok()) return master_port.status();
  c.master_port = *master_port;
  Note(&c, master_value, "master port");
  absl::StatusOr<int> health_port =
      ParseIntValue(ValueOrDefault(parsed, table, "health-port"), 0, 65535);
  if (!health_port.ok()) return health_port.status();
  c.health_port = *health_port;
  if (c.health_port != 0) {
    if (absl::Status s =
            CheckPortClash("--health-port", c.health_port, "--master-port", c.master_port);
        !s.ok()) {
      return s;
    }
    if (c.host_coordinator != HostCoordinator::kNo) {
      if (absl::Status s = CheckPortClash("--health-port", c.health_port, "the coordinator port",
                                          c.coordinator_port);
          !s.ok()) {
        return s;
      }
    }
  }
  if (c.host_coordinator != HostCoordinator::kNo) {
    if (absl::Status s = CheckPortClash("--master-port", c.master_port, "the coordinator port",
                                        c.coordinator_port);
        !s.ok()) {
      return s;
    }
  }

  // Durations.
  if (absl::Status s =
          ParseDurationOptions(parsed, table,
                               {
                                   {"grace-period", absl::ZeroDuration(), &c.grace_period},
                                   {"join-timeout", absl::Milliseconds(1), &c.join_timeout},
                               });
      !s.ok()) {
    return s;
  }

  // Identity.
  if (const OptionValue* node_id = parsed.Find("node-id")) {
    if (absl::Status s = ValidateNodeId(*node_id); !s.ok()) return s;
    c.node_id = node_id->text;
  } else if (sys.hostname.empty()) {
    return absl::FailedPreconditionError(
        "cannot determine the hostname for the node id: pass --node-id (or TRAINLET_NODE_ID)");
  } else {
    c.node_id = sys.hostname;
  }
  if (const OptionValue* addr = parsed.Find("advertise-addr")) {
    absl::StatusOr<std::string> host = ParseHostValue(*addr);
    if (!host.ok()) return host.status();
    c.advertise_addr = *host;
  }

  // Output, logging, restarts.
  absl::StatusOr<bool> prefix = ParseBoolValue(ValueOrDefault(parsed, table, "prefix-output"));
  if (!prefix.ok()) return prefix.status();
  c.prefix_output = *prefix;
  absl::StatusOr<LogLevel> level = ParseLogLevelValue(ValueOrDefault(parsed, table, "log-level"));
  if (!level.ok()) return level.status();
  c.log_level = *level;
  std::optional<OptionValue> restarts_value = Pick(parsed, "max-restarts", k8s.max_restarts);
  absl::StatusOr<RoundPolicy> policy = ParseRoundPolicy(parsed, table, c.nnodes, restarts_value);
  if (!policy.ok()) return policy.status();
  c.policy = *policy;
  if (restarts_value.has_value()) Note(&c, *restarts_value, "max restarts");
  return c;
}

}  // namespace trainlet::agent

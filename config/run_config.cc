#include "config/run_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/host_names.h"
#include "config/k8s_discovery.h"
#include "config/nested_launcher.h"
#include "topology/env_advice.h"
#include "topology/visibility.h"

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

absl::Status ResolveNproc(const std::optional<OptionValue>& value, const SystemInfo& sys,
                          RunConfig* c) {
  int cpus = std::clamp(sys.cpu_count, 1, kMaxNprocPerNode);
  int gpus = std::clamp(sys.gpu_count, 0, kMaxNprocPerNode);
  if (!value.has_value()) {
    // torchrun's default is 1; one worker per GPU is what a GPU machine wants.
    c->nproc_kind = NprocKind::kDefault;
    c->nproc_per_node = gpus > 0 ? gpus : 1;
    std::string how =
        gpus > 0 ? sys.gpu_note
                 : absl::StrCat("no GPU visible", sys.gpu_note.empty() ? "" : ": ", sys.gpu_note);
    c->discovery_notes.push_back(
        absl::StrCat("nproc-per-node ", c->nproc_per_node, " (default: ", how, ")"));
    return absl::OkStatus();
  }
  const OptionValue& v = *value;
  std::string kind = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v.text));
  std::string how;
  if (kind == "auto") {
    c->nproc_kind = NprocKind::kAuto;
    c->nproc_per_node = gpus > 0 ? gpus : cpus;
    how = gpus > 0 ? absl::StrCat("auto: ", gpus, " GPUs")
                   : absl::StrCat("auto: no GPU, ", cpus, " CPUs");
  } else if (kind == "gpu") {
    c->nproc_kind = NprocKind::kGpu;
    if (gpus <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          v.origin, "=gpu: no GPU found (looked for /dev/nvidia[0-9]*",
          sys.gpu_note.empty() ? "" : absl::StrCat("; ", sys.gpu_note), "); use auto, cpu or N"));
    }
    c->nproc_per_node = gpus;
    how = absl::StrCat("gpu: ", gpus, " GPUs");
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

// Ports this agent may listen on must differ from each other (0 = any free
// port never clashes).
absl::Status CheckPortClash(absl::string_view a_flag, int a, absl::string_view b_flag, int b) {
  if (a != b || a == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: port %d is also %s; this node would listen on it twice, pick another",
                      a_flag, a, b_flag));
}

// ---- Addresses.

// The 16-byte form of an IP literal (IPv4 as v4-mapped, zone dropped).
std::optional<in6_addr> AddressBytes(absl::string_view text) {
  std::string s(text.substr(0, text.find('%')));
  in_addr v4;
  in6_addr v6 = {};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    v6.s6_addr[10] = 0xff;
    v6.s6_addr[11] = 0xff;
    std::memcpy(&v6.s6_addr[12], &v4, 4);
    return v6;
  }
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) return v6;
  return std::nullopt;
}

bool IsUnspecified(absl::string_view host) {
  std::optional<in6_addr> a = AddressBytes(host);
  if (!a.has_value()) return false;
  static const in6_addr kAny6 = {};
  in6_addr any4 = {};
  any4.s6_addr[10] = 0xff;
  any4.s6_addr[11] = 0xff;
  return std::memcmp(&*a, &kAny6, sizeof(in6_addr)) == 0 ||
         std::memcmp(&*a, &any4, sizeof(in6_addr)) == 0;
}

// Loopback, or 0.0.0.0 / :: (which a dialer on this host reaches over
// loopback): no other host can reach a coordinator at such an address.
bool IsThisHostOnly(absl::string_view host) { return IsLoopbackHost(host) || IsUnspecified(host); }

// The loopback address of `host`'s family: "::1" for the IPv6 loopback
// literal, else "127.0.0.1".
std::string LoopbackLike(absl::string_view host) {
  std::optional<in6_addr> a = AddressBytes(host);
  return a.has_value() && IN6_IS_ADDR_LOOPBACK(&*a) ? "::1" : "127.0.0.1";
}

bool IsOwnAddress(absl::string_view addr, const SystemInfo& sys) {
  std::optional<in6_addr> a = AddressBytes(addr);
  if (!a.has_value()) return false;
  if (IsLoopbackHost(addr) || IsUnspecified(addr)) return true;
  if (!sys.local_addrs) return false;
  for (const std::string& own : sys.local_addrs()) {
    std::optional<in6_addr> b = AddressBytes(own);
    if (b.has_value() && std::memcmp(&*a, &*b, sizeof(in6_addr)) == 0) return true;
  }
  return false;
}

bool SameName(absl::string_view a, absl::string_view b) {
  if (!a.empty() && a.back() == '.') a.remove_suffix(1);
  if (!b.empty() && b.back() == '.') b.remove_suffix(1);
  return !a.empty() && absl::EqualsIgnoreCase(a, b);
}

// Whether a coordinator at `host` runs on this host: loopback, one of this
// host's addresses, its hostname or FQDN, or a name that resolves to one of
// those addresses (the only case that asks the resolver).
bool IsLocalCoordinator(absl::string_view host, const SystemInfo& sys) {
  if (IsThisHostOnly(host)) return true;
  if (IsIpLiteral(host)) return IsOwnAddress(host, sys);
  if (SameName(host, sys.hostname) || SameName(host, sys.fqdn)) return true;
  if (!sys.resolve) return false;
  std::optional<ResolvedHost> resolved = sys.resolve(std::string(host));
  if (!resolved.has_value()) return false;
  return std::any_of(resolved->addrs.begin(), resolved->addrs.end(),
                     [&](const std::string& a) { return IsOwnAddress(a, sys); });
}

// This host's name as peers on other hosts can dial it: the FQDN from
// /etc/hosts, else the canonical name of the hostname (what torchrun's
// socket.getfqdn() gives), else the hostname; empty when none is a valid,
// non-loopback host name.
std::string OwnReachableName(const SystemInfo& sys) {
  auto usable = [](absl::string_view h) { return IsValidHost(h) && !IsThisHostOnly(h); };
  if (usable(sys.fqdn)) return sys.fqdn;
  if (sys.resolve && usable(sys.hostname)) {
    std::optional<ResolvedHost> r = sys.resolve(sys.hostname);
    if (r.has_value() && absl::StrContains(r->canonical_name, ".") && usable(r->canonical_name)) {
      return std::string(absl::StripSuffix(r->canonical_name, "."));
    }
  }
  if (usable(sys.hostname)) return sys.hostname;
  return "";
}

std::string UnderRoot(absl::string_view root, absl::string_view path) {
  while (absl::ConsumeSuffix(&root, "/")) {
  }
  return absl::StrCat(root, path);
}

// In Kubernetes, the token Secret mounted at kKubernetesTokenPath, if any.
absl::Status ReadKubernetesSecretToken(const SystemInfo& sys, RunConfig* c) {
  std::string path = UnderRoot(sys.root, kKubernetesTokenPath);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
    return absl::OkStatus();  // No Secret mounted.
  }
  absl::StatusOr<std::string> token =
      ReadTokenFile(OptionValue{path, "the Kubernetes token Secret", ValueSource::kDiscovery});
  if (!token.ok()) return token.status();
  c->token_file = kKubernetesTokenPath;
  c->token = *std::move(token);
  c->discovery_notes.push_back(
      absl::StrCat("token from ", kKubernetesTokenPath, " (Kubernetes Secret)"));
  return absl::OkStatus();
}

// --standalone: a single-node run on this host; flags or TRAINLET_*
// variables that describe another job are a usage error.
absl::Status CheckStandaloneConflicts(const ParsedOptions& parsed) {
  auto conflict = [](const OptionValue& v) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--standalone runs a single-node job on this host; it conflicts with %s=%s (drop one "
        "of them)",
        v.origin, absl::CEscape(v.text.substr(0, 64))));
  };
  if (const OptionValue* v = parsed.Find("nnodes")) {
    absl::StatusOr<NnodesRange> n = ParseNnodesValue(*v);
    if (!n.ok()) return n.status();
    if (n->max != 1) return conflict(*v);
  }
  if (const OptionValue* v = parsed.Find("coordinator")) return conflict(*v);
  if (const OptionValue* v = parsed.Find("node-rank")) {
    absl::StatusOr<int> rank = ParseIntValue(*v, 0, kMaxNodes - 1);
    if (!rank.ok()) return rank.status();
    if (*rank != 0) return conflict(*v);
  }
  if (const OptionValue* v = parsed.Find("host-coordinator"); v != nullptr && v->text == "no") {
    return conflict(*v);
  }
  return absl::OkStatus();
}

std::string NoTokenWarning(const RunConfig& c) {
  std::string where = c.host_coordinator == HostCoordinator::kNo
                          ? JoinHostPort(c.coordinator_host, c.coordinator_port)
                          : absl::StrCat("port ", c.coordinator_port, " on ", c.bind_addr);
  return absl::StrCat(
      "no token: this multi-node job is unauthenticated, so anyone who can reach the "
      "coordinator (",
      where,
      ") can join the job, take a rank, and make every node stop or restart; give every node "
      "the same secret with --token-file=PATH (TRAINLET_TOKEN_FILE), or in Kubernetes mount a "
      "Secret so that it appears at ",
      kKubernetesTokenPath);
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
         "Coordinator address, port 29400 unless given; IPv6 as [::1]:29400. An address of this "
         "host (loopback, its own address or name) means this agent hosts it. Kubernetes: "
         "PET_MASTER_ADDR (a host only), then JobSet pod <jobset>-<rjob>-0-0.<subdomain>. "
         "--rdzv-endpoint is torchrun's spelling.",
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
         "29500; a free port for a single-node run with no coordinator",
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
         "(TRAINLET_PROGRESS_FILE) and then stays silent this long: every node saves every "
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
        {"health-port", OptionKind::kInt, "PORT", "29401 in Kubernetes, else 0 (none)",
         "gRPC health port (grpc.health.v1, for kubelet probes); 0 disables it."},
        {"controller", OptionKind::kString, "HOST[:PORT]", "none (no reports)",
         "Thin controller to send health reports to (`trainlet controller`), port 29600 unless "
         "given; reporting never blocks the job or changes its exit code."},
        {"report-interval", OptionKind::kDuration, "DURATION", "5s",
         "At most one health report per interval to --controller, and one at once on a state "
         "change; 100ms..1h."},
        {"host-coordinator", OptionKind::kString, "auto|yes|no", "auto",
         "Whether this agent runs the coordinator: auto = with node rank hint 0, or when "
         "--coordinator is an address of this host (with no rank hint and several nodes: the "
         "agent that binds the port); no = always join the one at --coordinator (a standalone "
         "`trainlet coordinator`)."},
        {"prefix-output", OptionKind::kBool, "", "false",
         "Prefix each line of worker output with the worker's rank."},
        {"gpu-binding", OptionKind::kString, "list|single|none", "list",
         "How a worker sees its GPU (worker l's is visible GPU l, in PCI order): list = every "
         "visible GPU, so cuda:LOCAL_RANK is its own (torchrun's convention); single = only its "
         "own, as device 0; none = leave CUDA_VISIBLE_DEVICES alone."},
        {"bind-numa", OptionKind::kBool, "", "false",
         "Bind each worker's CPUs and memory to its GPU's NUMA node (without GPUs: spread "
         "workers over the NUMA nodes)."},
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
  const bool launcher = mode.mpi == MpiRole::kLauncher;
  const bool mpi_worker = mode.mpi == MpiRole::kWorker;
  if (mpi_worker) {
    if (parsed.saw_separator) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainlet mpi-worker takes no COMMAND (the launcher's mpirun starts the ranks through "
          "this pod's sshd); usage: ",
          mode.usage));
    }
  } else if (!parsed.saw_separator || parsed.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no COMMAND after --; usage: ", mode.usage,
                     launcher ? " (e.g. trainlet mpi-launcher --nnodes=2 -- mpirun -np 4 ./app)"
                              : " (e.g. trainlet run --nnodes=2 -- python train.py)"));
  }
  c.command = parsed.command;
  KubernetesDiscovery k8s = DiscoverKubernetes(env, sys);
  if (mode.mpi != MpiRole::kNone) ApplyMpiConventions(mode.mpi, env, sys, &k8s);
  for (const std::string& note : k8s.notes) c.discovery_notes.push_back(note);

  // --standalone: torchrun's single-node mode; what the pod says about other
  // nodes does not apply.
  absl::StatusOr<bool> standalone = ParseBoolValue(ValueOrDefault(parsed, table, "standalone"));
  if (!standalone.ok()) return standalone.status();
  if (*standalone) {
    if (absl::Status s = CheckStandaloneConflicts(parsed); !s.ok()) return s;
    k8s.nnodes.reset();
    k8s.node_rank.reset();
    k8s.coordinator_host.reset();
    k8s.job_pod_signs.clear();
    k8s.volcano_tasks.clear();
  }

  // torchrun's --rdzv-backend: trainlet's rendezvous does what c10d and
  // static do; an etcd server is nothing it could use.
  if (const OptionValue* backend = parsed.Find("rdzv-backend")) {
    const std::string b = absl::AsciiStrToLower(absl::StripAsciiWhitespace(backend->text));
    if (b != "c10d" && b != "static") {
      return absl::InvalidArgumentError(absl::StrCat(
          backend->origin,
          ": expected c10d or static (torchrun's backends trainlet's own "
          "rendezvous replaces), got \"",
          SafeForLog(backend->text, 64),
          "\"; trainlet cannot use an etcd server: drop the flag and point --coordinator "
          "(or --rdzv-endpoint) at the node that hosts trainlet's coordinator"));
    }
    c.notes.push_back(absl::StrCat(
        backend->origin, "=", b,
        " (torchrun's): trainlet's own rendezvous serves it, at --coordinator (--rdzv-endpoint)"));
  }

  // A Volcano job of several tasks (master + worker, ps + worker): no task
  // alone is the job, so the user says what it is.
  if (!k8s.volcano_tasks.empty()) {
    const bool nnodes_set = parsed.Find("nnodes") != nullptr || k8s.nnodes.has_value();
    const bool coordinator_set =
        parsed.Find("coordinator") != nullptr || k8s.coordinator_host.has_value();
    if ((!nnodes_set && !mpi_worker) || (!coordinator_set && !launcher)) {
      std::string what;
      if (launcher) {
        what =
            "set TRAINLET_NNODES (or --nnodes) to the number of worker pods; a two-task job "
            "whose launcher task has one pod (this one) needs nothing";
      } else if (mpi_worker) {
        what =
            "set TRAINLET_COORDINATOR (or --coordinator) to the launcher pod's host, e.g. the "
            "first line of its task's host file; a two-task job whose launcher task has one pod "
            "needs nothing";
      } else {
        what =
            "set TRAINLET_NNODES (the pods of every task that trains) and TRAINLET_COORDINATOR "
            "(the host of the pod that hosts the coordinator, e.g. the first line of the master "
            "task's host file) in every task's template, and TRAINLET_NODE_RANK where the order "
            "of the pods matters (or --nnodes, --coordinator, --node-rank)";
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "this pod's Volcano job has several tasks with pods: ", k8s.volcano_tasks,
          "; trainlet does not guess which of them train together, in what order, nor where "
          "their coordinator runs (one task alone would train apart from the others): ",
          what));
    }
  }

  // nnodes. A JobSet or Kubeflow pod must say how many pods the job has:
  // guessing 1 would train alone while the peers wait and fail.
  std::optional<OptionValue> nnodes_given = Pick(parsed, "nnodes", k8s.nnodes);
  if (!nnodes_given.has_value() && !k8s.job_pod_signs.empty() && !mpi_worker) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is a pod of a JobSet or Kubeflow job (", absl::StrJoin(k8s.job_pod_signs, ", "),
        ") but no node count is set: set TRAINLET_NNODES (or --nnodes, PET_NNODES) to the "
        "number of pods in the job, the same in every pod (TRAINLET_NNODES=1 for a job of one "
        "pod)"));
  }
  OptionValue nnodes_value = nnodes_given.value_or(ValueOrDefault(parsed, table, "nnodes"));
  absl::StatusOr<NnodesRange> nnodes = ParseNnodesValue(nnodes_value);
  if (!nnodes.ok()) return nnodes.status();
  c.nnodes = *nnodes;
  Note(&c, nnodes_value, "nnodes");
  if (mode.mpi != MpiRole::kNone && c.nnodes.elastic()) {
    return absl::InvalidArgumentError(absl::StrCat(
        nnodes_value.origin, ": an MPI job has a fixed number of worker pods, got \"",
        absl::CEscape(nnodes_value.text), "\" (use --max-restarts to replace lost workers)"));
  }
  if (launcher) {
    // The job's nodes: the workers and the launcher itself.
    if (c.nnodes.max >= kMaxNodes) {
      return absl::InvalidArgumentError(
          absl::StrCat(nnodes_value.origin, ": at most ", kMaxNodes - 1, " worker pods"));
    }
    c.nnodes.min = c.nnodes.max = c.nnodes.max + 1;
  }
  const bool multi_node = c.nnodes.elastic() || c.nnodes.max > 1;

  // What the node has (topology/probe.h), bounded in time and never fatal:
  // where NVML answered, its visible GPUs are the GPU count.
  if (absl::Status s = ParseDurationOptions(
          parsed, table, {{"probe-timeout", absl::ZeroDuration(), &c.probe_timeout}});
      !s.ok()) {
    return s;
  }
  c.allowed_cpus = sys.allowed_cpus;
  SystemInfo probed = sys;
  absl::StatusOr<bool> bind_numa = ParseBoolValue(ValueOrDefault(parsed, table, "bind-numa"));
  if (!bind_numa.ok()) return bind_numa.status();
  c.bind_numa = *bind_numa;
  const bool probe_changes_nothing = sys.when_node_probed && !multi_node && !c.bind_numa &&
                                     sys.gpu_devices == 0 && sys.gpu_count == 0;
  if (probe_changes_nothing && c.probe_timeout > absl::ZeroDuration()) {
    c.node_probe_later = sys.when_node_probed;
  } else if (sys.probe_node && c.probe_timeout > absl::ZeroDuration()) {
    std::string note;
    c.node_probe = sys.probe_node(c.probe_timeout, &note);
    if (c.node_probe == nullptr) {
      c.warnings.push_back(absl::StrCat(
          "node probe: ", note,
          "; going on without it: worker count from /dev/nvidia*, no GPU placement, no NCCL "
          "advice (--probe-timeout sets the wait, 0 turns the probe off)"));
    } else if (topology::HasContainerGpuView(*c.node_probe)) {
      probed.gpu_count = c.node_probe->visible_gpu_count();
      probed.gpu_note = c.node_probe->visibility_note();
    }
    // What NCCL's own config files set counts as the user's: advice leaves it.
    if (c.node_probe != nullptr) c.nccl_conf_vars = topology::NcclConfFileVars(env, sys.root);
  }
  const OptionValue binding = ValueOrDefault(parsed, table, "gpu-binding");
  absl::StatusOr<GpuBinding> gpu_binding = ParseGpuBinding(binding.text, binding.origin);
  if (!gpu_binding.ok()) return gpu_binding.status();
  c.gpu_binding = *gpu_binding;

  // Workers on this node. Paddle's launcher starts one process per device
  // itself: one launcher per node, like a nested torchrun.
  std::optional<OptionValue> nproc_value = Pick(parsed, "nproc-per-node", k8s.nproc_per_node);
  const bool nested_paddle =
      mode.mpi == MpiRole::kNone && DetectNestedLauncher(c.command) == NestedLauncher::kPaddle;
  if (nested_paddle && !nproc_value.has_value()) {
    c.nproc_kind = NprocKind::kFixed;
    c.nproc_per_node = 1;
    c.discovery_notes.push_back(
        "nproc-per-node 1 (COMMAND is paddle.distributed.launch, which starts one process per "
        "device)");
  } else if (absl::Status s = ResolveNproc(nproc_value, probed, &c); !s.ok()) {
    return s;
  }
  if (nested_paddle && c.nproc_per_node != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        nproc_value->origin, "=", absl::CEscape(nproc_value->text.substr(0, 32)), " gives ",
        c.nproc_per_node,
        " workers, but COMMAND is Paddle's launcher (paddle.distributed.launch, fleetrun), "
        "which starts one process per device itself: several launchers on one node would all "
        "take the same PADDLE_RANK and never meet; use --nproc-per-node=1 (the default for "
        "it) and give the launcher its devices (--devices=0,1,...)"));
  }

  // Node rank hint.
  std::optional<OptionValue> rank_value =
      launcher ? std::nullopt : Pick(parsed, "node-rank", k8s.node_rank);
  if (rank_value.has_value()) {
    absl::StatusOr<int> rank = ParseIntValue(*rank_value, 0, kMaxNodes - 1);
    if (!rank.ok()) return rank.status();
    c.node_rank_hint = *rank;
    Note(&c, *rank_value, "node rank");
  }

  // Coordinator address.
  std::optional<OptionValue> coord_value = Pick(parsed, "coordinator", k8s.coordinator_host);
  if (coord_value.has_value() && coord_value->source == ValueSource::kDiscovery) {
    // Kubernetes gives a host only; the coordinator port stays ours.
    absl::StatusOr<std::string> host = ParseHostValue(*coord_value);
    if (!host.ok()) {
      if (coord_value->origin == "PET_MASTER_ADDR" &&
          absl::StrContains(host.status().message(), "without a port")) {
        return absl::InvalidArgumentError(absl::StrCat(
            host.status().message(),
            "; PET_MASTER_ADDR names a host: the workers' port belongs in PET_MASTER_PORT, and "
            "the coordinator's in --coordinator=HOST:PORT (TRAINLET_COORDINATOR)"));
      }
      return host.status();
    }
    c.coordinator_host = *host;
    Note(&c, *coord_value, "coordinator host");
  } else if (coord_value.has_value()) {
    absl::StatusOr<HostPort> hp = ParseHostPortValue(*coord_value, kDefaultCoordinatorPort);
    if (!hp.ok()) return hp.status();
    c.coordinator_host = hp->host;
    c.coordinator_port = hp->port;
  }
  const bool coordinator_configured = coord_value.has_value();
  // In a Volcano job of several tasks, the pod whose own host-file line is
  // the configured coordinator hosts it: node rank 0.
  if (!k8s.volcano_tasks.empty() && !rank_value.has_value() && coordinator_configured &&
      k8s.volcano.has_value() &&
      static_cast<size_t>(k8s.volcano->index) < k8s.volcano->hosts.size() &&
      SameName(c.coordinator_host, k8s.volcano->hosts[k8s.volcano->index])) {
    c.node_rank_hint = 0;
    c.discovery_notes.push_back(absl::StrCat("node rank 0: the coordinator host ",
                                             c.coordinator_host, " is this pod's line of ",
                                             k8s.volcano->hosts_origin));
  }

  const OptionValue host_value = ValueOrDefault(parsed, table, "host-coordinator");
  if (host_value.text != "auto" && host_value.text != "yes" && host_value.text != "no") {
    return absl::InvalidArgumentError(absl::StrCat(host_value.origin,
                                                   ": expected auto, yes or no, got \"",
                                                   absl::CEscape(host_value.text), "\""));
  }

  // Every node but the one that hosts the coordinator must know where it is.
  constexpr absl::string_view kWhereIsIt =
      "pass --coordinator=HOST:PORT (or TRAINLET_COORDINATOR, PET_MASTER_ADDR)";
  if (mpi_worker && !coordinator_configured) {
    return absl::InvalidArgumentError(
        "cannot find the MPI launcher: pass --coordinator=LAUNCHER_HOST[:PORT] (or "
        "TRAINLET_COORDINATOR); in a JobSet pod it is <jobset>-launcher-0-0.<subdomain>");
  }
  if (!coordinator_configured && !launcher) {
    if (c.node_rank_hint > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot find the coordinator: node rank ", c.node_rank_hint, " (",
          OriginPhrase(*rank_value),
          ") joins the coordinator hosted by node rank 0, and no coordinator address is "
          "configured; ",
          kWhereIsIt, " with node rank 0's address"));
    }
    if (host_value.text == "no") {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot find the coordinator: ", host_value.origin,
          "=no joins a coordinator elsewhere, and no coordinator address is configured; ",
          kWhereIsIt));
    }
    if (c.node_rank_hint < 0 && multi_node) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot find the coordinator: ", kWhereIsIt,
                       ", or --node-rank=0 on the node that hosts it; nnodes is ",
                       NnodesToString(c.nnodes), " (", OriginPhrase(nnodes_value), ")"));
    }
  }
  if (c.node_rank_hint >= c.nnodes.max && !mpi_worker) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: node rank %d must be below nnodes %s (%s); --nnodes is the number of nodes in the "
        "job",
        rank_value.has_value() ? rank_value->origin : "--node-rank", c.node_rank_hint,
        NnodesToString(c.nnodes), OriginPhrase(nnodes_value)));
  }

  // Nothing configured: a local single-node run, like torchrun --standalone,
  // on free loopback ports so that two of them on one machine do not clash.
  const bool single_local = !coordinator_configured && !multi_node;
  if (single_local) {
    if (c.node_rank_hint < 0) c.node_rank_hint = 0;
    c.coordinator_host = "127.0.0.1";
    c.coordinator_port = 0;
    c.in_process_coordinator = !launcher && !mpi_worker;
    c.discovery_notes.push_back(
        c.in_process_coordinator
            ? "single-node run: no coordinator configured, running it inside this agent (no "
              "network)"
            : "single-node run: no coordinator configured, hosting one on 127.0.0.1 (a free port)");
  } else if (!coordinator_configured) {
    c.coordinator_host = "127.0.0.1";  // Node rank 0 of several hosts it; peers dial it.
  }

  // Who hosts the coordinator.
  if (mpi_worker) {
    c.host_coordinator = HostCoordinator::kNo;
  } else if (launcher && !coordinator_configured && host_value.text != "no") {
    c.host_coordinator = HostCoordinator::kYes;
  } else if (host_value.text == "yes") {
    c.host_coordinator = HostCoordinator::kYes;
  } else if (host_value.text == "no") {
    c.host_coordinator = HostCoordinator::kNo;
  } else if (c.node_rank_hint >= 0) {
    c.host_coordinator = c.node_rank_hint == 0 ? HostCoordinator::kYes : HostCoordinator::kNo;
  } else if (IsLocalCoordinator(c.coordinator_host, sys)) {
    // Several agents on this host could host it: the one that binds the
    // port does, the others join it (torchrun's c10d does the same).
    c.host_coordinator = multi_node ? HostCoordinator::kIfPortFree : HostCoordinator::kYes;
  } else {
    c.host_coordinator = HostCoordinator::kNo;
  }

  // Listening addresses.
  if (const OptionValue* bind = parsed.Find("bind-addr")) {
    absl::StatusOr<std::string> addr = ParseIpAddressValue(*bind);
    if (!addr.ok()) return addr.status();
    c.bind_addr = *addr;
    c.health_bind_addr = *addr;
  } else {
    const bool loopback_only =
        !multi_node || (coordinator_configured && IsThisHostOnly(c.coordinator_host));
    c.bind_addr = loopback_only ? LoopbackLike(c.coordinator_host) : "0.0.0.0";
    c.health_bind_addr = k8s.in_kubernetes ? "0.0.0.0" : c.bind_addr;
  }

  // Job id: --job-id, else torchrun's --rdzv-id (a flag too), else the
  // variable, discovery, the default.
  const OptionValue* rdzv_id = parsed.Find("rdzv-id");
  std::optional<OptionValue> job_given;
  if (const OptionValue* v = parsed.Find("job-id");
      v != nullptr && v->source == ValueSource::kFlag) {
    job_given = *v;
    if (rdzv_id != nullptr && rdzv_id->text != v->text) {
      c.notes.push_back(absl::StrCat(rdzv_id->origin, "=", SafeForLog(rdzv_id->text, 64),
                                     " ignored: ", v->origin, "=", SafeForLog(v->text, 128),
                                     " is the job id"));
    }
  } else if (rdzv_id != nullptr) {
    job_given = *rdzv_id;
    c.notes.push_back(absl::StrCat(rdzv_id->origin, "=", SafeForLog(rdzv_id->text, 128),
                                   " (torchrun's): the job id"));
  }
  OptionValue job_value =
      job_given.has_value()
          ? *job_given
          : Pick(parsed, "job-id", k8s.job_id).value_or(ValueOrDefault(parsed, table, "job-id"));
  if (absl::Status s = ValidateJobId(job_value); !s.ok()) return s;
  c.job_id = job_value.text;
  Note(&c, job_value, "job id");

  // Token: a token file, else (Kubernetes) the token Secret.
  if (const OptionValue* token_file = parsed.Find("token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(*token_file);
    if (!token.ok()) return token.status();
    c.token_file = token_file->text;
    c.token = *std::move(token);
  } else if (k8s.in_kubernetes) {
    if (absl::Status s = ReadKubernetesSecretToken(sys, &c); !s.ok()) return s;
  }
  absl::StatusOr<rendezvous::TlsConfig> tls = ParseTlsOptions(parsed, &c.warnings);
  if (!tls.ok()) return tls.status();
  c.tls = *std::move(tls);

  // Ports.
  if (std::optional<OptionValue> master_value = Pick(parsed, "master-port", k8s.master_port)) {
    absl::StatusOr<int> master_port = ParseIntValue(*master_value, 1, 65535);
    if (!master_port.ok()) return master_port.status();
    c.master_port = *master_port;
    Note(&c, *master_value, "master port");
  } else {
    c.master_port = single_local ? 0 : 29500;
  }
  if (const OptionValue* health_value = parsed.Find("health-port")) {
    absl::StatusOr<int> health_port = ParseIntValue(*health_value, 0, 65535);
    if (!health_port.ok()) return health_port.status();
    c.health_port = *health_port;
  } else {
    // The health server is for kubelet probes.
    c.health_port = k8s.in_kubernetes ? 29401 : 0;
  }
  if (const OptionValue* controller = parsed.Find("controller")) {
    absl::StatusOr<HostPort> hp = ParseHostPortValue(*controller, 29600);
    if (!hp.ok()) return hp.status();
    c.controller = JoinHostPort(hp->host, hp->port);
  }
  if (absl::Status s = ParseDurationOptions(
          parsed, table, {{"report-interval", absl::Milliseconds(100), &c.report_interval}});
      !s.ok()) {
    return s;
  }
  if (c.report_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ValueOrDefault(parsed, table, "report-interval").origin, ": at most 1h, got ",
                     absl::FormatDuration(c.report_interval)));
  }
  const bool may_host = c.host_coordinator != HostCoordinator::kNo;
  if (absl::Status s =
          CheckPortClash("--health-port", c.health_port, "--master-port", c.master_port);
      !s.ok()) {
    return s;
  }
  if (may_host) {
    if (absl::Status s = CheckPortClash("--health-port", c.health_port, "the coordinator port",
                                        c.coordinator_port);
        !s.ok()) {
      return s;
    }
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
                                   {"hang-timeout", absl::ZeroDuration(), &c.hang_timeout},
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

  // The address peers reach this node at: every address variable must be the
  // same on every node and reachable from every node (docs/environment.md).
  if (const OptionValue* addr = parsed.Find("advertise-addr")) {
    absl::StatusOr<std::string> host = ParseHostValue(*addr);
    if (!host.ok()) return host.status();
    c.advertise_addr = *host;
    if (k8s.in_kubernetes && multi_node && IsThisHostOnly(c.advertise_addr)) {
      c.warnings.push_back(absl::StrCat(
          addr->origin, "=", c.advertise_addr,
          " is a loopback address in a multi-node Kubernetes job: pods on other nodes cannot "
          "reach it; leave it unset to advertise the pod's FQDN"));
    }
  } else if (mpi_worker) {
    // The name the launcher's hostfiles and known_hosts carry for this pod.
    c.advertise_addr = OwnReachableName(sys);
  } else if (may_host) {
    if (coordinator_configured && !IsThisHostOnly(c.coordinator_host)) {
      c.advertise_addr = c.coordinator_host;  // Exactly what the peers dial.
    } else if ((coordinator_configured || !multi_node) && !(k8s.in_kubernetes && multi_node)) {
      c.advertise_addr = LoopbackLike(c.coordinator_host);  // The whole job is on this host.
    } else {
      c.advertise_addr = OwnReachableName(sys);
      if (c.advertise_addr.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot find an address the other nodes can reach this node at (it hosts the "
            "coordinator): the hostname \"",
            absl::CEscape(sys.hostname.substr(0, 64)),
            "\" is not a usable host name and no FQDN was found; pass --advertise-addr=ADDR "
            "(or TRAINLET_ADVERTISE_ADDR)"));
      }
    }
  }
  if (launcher && !coordinator_configured && parsed.Find("advertise-addr") == nullptr &&
      k8s.in_kubernetes) {
    // Workers find the launcher as <hostname>.<subdomain> (ApplyMpiConventions,
    // Volcano's host files): its certificate is checked for that name.
    const std::string subdomain = SubdomainFromFqdn(sys.hostname, c.advertise_addr);
    if (!subdomain.empty()) c.coordinator_dialled_name = absl::StrCat(sys.hostname, ".", subdomain);
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

  if (multi_node && c.token.empty()) c.warnings.push_back(NoTokenWarning(c));
  if (mode.mpi == MpiRole::kNone && (env.count("WORKER_ADDRS") != 0 || env.count("WORKER_PORT"))) {
    // A v1 XGBoostJob pod's: its machine list goes with its MASTER_ADDR and
    // RANK, which trainlet replaces (worker_env.h).
    c.warnings.push_back(
        "WORKER_ADDRS/WORKER_PORT are set in this pod (a Kubeflow v1 XGBoostJob's) and are "
        "replaced in the workers' environment, with MASTER_ADDR and RANK, by trainlet's own "
        "(or left out where trainlet sets none: several workers per node, or one node), so that "
        "the machine list and the rank describe the same job");
  }
  return c;
}

}  // namespace trainlet::agent

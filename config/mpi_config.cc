#include "config/mpi_config.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kLauncherUsage = "trainlet mpi-launcher [OPTIONS] -- COMMAND [ARGS...]";
constexpr absl::string_view kWorkerUsage = "trainlet mpi-worker [OPTIONS]";

constexpr absl::string_view kLauncherDescription =
    "The entrypoint of an MPI job's launcher pod. Hosts the job's coordinator, waits\n"
    "until every worker pod (`trainlet mpi-worker`) has joined and is really\n"
    "reachable over SSH (name resolves, port answers, pinned host key, job key\n"
    "accepted, a command runs), writes hostfiles and known_hosts, then runs COMMAND\n"
    "(mpirun, mpiexec, deepspeed, horovodrun) unmodified, with OMPI_MCA_*/PRTE_MCA_*/\n"
    "HYDRA_* and TRAINLET_HOSTFILE set. Exits with COMMAND's code. See docs/mpi.md.";
constexpr absl::string_view kWorkerDescription =
    "The entrypoint of an MPI job's worker pod. Generates this pod's SSH host key,\n"
    "supervises OpenSSH's sshd (as the running user, root or not) with a generated\n"
    "config, joins the job's coordinator (hosted by the launcher), lets in the\n"
    "launcher's job key, gives every SSH session the pod's environment, and exits\n"
    "when the launcher's COMMAND has finished: 0 when it succeeded, non-zero when the\n"
    "job failed, killing any MPI daemon or rank left. See docs/mpi.md.";

// Options of `run` that mean nothing to the MPI command: parsed (the config
// layer reads them) but left out of --help.
bool HiddenFor(MpiRole role, const std::string& name) {
  static const char* const kBoth[] = {"standalone",      "master-port", "prefix-output",
                                      "warm-workers",    "preload",     "agent-store",
                                      "agent-store-port"};
  for (const char* n : kBoth) {
    if (name == n) return true;
  }
  if (role == MpiRole::kLauncher) return name == "node-rank";
  // A worker joins the launcher's coordinator, which owns the round policy.
  return name == "host-coordinator" || name == "nnodes" || name == "max-restarts" ||
         name == "last-call" || name == "min-nodes-timeout" || name == "release-streams-from";
}

}  // namespace

std::vector<OptionSpec> MpiOptionTable(MpiRole role) {
  std::vector<OptionSpec> t = RunOptionTable();
  for (OptionSpec& spec : t) {
    spec.hidden = spec.hidden || HiddenFor(role, spec.name);
    if (role == MpiRole::kLauncher && spec.name == "nnodes") {
      spec.value_name = "N";
      spec.help = "Number of worker pods (`trainlet mpi-worker`), not counting the launcher.";
    } else if (role == MpiRole::kLauncher && spec.name == "nproc-per-node") {
      spec.help = "With --launcher-as-node: the ranks this pod hosts (its slots), N|auto|gpu|cpu.";
    } else if (role == MpiRole::kWorker && spec.name == "nproc-per-node") {
      spec.help =
          "Slots of this worker (ranks it hosts), N|auto|gpu|cpu, sent to the launcher's "
          "hostfiles.";
    } else if (role == MpiRole::kWorker && spec.name == "coordinator") {
      spec.default_text = "in a JobSet pod <jobset>-launcher-0-0.<subdomain>";
      spec.help = absl::StrCat("The launcher's coordinator address, HOST[:PORT] (port ",
                               kDefaultCoordinatorPort, " unless given).");
    } else if (role == MpiRole::kLauncher && spec.name == "coordinator") {
      spec.default_text = "none: this launcher hosts it";
      spec.help =
          "A standalone coordinator (`trainlet coordinator`) to join instead of hosting one "
          "(with --host-coordinator=no).";
    }
  }
  t.push_back({"state-dir", OptionKind::kString, "DIR",
               "${TMPDIR:-/tmp}/trainlet-<uid>/<job-id>/<node-id>",
               "Private directory (0700) for this pod's keys, hostfiles and sshd files; "
               "per job and node, so several agents on one machine do not collide."});
  t.push_back({"ssh-key-dir", OptionKind::kString, "DIR", "none: a new ed25519 key per job",
               "A mounted SSH Secret to use as the job key: ssh-privatekey (mpi-operator, "
               "Kubeflow), id_ed25519, id_ecdsa or id_rsa; any mode and owner (copied 0600)."});
  if (role == MpiRole::kWorker) {
    t.push_back({"ssh-port", OptionKind::kInt, "PORT", "2222", "Port of this pod's sshd."});
    t.push_back({"sshd", OptionKind::kString, "PATH", "/usr/sbin/sshd",
                 "OpenSSH's sshd binary (from the image)."});
  } else {
    t.push_back({"mpi", OptionKind::kString, "auto|openmpi|openmpi5|mpich|intel", "auto",
                 "Which MPI COMMAND uses, for its hostfile and ssh variables; auto reads "
                 "COMMAND and `mpirun --version`, and sets every family when unsure."});
    t.push_back({"launcher-as-node", OptionKind::kBool, "", "false",
                 "The launcher hosts ranks too (Kubeflow's runLauncherAsNode): it comes first "
                 "in the hostfiles with --nproc-per-node slots."});
    t.push_back({"ready-timeout", OptionKind::kDuration, "DURATION", "5m",
                 "How long to wait for every worker to be reachable over SSH before failing "
                 "(exit 69) with the list of those that are not, and why."});
    t.push_back({"placement-timeout", OptionKind::kDuration, "DURATION", "60s",
                 "After COMMAND has run this long, warn about workers that should host ranks "
                 "and have seen no MPI session (0 disables the check)."});
    t.push_back({"require-placement", OptionKind::kBool, "", "false",
                 "Fail the job (exit 78) when the placement check finds such workers."});
    t.push_back({"ssh-multiplex", OptionKind::kBool, "", "true",
                 "The readiness check's SSH connection to each worker (OpenSSH's ssh, left as "
                 "the connection's master) carries COMMAND's ssh sessions too: no second login "
                 "per worker. false: a libssh check, and COMMAND's ssh logs in by itself."});
    t.push_back({"early-command", OptionKind::kString, "auto|true|false", "auto",
                 "Start COMMAND while the readiness check runs, its ssh held (trainlet's ssh "
                 "wrapper waits) until every worker passed: mpirun's start-up overlaps the "
                 "check. auto: when COMMAND is mpirun or mpiexec of a known MPI and nothing "
                 "names another ssh agent (OMPI_MCA_plm_rsh_agent, HYDRA_LAUNCHER_EXEC, ...). "
                 "false: COMMAND starts after the check."});
  }
  return t;
}

std::string MpiHelpText(MpiRole role) {
  const bool launcher = role == MpiRole::kLauncher;
  return HelpText(launcher ? kLauncherUsage : kWorkerUsage,
                  launcher ? kLauncherDescription : kWorkerDescription, MpiOptionTable(role),
                  /*kubernetes_discovery=*/true);
}

absl::StatusOr<MpiConfig> ParseMpiConfig(MpiRole role, const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys) {
  const std::vector<OptionSpec> table = MpiOptionTable(role);
  const bool launcher = role == MpiRole::kLauncher;
  const absl::string_view usage = launcher ? kLauncherUsage : kWorkerUsage;
  absl::StatusOr<ParsedOptions> parsed = ParseOptions(table, args, env, usage);
  if (!parsed.ok()) return parsed.status();
  MpiConfig c;
  c.role = role;
  absl::StatusOr<RunConfig> run = RunConfigFromOptions(*parsed, table, {usage, role}, env, sys);
  if (!run.ok()) return run.status();
  c.run = *std::move(run);
  if (c.run.help_requested) return c;

  if (const OptionValue* v = parsed->Find("state-dir")) {
    if (v->text.empty() || v->text[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(v->origin,
                                                     ": expected an absolute path, got \"",
                                                     absl::CEscape(v->text.substr(0, 256)), "\""));
    }
    c.state_dir = v->text;
  }
  if (const OptionValue* v = parsed->Find("ssh-key-dir")) c.ssh_key_dir = v->text;
  if (role == MpiRole::kWorker) {
    absl::StatusOr<int> port = ParseIntValue(ValueOrDefault(*parsed, table, "ssh-port"), 1, 65535);
    if (!port.ok()) return port.status();
    c.ssh_port = *port;
    c.sshd = ValueOrDefault(*parsed, table, "sshd").text;
    return c;
  }
  const OptionValue mpi = ValueOrDefault(*parsed, table, "mpi");
  static const char* const kFlavors[] = {"auto", "openmpi", "openmpi5", "mpich", "intel"};
  if (std::find(std::begin(kFlavors), std::end(kFlavors), mpi.text) == std::end(kFlavors)) {
    return absl::InvalidArgumentError(
        absl::StrCat(mpi.origin, ": expected auto, openmpi, openmpi5, mpich or intel, got \"",
                     absl::CEscape(mpi.text.substr(0, 64)), "\""));
  }
  c.mpi = mpi.text;
  for (auto [name, out] : {std::pair<const char*, bool*>{"launcher-as-node", &c.launcher_as_node},
                           {"require-placement", &c.require_placement},
                           {"ssh-multiplex", &c.ssh_multiplex}}) {
    absl::StatusOr<bool> b = ParseBoolValue(ValueOrDefault(*parsed, table, name));
    if (!b.ok()) return b.status();
    *out = *b;
  }
  if (absl::Status s = ParseDurationOptions(
          *parsed, table,
          {
              {"ready-timeout", absl::Milliseconds(1), &c.ready_timeout},
              {"placement-timeout", absl::ZeroDuration(), &c.placement_timeout},
          });
      !s.ok()) {
    return s;
  }
  const OptionValue early = ValueOrDefault(*parsed, table, "early-command");
  if (early.text == "auto") {
    c.early_command = MpiConfig::EarlyCommand::kAuto;
  } else {
    absl::StatusOr<bool> b = ParseBoolValue(early);
    if (!b.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(early.origin, ": expected auto, true or false, got \"",
                       absl::CEscape(early.text.substr(0, 64)), "\""));
    }
    c.early_command = *b ? MpiConfig::EarlyCommand::kOn : MpiConfig::EarlyCommand::kOff;
  }
  if (c.require_placement && c.placement_timeout == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--require-placement needs the placement check: --placement-timeout must be above 0");
  }
  return c;
}

}  // namespace trainlet::agent

#include "mpi/launcher_env.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/host_names.h"

namespace trainlet::mpi {

bool FirstLabelsDistinct(const std::vector<MpiHost>& hosts) {
  std::set<std::string> seen;
  for (const MpiHost& host : hosts) {
    if (IsIpLiteral(host.name)) continue;  // PRRTE never shortens an address
    if (!seen.insert(host.name.substr(0, host.name.find('.'))).second) return false;
  }
  return true;
}

std::string RshArgs(const LauncherFiles& files, const std::vector<MpiHost>& hosts) {
  std::string args = absl::StrCat("-F ", files.ssh_config, " -i ", files.identity_file,
                                  " -o UserKnownHostsFile=", files.known_hosts,
                                  " -o StrictHostKeyChecking=yes -o BatchMode=yes");
  int port = 0;  // the one port of every host reached over SSH, if they agree
  for (const MpiHost& host : hosts) {
    if (host.port == 0) continue;  // the launcher itself
    if (port != 0 && host.port != port) return args;
    port = host.port;
  }
  if (port != 0) absl::StrAppend(&args, " -p ", port);
  return args;
}

std::map<std::string, std::string> LauncherEnv(const LauncherEnvInput& input) {
  const LauncherFiles& files = input.files;
  const Flavor flavor = input.flavor;
  const bool unknown = flavor == Flavor::kUnknown;
  const std::string rsh_args = RshArgs(files, input.hosts);

  std::map<std::string, std::string> env = {
      {"TRAINLET_HOSTFILE", files.hostfile},
      {"TRAINLET_HYDRA_HOSTFILE", files.hydra_hostfile},
      {"TRAINLET_DISCOVER_HOSTS", files.discover_hosts},
      {"TRAINLET_SSH_CONFIG", files.ssh_config},
      {"TRAINLET_NP", absl::StrCat(TotalSlots(input.hosts))},
      {"TRAINLET_MPI_FLAVOR", std::string(FlavorName(flavor))},
      {"TRAINLET_RESTART_COUNT", absl::StrCat(input.restart_count)},
      {"PATH", absl::StrCat(files.bin_dir, ":", input.path.empty() ? kDefaultPath : input.path)},
  };
  if (unknown || flavor == Flavor::kOpenMpi4) {
    env["OMPI_MCA_orte_default_hostfile"] = files.hostfile;
    env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true";
    env["OMPI_MCA_plm_rsh_args"] = rsh_args;
    env["OMPI_MCA_plm_rsh_no_tree_spawn"] = "1";
  }
  if (unknown || flavor == Flavor::kOpenMpi5) {
    env["PRTE_MCA_prte_default_hostfile"] = files.hostfile;
    // PRRTE finds its own hostfile line by comparing names as strings
    // (prte_do_not_resolve defaults to true): kept whole, the launcher's pod
    // FQDN never equals its short hostname, and with --launcher-as-node
    // PRRTE starts a daemon on it over ssh (Kubeflow Trainer #4028). Cut to
    // the first label it does match; ssh still gets the whole name (PRRTE's
    // node rawname). Kept whole only where cutting would merge two hosts.
    env["PRTE_MCA_prte_keep_fqdn_hostnames"] = FirstLabelsDistinct(input.hosts) ? "0" : "1";
    env["PRTE_MCA_plm_ssh_args"] = rsh_args;
    env["PRTE_MCA_plm_ssh_no_tree_spawn"] = "1";
  }
  if (unknown || flavor == Flavor::kMpich) {
    env["HYDRA_HOST_FILE"] = files.hydra_hostfile;
    env["HYDRA_LAUNCHER"] = "ssh";
    // Hydra reads HYDRA_LAUNCHER_EXTRA_ARGS (checked with MPICH 4.0.2);
    // mpi-operator sets HYDRA_LAUNCH_EXTRA_ARGS, kept for what reads that.
    env["HYDRA_LAUNCHER_EXTRA_ARGS"] = rsh_args;
    env["HYDRA_LAUNCH_EXTRA_ARGS"] = rsh_args;
  }
  if (unknown || flavor == Flavor::kIntel) {
    env["I_MPI_HYDRA_HOST_FILE"] = files.hydra_hostfile;
    env["I_MPI_HYDRA_BOOTSTRAP"] = "ssh";
    env["I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"] = rsh_args;
  }
  const bool open_mpi = unknown || flavor == Flavor::kOpenMpi4 || flavor == Flavor::kOpenMpi5;
  if (input.root && open_mpi) {
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
    env["PRTE_ALLOW_RUN_AS_ROOT"] = "1";
    env["PRTE_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return env;
}

namespace {

// An MCA parameter (a variable's or a file line's name, lower case) that
// picks how Open MPI or PRRTE starts its daemons.
// ("param_file": the parameter files, the override file and -am's
// aggregate sets, any of which may set the agent.)
bool NamesLaunchAgent(absl::string_view name) {
  return absl::EndsWith(name, "rsh_agent") || absl::EndsWith(name, "ssh_agent") || name == "plm" ||
         absl::StrContains(name, "param_file") || absl::StrContains(name, "envar_file_prefix");
}

// An mpirun or mpiexec option (`arg` in lower case) about the agent or a
// file of options that may name one: Open MPI's --mca plm_rsh_agent, -am
// and --tune, Hydra's -launcher and -bootstrap (and their -exec).
bool OptionNamesLaunchAgent(absl::string_view arg) {
  return NamesLaunchAgent(arg) || absl::StrContains(arg, "rsh_agent") ||
         absl::StrContains(arg, "ssh_agent") || arg == "-am" || arg == "--am" ||
         absl::StartsWith(arg, "-am=") || absl::StartsWith(arg, "--am=") ||
         absl::StartsWith(arg, "-launcher") || absl::StartsWith(arg, "--launcher") ||
         absl::StartsWith(arg, "-bootstrap") || absl::StartsWith(arg, "--bootstrap") ||
         absl::StartsWith(arg, "-tune") || absl::StartsWith(arg, "--tune");
}

std::string Clip(absl::string_view text) { return std::string(text.substr(0, 128)); }

}  // namespace

std::string SshBypass(const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& param_files) {
  for (const auto& [key, value] : env) {
    for (absl::string_view prefix : {"OMPI_MCA_", "PRTE_MCA_"}) {
      absl::string_view name = key;
      if (absl::ConsumePrefix(&name, prefix) && NamesLaunchAgent(absl::AsciiStrToLower(name))) {
        return absl::StrCat(Clip(key), " is set");
      }
    }
    // What trainlet does not set itself (it sets HYDRA_LAUNCHER and
    // I_MPI_HYDRA_BOOTSTRAP to ssh wherever Hydra may read them).
    // HYDRA_CONFIG_FILE: a file of mpiexec options (-launcher-exec, ...).
    if (key == "HYDRA_LAUNCHER_EXEC" || key == "HYDRA_BOOTSTRAP_EXEC" ||
        key == "I_MPI_HYDRA_BOOTSTRAP_EXEC" || key == "HYDRA_CONFIG_FILE" ||
        (key == "HYDRA_BOOTSTRAP" && value != "ssh")) {
      return absl::StrCat(key, " is set");
    }
    // A batch scheduler's job: Open MPI and Hydra then start their daemons
    // through it (srun, tm, blaunch, qrsh, flux), not ssh.
    for (const char* scheduler : {"SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "PBS_ENVIRONMENT",
                                  "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID"}) {
      if (key == scheduler) {
        return absl::StrCat(key, " is set (the MPI may start its daemons through the scheduler)");
      }
    }
  }
  for (size_t i = 1; i < argv.size(); ++i) {
    if (OptionNamesLaunchAgent(absl::AsciiStrToLower(argv[i]))) {
      return absl::StrCat("COMMAND's argument \"", Clip(argv[i]), "\"");
    }
  }
  for (const auto& [path, text] : param_files) {
    // Hydra's (mpiexec.hydra.conf): mpiexec options, whitespace-separated.
    const bool hydra = absl::EndsWith(path, ".hydra.conf");
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      if (hydra) {
        for (absl::string_view token :
             absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
          token = absl::StripAsciiWhitespace(token);
          if (OptionNamesLaunchAgent(absl::AsciiStrToLower(token))) {
            return absl::StrCat(Clip(path), " sets ", Clip(token));
          }
        }
        continue;
      }
      const size_t eq = line.find('=');
      if (eq == absl::string_view::npos) continue;
      const std::string name =
          absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
      if (NamesLaunchAgent(name)) return absl::StrCat(Clip(path), " sets ", Clip(name));
    }
  }
  return "";
}

std::vector<std::string> McaParamFiles(const std::vector<std::string>& mpirun_paths,
                                       const std::string& home, const std::string& opal_prefix) {
  // Open MPI reads its override file (mca_base_override_param_file) after
  // every other source; Hydra its sysconfdir's mpiexec.hydra.conf (Debian:
  // /usr/etc) and the user's ~/.mpiexec.hydra.conf.
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](std::string path) {
    if (seen.insert(path).second) files.push_back(std::move(path));
  };
  add("/etc/openmpi/openmpi-mca-params.conf");
  add("/etc/openmpi/openmpi-mca-params-override.conf");
  add("/etc/openmpi/prte-mca-params.conf");
  auto add_prefix = [&](const std::string& prefix) {
    if (prefix.empty()) return;
    const std::string etc = prefix + "/etc/";
    add(etc + "openmpi-mca-params.conf");
    add(etc + "openmpi-mca-params-override.conf");
    add(etc + "prte-mca-params.conf");
    add(etc + "mpiexec.hydra.conf");
  };
  // <prefix>/bin/mpirun -> <prefix>/etc/... (for the name in PATH and for
  // the file a symlink leads to: /usr/bin/mpirun -> /usr/lib/.../openmpi).
  for (const std::string& mpirun_path : mpirun_paths) {
    const size_t bin = mpirun_path.rfind('/');
    if (bin == std::string::npos || bin == 0) continue;
    const size_t prefix = mpirun_path.rfind('/', bin - 1);
    if (prefix != std::string::npos) add_prefix(mpirun_path.substr(0, prefix));
  }
  add_prefix(opal_prefix);  // a relocated Open MPI's installation
  if (!home.empty()) {
    add(home + "/.openmpi/mca-params.conf");
    add(home + "/.prte/mca-params.conf");
    add(home + "/.mpiexec.hydra.conf");
  }
  return files;
}

}  // namespace trainlet::mpi

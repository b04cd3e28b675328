// The environment trainlet mpi-launcher gives COMMAND (mpirun, mpiexec,
// deepspeed, horovodrun): where the hostfiles are, and how every MPI's
// launcher must run ssh (the job's key, the pinned known_hosts, per-host
// ports), for the flavour detected (flavor.h) or for all of them when it is
// not known. These variables override the same names in the pod's env.
//
// Pure function; thread-safe.
#ifndef TRAINLET_MPI_LAUNCHER_ENV_H_
#define TRAINLET_MPI_LAUNCHER_ENV_H_

#include <map>
#include <string>
#include <vector>

#include "mpi/flavor.h"
#include "mpi/hosts.h"

namespace trainlet::mpi {

// Paths of the launcher's files in its state directory.
struct LauncherFiles {
  std::string hostfile;        // OpenMpiHostfile
  std::string hydra_hostfile;  // HydraHostfile
  std::string discover_hosts;  // DiscoverHostsScript (executable)
  std::string hosts_list;      // DiscoverHostsList, which that script prints
  std::string ssh_config;      // SshClientConfig
  std::string identity_file;   // the job's private key
  std::string known_hosts;     // KnownHosts
  std::string bin_dir;         // holds the `ssh` wrapper (SshWrapperScript)
};

struct LauncherEnvInput {
  Flavor flavor = Flavor::kUnknown;
  LauncherFiles files;
  std::vector<MpiHost> hosts;  // validated
  int restart_count = 0;
  bool root = false;  // running as uid 0
  std::string path;   // the pod's PATH
};

// The PATH used when the pod has none (an empty PATH element would mean the
// current directory).
inline constexpr char kDefaultPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// "-F <ssh_config> -i <identity> -o UserKnownHostsFile=<known_hosts>
// -o StrictHostKeyChecking=yes -o BatchMode=yes", plus "-p N" when every host
// with a port (not the launcher, port 0) listens on the same port N
// (per-host ports are in the ssh config). MPIs
// split this on whitespace, so paths must have none (state_dir.h).
std::string RshArgs(const LauncherFiles& files, const std::vector<MpiHost>& hosts);

// Always: TRAINLET_HOSTFILE, TRAINLET_HYDRA_HOSTFILE, TRAINLET_DISCOVER_HOSTS,
// TRAINLET_SSH_CONFIG, TRAINLET_NP (sum of slots), TRAINLET_MPI_FLAVOR,
// TRAINLET_RESTART_COUNT, PATH = bin_dir:path.
// Open MPI 4 or unknown: OMPI_MCA_orte_default_hostfile,
//   OMPI_MCA_orte_keep_fqdn_hostnames=true, OMPI_MCA_plm_rsh_args,
//   OMPI_MCA_plm_rsh_no_tree_spawn=1 (workers do not hold the job key, so
//   the launcher starts every daemon itself).
// Open MPI 5 or unknown: PRTE_MCA_prte_default_hostfile,
//   PRTE_MCA_prte_keep_fqdn_hostnames=0 (1 when two hosts' names share a
//   first label: FirstLabelsDistinct), PRTE_MCA_plm_ssh_args,
//   PRTE_MCA_plm_ssh_no_tree_spawn=1.
// MPICH or unknown: HYDRA_HOST_FILE (Hydra format), HYDRA_LAUNCHER=ssh,
//   HYDRA_LAUNCHER_EXTRA_ARGS (what Hydra reads) and HYDRA_LAUNCH_EXTRA_ARGS
//   (mpi-operator's spelling).
// Intel or unknown: I_MPI_HYDRA_HOST_FILE, I_MPI_HYDRA_BOOTSTRAP=ssh,
//   I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS.
// Root with Open MPI (4, 5 or unknown): OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1
//   and PRTE_ALLOW_RUN_AS_ROOT(_CONFIRM)=1.
std::map<std::string, std::string> LauncherEnv(const LauncherEnvInput& input);

// Whether no two host names (IP literals aside) share their first label:
// then PRRTE may shorten them without merging two hosts into one.
bool FirstLabelsDistinct(const std::vector<MpiHost>& hosts);

// Why COMMAND's MPI might start its remote daemons with something other
// than the `ssh` first in its PATH (trainlet's wrapper), or "" when nothing
// says so: a variable naming another agent or launcher (env: the pod's, what
// COMMAND inherits), an option about one in `argv` (mpirun's --mca
// plm_rsh_agent, --tune, -am, Hydra's -launcher, -bootstrap-exec, ...), or
// a line about one in a file (`param_files`: path -> text, those of
// McaParamFiles that exist: MCA parameter files, `name = value`; Hydra's
// *.hydra.conf, mpiexec options). --early-command=auto starts COMMAND
// early only when this is "": its ssh must wait at the wrapper's gate.
std::string SshBypass(const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& param_files);

// The files Open MPI, PRRTE and Hydra read that could name an ssh agent,
// for SshBypass: the MCA parameter files (and Open MPI's override file)
// and mpiexec.hydra.conf, the system's (under each installation prefix: the
// parent of the directory holding each of `mpirun_paths`, the name found in
// PATH and where its symlinks lead; OPAL_PREFIX's `opal_prefix`; and
// /etc/openmpi) and the user's under `home`. Each path once.
std::vector<std::string> McaParamFiles(const std::vector<std::string>& mpirun_paths,
                                       const std::string& home, const std::string& opal_prefix);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_LAUNCHER_ENV_H_

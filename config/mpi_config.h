// The configuration of `trainlet mpi-launcher [OPTIONS] -- COMMAND [ARGS...]`
// and `trainlet mpi-worker [OPTIONS]` (docs/mpi.md): `run`'s config layer in
// an MPI mode (RunConfigMode, run_config.h) plus the MPI options: where the
// state directory is, the sshd port and binary, a mounted key, which MPI,
// whether the launcher hosts ranks too, and the readiness and placement
// bounds.
//
// Pure function except for what ParseRunConfig reads (the token file, one
// name resolution); thread-compatible.
#ifndef TRAINLET_CONFIG_MPI_CONFIG_H_
#define TRAINLET_CONFIG_MPI_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/run_config.h"
#include "config/system_probe.h"

namespace trainlet::agent {

struct MpiConfig {
  MpiRole role = MpiRole::kLauncher;
  // The rendezvous side. Launcher: nnodes = worker pods + 1; nproc_per_node
  // = its slots with --launcher-as-node. Worker: nproc_per_node = its slots.
  RunConfig run;
  std::string state_dir;    // --state-dir; empty: the per-job, per-node default.
  std::string ssh_key_dir;  // --ssh-key-dir: a mounted Secret's files; empty: generate.
  // The rest from MpiOptionTable(role)'s defaults, as ParseMpiConfig sets them.
  int ssh_port = 0;                  // worker: its sshd's port.
  std::string sshd;                  // worker: OpenSSH's sshd.
  std::string mpi;                   // launcher: auto|openmpi|openmpi5|mpich|intel.
  bool launcher_as_node = false;     // launcher: it hosts ranks too.
  absl::Duration ready_timeout;      // launcher
  absl::Duration placement_timeout;  // launcher; 0 = no check
  bool require_placement = false;    // launcher
  bool ssh_multiplex = true;         // launcher: mpirun's ssh reuses the probe's connection
  // launcher: --early-command; auto: when COMMAND is mpirun/mpiexec whose
  // ssh is trainlet's (agent/mpi_plans.h decides).
  enum class EarlyCommand { kAuto, kOn, kOff };
  EarlyCommand early_command = EarlyCommand::kAuto;
};

absl::StatusOr<MpiConfig> ParseMpiConfig(MpiRole role, const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys);
std::string MpiHelpText(MpiRole role);
// The option table of `mpi-launcher` or `mpi-worker`: `run`'s (some hidden)
// plus the MPI options.
std::vector<OptionSpec> MpiOptionTable(MpiRole role);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_MPI_CONFIG_H_

// Which MPI the launcher's COMMAND uses, and what kind of command it is:
// from the --mpi flag, the command's name, or `mpirun --version` output.
//
// The flavour decides which environment variables the launcher sets
// (launcher_env.h). Open MPI 5 matters most: it ignores Open MPI 4's
// OMPI_MCA_orte_* names and silently runs every rank on the launcher, so
// when in doubt the flavour is kUnknown and both families are set.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_MPI_FLAVOR_H_
#define TRAINLET_MPI_FLAVOR_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::mpi {

enum class Flavor { kUnknown, kOpenMpi4, kOpenMpi5, kMpich, kIntel };

// "unknown", "openmpi", "openmpi5", "mpich", "intel".
absl::string_view FlavorName(Flavor flavor);

// The --mpi value: auto|openmpi|openmpi5|mpich|intel (case-insensitive);
// auto gives nullopt (detect). InvalidArgument naming `origin` (the flag or
// env variable it came from) otherwise.
absl::StatusOr<std::optional<Flavor>> ParseFlavorFlag(absl::string_view value,
                                                      absl::string_view origin);

enum class CommandKind { kMpiRun, kDeepSpeed, kHorovod, kOther };
// From the basename of argv0: mpirun, mpiexec, orterun, prterun,
// mpiexec.hydra, mpiexec.mpich, mpirun.mpich, mpirun.openmpi and
// mpiexec.openmpi are kMpiRun; deepspeed kDeepSpeed; horovodrun kHorovod.
CommandKind ClassifyCommand(absl::string_view argv0);

// The flavour from argv0's basename when it says (".mpich": MPICH; ".hydra":
// MPICH, or Intel when the output has Intel's banner; "prterun": Open MPI 5; ".openmpi": Open MPI,
// its version from `version_output` when that says, else kUnknown), else from the output of `mpirun
// --version`: "(Open MPI) 4.x" -> kOpenMpi4, "(Open MPI) 5.x" or later, or "(PRRTE)" -> kOpenMpi5,
// "Intel(R) MPI Library" -> kIntel, "HYDRA build details" or "MPICH" -> kMpich; kUnknown otherwise.
Flavor DetectFlavor(absl::string_view argv0, absl::string_view version_output);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_FLAVOR_H_

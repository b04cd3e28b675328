// The per-job, per-node state directory: where mpi-launcher and mpi-worker
// put keys, hostfiles, configurations and pid files. Several pods' agents on
// one machine (as in the e2e tests) each get their own, and none can be
// planted by another user: every directory trainlet owns is created or
// checked without following symlinks, must belong to the running user, and
// is made 0700.
//
// The path's characters are restricted (letters, digits and . _ - + , = @ /)
// so that it can go unquoted into the whitespace-split ssh argument lists
// MPIs take (OMPI_MCA_plm_rsh_args, HYDRA_LAUNCH_EXTRA_ARGS) and into ssh
// and sshd configurations, where '%' is a token.
//
// Thread-safe; does file I/O.
#ifndef TRAINLET_MPI_STATE_DIR_H_
#define TRAINLET_MPI_STATE_DIR_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::mpi {

// True when every character of `path` is one the state directory may hold.
bool IsSafeStatePath(absl::string_view path);

// `explicit_dir` when given (--state-dir), made absolute, else
// "${TMPDIR:-/tmp}/trainlet-<euid>/<job_id>/<node_id>". Creates missing
// components. The directories it owns (trainlet-<euid>, <job_id>, <node_id>;
// or the explicit dir and any parent it creates) get mode 0700: a
// symlink, a non-directory, or one owned by another user there is refused
// (FailedPrecondition naming the path and what to do); a looser mode is
// tightened. InvalidArgument for a job or node id that is not one safe path
// component, a relative TMPDIR, or a path with other characters than
// IsSafeStatePath allows. Returns the absolute path.
absl::StatusOr<std::string> PrepareStateDir(const std::string& explicit_dir,
                                            const std::string& job_id, const std::string& node_id,
                                            const std::map<std::string, std::string>& env);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_STATE_DIR_H_

// The text of every file the MPI launcher and workers write: hostfiles for
// each MPI, known_hosts, the launcher's ssh client configuration and ssh
// wrapper, Horovod's discovery script, and on the worker side sshd's
// configuration, the session script its ForceCommand runs and the pod's
// environment as a shell file.
//
// Callers validate hosts first (ValidateHosts, hosts.h); paths come from the
// state directory (state_dir.h), whose characters are restricted so that
// they need no quoting in whitespace-split argument lists (plm_rsh_args).
//
// Pure functions; thread-safe. Each returns the file's full text.
#ifndef TRAINLET_MPI_FORMATS_H_
#define TRAINLET_MPI_FORMATS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "mpi/hosts.h"

namespace trainlet::mpi {

// "name slots=N\n" per host: Open MPI's (and DeepSpeed's) hostfile.
std::string OpenMpiHostfile(const std::vector<MpiHost>& hosts);
// "name:N\n" per host: Hydra's (MPICH, Intel MPI).
std::string HydraHostfile(const std::vector<MpiHost>& hosts);
// "[name]:port key\n" when port != 22, else "name key\n"; one line per host
// with a key (the launcher, port 0 and no key, is skipped).
std::string KnownHosts(const std::vector<MpiHost>& hosts);

// OpenSSH client configuration (used through `ssh -F`): a `Host name` block
// with its Port per host, then `Host *` with the job's identity, the pinned
// known_hosts and strict, non-interactive settings. Hosts with port 0 (the
// launcher) get no block. With `control_dir`, each host's block also names
// its OpenSSH multiplexing socket (ControlSocketPath), and `Host *` says
// `ControlMaster no`: ssh runs its sessions over the connection the readiness
// probe opened and left as master (mpi/ssh_master.h), or, when that socket
// is gone, connects by itself as before.
struct SshClientPaths {
  std::string identity_file;
  std::string known_hosts;
  std::string control_dir;  // empty: no multiplexing
};
// The multiplexing socket of the worker `name`:`port` with host key
// `host_public_key`, under `control_dir`: 16 hex digits of a hash of the
// three, so that it is short (a socket path has at most 107 bytes) and the
// same only for the same worker incarnation (a replaced pod has a new host
// key). "" when control_dir is empty or port is 0 (the launcher).
std::string ControlSocketPath(const std::string& name, int port, const std::string& host_public_key,
                              const std::string& control_dir);
std::string SshClientConfig(const std::vector<MpiHost>& hosts, const SshClientPaths& paths);

// Horovod's --host-discovery-script: prints `hosts_file` (DiscoverHostsList
// text, rewritten atomically by the launcher each round), so it stays live.
std::string DiscoverHostsScript(const std::string& hosts_file);
// "name:slots\n" per host (Horovod's format).
std::string DiscoverHostsList(const std::vector<MpiHost>& hosts);
// Put first in COMMAND's PATH as <dir>/ssh, so that every launcher's ssh
// (mpirun's, Hydra's, DeepSpeed's pdsh-less runner, Horovod's) uses the
// job's configuration: `exec <real_ssh> -F <config> "$@"`. With a `gate`
// (a FIFO; --early-command), it first opens the FIFO for reading, which
// blocks until the launcher holds it open: the readiness check has passed.
// No FIFO there (the launcher gone, or no gate this round): no wait.
std::string SshWrapperScript(const std::string& real_ssh, const std::string& config,
                             const std::string& gate = "");

// Worker side: sshd_config for the worker's supervised sshd.
struct SshdPaths {
  std::string host_key;
  std::string authorized_keys;
  std::string pid_file;
  std::string session_script;
};
std::string SshdConfig(int port, const SshdPaths& paths);

// The command the launcher's readiness probe runs; SessionScript does not
// record it as an MPI session.
inline constexpr char kReadinessCommand[] = "true trainlet-readiness";
// sshd's ForceCommand: records every session but the readiness probe (its
// shell's pid, one line, appended to `sessions_file`), loads the pod's
// environment from `env_file`, then runs the requested command (or a login
// shell).
std::string SessionScript(const std::string& sessions_file, const std::string& env_file);

// True for names a POSIX shell can export: [A-Za-z_][A-Za-z0-9_]*.
bool IsShellVariableName(absl::string_view name);
// "export NAME='value'\n" per variable, sorted by name. Skips names that are
// not IsShellVariableName, values holding a NUL byte, and the variables sshd
// or the login sets per session: HOME USER LOGNAME SHELL PWD OLDPWD SHLVL _
// TERM MAIL and SSH_*.
std::string EnvFile(const std::map<std::string, std::string>& env);

// s in single quotes for a POSIX shell ('x', with ' written as '\'').
std::string ShellQuote(absl::string_view s);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_FORMATS_H_

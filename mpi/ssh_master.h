// The readiness probe whose SSH connection mpirun then reuses (issue 33).
//
// One `ssh HOST true` took 250 ms on the 2-CPU benchmark machine (about
// 105 ms of it OpenSSH's default post-quantum key exchange, sntrup761x25519,
// against curve25519-sha256); mpirun's own ssh paid it once per worker
// again right after the probe did (docs/benchmarks-history.md, issue 33).
// So the probe is OpenSSH's client itself, left behind as the connection's
// multiplexing master:
//
//   ssh -F CONFIG -o ControlMaster=auto -o ControlPersist=yes
//       -o ConnectionAttempts=1 -o ConnectTimeout=S -p PORT NAME 'true trainlet-readiness'
//
// CONFIG is the job's ssh_config (SshClientConfig with a control_dir): the
// pinned known_hosts with StrictHostKeyChecking yes, the job key only,
// BatchMode, and the host's ControlPath. Exit status 0 proves what the
// libssh probe proves (the name resolves, the port answers, the host key is
// the pinned one, the job key is accepted, a command runs), and leaves a
// master (daemonized by ssh; this process, a subreaper, inherits it) whose
// socket mpirun's `ssh -F CONFIG` finds through ControlPath: its sessions
// open on that connection without a new key exchange or login.
//
// The socket's name is a hash of the worker's name, port and pinned host key
// (ControlSocketPath), so a later round's probe of the same worker
// incarnation finds the master alive (`auto`) and runs its command on that
// connection, which was opened against the same pinned key: an in-place
// restart logs in again only to the replaced pods. A failed attempt stops
// the worker's master, so that the next one starts from a new connection.
//
//   OpenSSH probe --exit 0--> ok (master left)
//        |
//        +--any other end--> `diagnose` (the libssh probe) --not ok--> its stage and detail
//                                   |
//                                   +--ok--> kCommand: ssh's own words
//
// A failed attempt is probed again by `diagnose` so that the reason is one
// of the readiness stages (DNS, connect, host key, auth, command) with the
// same words as without multiplexing.
//
// Threading: Probe() is thread-safe (each call forks its own ssh).
#ifndef TRAINLET_MPI_SSH_MASTER_H_
#define TRAINLET_MPI_SSH_MASTER_H_

#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/children.h"
#include "mpi/ssh_probe.h"

namespace trainlet::mpi {

class OpenSshMasterProber : public SshProber {
 public:
  // `ssh`: absolute path of OpenSSH's client; `config`: the ssh_config (see
  // above); `env`: "NAME=value" strings for ssh; `diagnose` outlives this.
  // `control_dir`: where CONFIG's ControlPaths are (to stop a failed
  // worker's master).
  // `connect_helper`: a trainlet binary whose `ssh-connect` opens the
  // connection (ProxyCommand with ProxyUseFdpass: TCP_NODELAY from the
  // first packet, mpi/ssh_connect.h); ssh runs it with SHELL=/bin/sh. Empty,
  // relative, or with a character a state directory may not hold
  // (IsSafeStatePath: no space, %, quote or shell syntax): ssh connects by
  // itself.
  OpenSshMasterProber(std::string ssh, std::string config, std::string control_dir,
                      std::vector<std::string> env, SshProber* diagnose,
                      std::string connect_helper = "");

  ProbeResult Probe(const ProbeTarget& target, absl::Duration timeout) override;

 private:
  const std::string ssh_;
  const std::string config_;
  const std::string control_dir_;
  std::vector<std::string> env_;
  SshProber* const diagnose_;
  std::string connect_helper_;  // "" : none
};

// What RunBounded saw.
struct BoundedRun {
  int exit_code = -1;  // 128+N for signal N; -1: killed at the deadline or not started
  bool timed_out = false;
  std::string output;  // stdout and stderr together, at most 4 KiB
};
// Runs argv (argv[0] an absolute path) with `env` and stdin from /dev/null
// until it exits or `deadline` passes (then SIGKILL). Safe while another
// thread reaps every child with waitpid(-1) (the agent's supervisor does):
// the program runs under a forked helper that waits for it and passes its
// exit status back through a pipe.
BoundedRun RunBounded(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      absl::Time deadline);

// Whether `child` (of this process, which inherits the masters as their
// subreaper) is an ssh multiplexing master with its socket in `control_dir`:
// named "ssh", its command line "ssh: DIR/... [mux]" (OpenSSH's
// setproctitle), and, when `ssh` is given, running that binary.
bool IsSshMaster(const launcher::ChildProcess& child, const std::string& control_dir,
                 const std::string& ssh = "");

// The socket path in a master's command line ("ssh: PATH [mux]"), or "".
std::string MasterSocket(const launcher::ChildProcess& child);

// SIGTERMs every such master (IsSshMaster) among this process's children
// but those whose socket is in `keep`; returns how many. The masters remove
// their sockets as they exit.
int StopMasters(const std::string& control_dir, const std::set<std::string>& keep = {});

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_SSH_MASTER_H_

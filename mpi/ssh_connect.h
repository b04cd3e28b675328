// `trainlet ssh-connect HOST PORT`: the ProxyCommand of the launcher's
// readiness check (with ProxyUseFdpass yes; ssh_master.h). It resolves HOST, connects to
// PORT, sets TCP_NODELAY on the socket and hands it to ssh over its stdout (a socketpair,
// SCM_RIGHTS), then exits: ssh speaks on the socket itself, no process stays between.
//
// Why: OpenSSH sets TCP_NODELAY on its connection only when a session's
// channel is open. Before that, during the key exchange and the login,
// Nagle's algorithm holds a small packet written right after another (its
// NEWKEYS and then SERVICE_REQUEST) until the server's delayed ACK comes,
// about 40 ms on Linux: 44 ms of each 250 ms login on the benchmark
// machine (`ssh -vvv` timestamps), on the path of the readiness check.
//
// Thread-compatible; does network I/O.
#ifndef TRAINLET_MPI_SSH_CONNECT_H_
#define TRAINLET_MPI_SSH_CONNECT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace trainlet::mpi {

// Connects to `host`:`port` within `timeout` (name resolution included),
// sets TCP_NODELAY and passes the socket over `pass_fd` (a unix socket).
// Unavailable (DNS, connect) or Internal (the passing) naming the step.
absl::Status SshConnect(const std::string& host, int port, absl::Duration timeout, int pass_fd);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_SSH_CONNECT_H_

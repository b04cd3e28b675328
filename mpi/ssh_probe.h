// One SSH readiness probe of one MPI worker, the way `mpirun` will reach it:
// resolve the name, connect to the port, check the host key against the one
// the worker pinned through the rendezvous, authenticate with the job's key,
// run a trivial command. The first step that fails is the answer, with a
// short human reason:
//
//   DNS -> connect -> SSH handshake -> host key -> auth -> command -> ok
//
// SshProber is the seam (mpi/testing/fake_ssh_prober.h is its fake);
// LibsshProber is the real one, on libssh's client API. It never reads
// ~/.ssh or /etc/ssh (no config, no known_hosts, no agent) and never prints:
// everything it learns goes into ProbeResult::detail, with any text that came
// from the server or the resolver escaped (SafeForLog).
//
// Threading: Probe() may be called from several threads at once; each call
// uses its own libssh session.
#ifndef TRAINLET_MPI_SSH_PROBE_H_
#define TRAINLET_MPI_SSH_PROBE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mpi/formats.h"

namespace trainlet::mpi {

// kReadinessCommand (formats.h): what the probe runs; the workers' session
// script does not count it as an MPI session.

enum class ProbeStage { kOk, kDns, kConnect, kHandshake, kHostKey, kAuth, kCommand };

// "ok", "DNS", "connect", "SSH handshake", "host key", "auth", "command".
absl::string_view ProbeStageName(ProbeStage stage);

struct ProbeTarget {
  std::string node_id;
  std::string name;  // host name or IP literal to dial
  int port = 2222;
  std::string host_public_key;  // pinned: "ssh-ed25519 AAAA..." (type + base64 [+ comment])
};

struct ProbeResult {
  ProbeStage stage = ProbeStage::kOk;
  std::string detail;  // human text, printable ASCII
};

class SshProber {
 public:
  virtual ~SshProber() = default;
  // One attempt, bounded by `timeout`. Thread-safe.
  virtual ProbeResult Probe(const ProbeTarget& target, absl::Duration timeout) = 0;
};

// The probe's first two steps on their own, for `trainlet ssh-connect`
// (ssh_connect.h): `name` checked (IsValidHost) and resolved, each address
// tried until one connects, all within `deadline`. A connected socket
// (non-blocking, close-on-exec) in *fd, or the failed step (kDns,
// kConnect) and why.
ProbeResult ConnectTcp(const std::string& name, int port, absl::Time deadline, int* fd);

class LibsshProber : public SshProber {
 public:
  // `private_key_pem`: the job's private key (OpenSSH or PEM format, no
  // passphrase). `user`: the login name on the workers (see CurrentUserName).
  // InvalidArgument when the key does not parse or the user is empty.
  static absl::StatusOr<std::unique_ptr<LibsshProber>> Create(const std::string& private_key_pem,
                                                              const std::string& user);

  // Steps and their failure stage:
  //   - the name is checked (IsValidHost) and resolved with getaddrinfo
  //     (kDns: the resolver's reason and the name);
  //   - each address is tried with a non-blocking connect (kConnect:
  //     "connection refused", "timed out", "no route to host", ...);
  //   - the SSH handshake on that socket, offering only the pinned key's
  //     host key algorithms (kHandshake);
  //   - the server's key must equal the pinned one (kHostKey, naming both
  //     SHA256 fingerprints; also when the pinned key does not parse);
  //   - public-key auth with the job key (kAuth);
  //   - exec kReadinessCommand, whose exit status must be 0 (kCommand, with
  //     the first bytes the command printed).
  // The whole attempt is bounded by `timeout`, name resolution included.
  ProbeResult Probe(const ProbeTarget& target, absl::Duration timeout) override;

 private:
  LibsshProber(std::string private_key_pem, std::string user)
      : private_key_pem_(std::move(private_key_pem)), user_(std::move(user)) {}

  const std::string private_key_pem_;
  const std::string user_;
};

// The running user's login name (getpwuid(geteuid())), for LibsshProber's
// `user`. NotFound when the uid has no passwd entry (an arbitrary uid in a
// container without nss_wrapper): sshd could not log that user in either.
absl::StatusOr<std::string> CurrentUserName();

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_SSH_PROBE_H_

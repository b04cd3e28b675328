// `trainlet ssh-connect HOST PORT`: the ProxyCommand of the MPI launcher's
// readiness check (mpi/ssh_connect.h): the connection, with TCP_NODELAY,
// handed to ssh over its stdout. Not for use by hand.
#include "mpi/ssh_connect.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "cmd/command.h"
#include "common/exit_codes.h"

namespace trainlet::cmd {
namespace {

// ssh_config's ConnectTimeout: ssh waits for the socket without a bound of
// its own.
constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args, const Env&) {
  Invocation invocation;
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    invocation.help = true;
    return invocation;
  }
  int port = 0;
  if (args.size() != 2 || !absl::SimpleAtoi(args[1], &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        "expected HOST PORT (a port in 1..65535); ssh-connect is the ProxyCommand of the MPI "
        "launcher's readiness check, run by ssh");
  }
  invocation.run = [host = args[0], port](std::string* reason) -> int {
    absl::Status s = mpi::SshConnect(host, port, kConnectTimeout, /*pass_fd=*/1);
    if (s.ok()) return kExitSuccess;
    return Fail("ssh-connect", absl::IsUnavailable(s) ? kExitUnavailable : kExitInternal,
                s.message(), reason);
  };
  return invocation;
}

std::string Help() {
  return "Usage: trainlet ssh-connect HOST PORT\n\n"
         "The ProxyCommand of `trainlet mpi-launcher`'s readiness check (with\n"
         "ProxyUseFdpass yes): connects to HOST:PORT within 10s, sets TCP_NODELAY on the\n"
         "socket and hands it to ssh over its stdout, which saves the ~40 ms that Nagle's\n"
         "algorithm holds one packet of every OpenSSH login (docs/mpi.md). Exit 69 when\n"
         "HOST does not resolve or PORT does not answer.\n";
}

}  // namespace

const Command kSshConnectCommand = {
    "ssh-connect",
    "ssh-connect HOST PORT",
    "The ProxyCommand of the MPI launcher's readiness check: connect with\n"
    "TCP_NODELAY and hand the socket to ssh (not for use by hand).",
    /*reads_env=*/false,
    /*entrypoint=*/false,
    /*exits_at_once=*/true,  // a name lookup past the bound may still run on its thread.
    Parse,
    Help,
};

}  // namespace trainlet::cmd

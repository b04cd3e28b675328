// The configuration of `trainlet coordinator [OPTIONS]`: a standalone
// rendezvous coordinator for jobs whose agents should not host it themselves
// (for example a coordinator Deployment in front of an elastic job).
//
// Values come from flags, then TRAINLET_* variables, then defaults; there is
// no Kubernetes discovery (the coordinator is not a training pod). Errors as
// in run_config.h: InvalidArgument for malformed input (exit 64),
// FailedPrecondition for an unreadable token file or TLS options given in
// part or naming unusable files (exit 78).
//
// Pure function except for reading the token and TLS files;
// thread-compatible.
#ifndef TRAINLET_CONFIG_COORDINATOR_CONFIG_H_
#define TRAINLET_CONFIG_COORDINATOR_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "config/options.h"

namespace trainlet::agent {

struct CoordinatorConfig {
  bool help_requested = false;  // -h/--help: print CoordinatorHelpText(), exit 0.
  // Every value from CoordinatorOptionTable() (its defaults included).
  int port = 0;            // --port, 1..65535
  std::string bind_addr;   // --bind-addr; unbracketed IPv6 ("::").
  NnodesRange nnodes;      // --nnodes N | MIN:MAX
  std::string job_id;      // --job-id
  std::string token_file;  // --token-file; empty = no authentication.
  std::string token;
  // --tls-cert/--tls-key/--tls-ca/--tls-dir (ParseTlsOptions); disabled: plaintext.
  rendezvous::TlsConfig tls;
  // --health-port: grpc.health.v1 in plaintext for kubelet probes, which
  // cannot present a client certificate to a TLS coordinator port; 0: none.
  int health_port = 0;
  // Said once at start (a certificate that will likely be refused, ...).
  std::vector<std::string> warnings;
  RoundPolicy policy;  // --max-restarts, --last-call, --heartbeat-timeout, --min-nodes-timeout
  LogLevel log_level = LogLevel::kInfo;  // --log-level
};

// `args` are the words after "coordinator"; `env` the process environment.
absl::StatusOr<CoordinatorConfig> ParseCoordinatorConfig(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env);

const std::vector<OptionSpec>& CoordinatorOptionTable();
std::string CoordinatorHelpText();

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_COORDINATOR_CONFIG_H_

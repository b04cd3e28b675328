// `trainlet health [HOST:]PORT`: a grpc.health.v1 Check client for exec
// probes and scripts (kubelet's native gRPC probe needs no binary). It
// reads no TRAINLET_* variable: an exec probe's command line says it all.
#ifndef TRAINLET_CMD_HEALTH_PROBE_H_
#define TRAINLET_CMD_HEALTH_PROBE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/options.h"

namespace trainlet::agent {

struct HealthOptions {
  bool help = false;
  std::string target = "127.0.0.1:29401";  // the agent's default --health-port.
  int timeout_ms = 1000;
};

// Its option table (drives parsing and help).
const std::vector<OptionSpec>& HealthOptionTable();
std::string HealthHelpText();

// Parses the words after "health": [HOST:]PORT (a PORT alone is on
// 127.0.0.1) and --timeout-ms. InvalidArgument naming the input.
absl::StatusOr<HealthOptions> ParseHealthOptions(const std::vector<std::string>& args);

// Asks once. Exit code: 0 SERVING, 1 NOT_SERVING or unreachable.
int RunHealthProbe(const HealthOptions& options);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_HEALTH_PROBE_H_

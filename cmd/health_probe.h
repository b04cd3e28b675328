// `trainlet health [HOST:]PORT`: a grpc.health.v1 Check client for exec
// probes and scripts (kubelet's native gRPC probe needs no binary).
#ifndef TRAINLET_CMD_HEALTH_PROBE_H_
#define TRAINLET_CMD_HEALTH_PROBE_H_

#include <string>
#include <vector>

namespace trainlet::agent {

// Exit code: 0 SERVING, 1 NOT_SERVING or unreachable, 64 bad arguments.
int RunHealthProbe(const std::vector<std::string>& args);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_HEALTH_PROBE_H_

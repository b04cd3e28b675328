// The environment of each worker process: what torchrun sets for its
// children (so torch.distributed's env:// init works unchanged), plus the
// variables JAX, TensorFlow (TF_CONFIG), XGBoost/Rabit (DMLC_*) and a nested
// static torchrun (PET_*) read. docs/environment.md has the full table.
//
// Built from one round's assignment: ranks are contiguous per node, in node
// rank order, so the worker with local rank l on node n has global rank
// nodes[0..n-1].local_world_size summed + l.
//
// Pure functions; thread-compatible.
#ifndef TRAINLET_AGENT_WORKER_ENV_H_
#define TRAINLET_AGENT_WORKER_ENV_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainlet::agent {

struct NodeEndpoint {
  std::string addr;  // host name or address, unbracketed IPv6.
  int local_world_size = 1;
};

struct WorkerEnvInput {
  std::string job_id;
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;
  int first_global_rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 29500;
  int restart_count = 0;
  int max_restarts = 0;
  std::vector<NodeEndpoint> nodes;  // node-rank order; only TF_CONFIG uses it.
};

// TF_CONFIG is left out above this size: Linux caps one environment string
// at 128 KiB (MAX_ARG_STRLEN), and the rest of the environment needs room.
inline constexpr size_t kMaxTfConfigBytes = 64 * 1024;

// The variables trainlet sets for local rank `local_rank` (name, value), in a
// stable order.
std::vector<std::pair<std::string, std::string>> FrameworkEnv(const WorkerEnvInput& in,
                                                              int local_rank);

// The TF_CONFIG JSON for global rank `rank`:
//   {"cluster":{"worker":["addr:port",...]},"task":{"type":"worker","index":RANK},
//    "environment":"cloud"}
// where the worker with local rank l on node n listens on
// nodes[n].addr:(master_port + 1 + l). nullopt when it would exceed
// kMaxTfConfigBytes, when `nodes` is empty or its local world sizes do not
// add up to world_size, or when a port would pass 65535.
std::optional<std::string> TfConfigJson(const WorkerEnvInput& in, int rank);

// `base` (the agent's environment) with FrameworkEnv() overriding it, as
// "K=V" strings sorted by name. Also sets OMP_NUM_THREADS=1 when
// local_world_size > 1 and `base` has none (as torchrun does). A TF_CONFIG
// in `base` is always dropped, even when TfConfigJson() gives none.
std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkerEnvInput& in, int local_rank);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_WORKER_ENV_H_

// The environment of each worker process: what torchrun sets for its
// children (so torch.distributed's env:// init works unchanged), plus the
// variables JAX, TensorFlow (TF_CONFIG), XGBoost/Rabit (DMLC_*),
// PaddlePaddle's collective mode (PADDLE_*) and a nested static torchrun
// (PET_*) read, and the Kubeflow training-operator v1 spellings of JAXJob
// and XGBoostJob. docs/environment.md has the full table.
//
// Two layers with different precedence:
//   FrameworkEnv()  replaces inherited values of the same name (a pod's RANK
//                   or PADDLE_MASTER describes another launch);
//   KubeflowV1Env() only fills names the agent's environment lacks (a v1 pod
//                   or the user may have set them on purpose), except
//                   XGBoostJob's WORKER_ADDRS/WORKER_PORT, a machine list
//                   that goes with MASTER_ADDR and RANK and so is always ours
//                   (or absent).
// Adding a framework means adding one Append...() in worker_env.cc to the
// layer whose precedence it needs.
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

#include "config/nested_launcher.h"

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
  // The rank-0 node's --agent-store port (Assignment.agent_store_port): torch's
  // MASTER_PORT, with TORCHELASTIC_USE_AGENT_STORE=True; 0: none. JAX, TF,
  // XGBoost and Paddle keep master_port.
  int agent_store_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  // Node-rank order; TF_CONFIG, the Paddle endpoints and WORKER_ADDRS use it.
  // Empty above the coordinator's member-list limit.
  std::vector<NodeEndpoint> nodes;
  // This node's address as the coordinator reports it (the assignment's
  // own entry, there even without `nodes`); PADDLE_CURRENT_ENDPOINT falls
  // back to it.
  std::string self_addr;
  NestedLauncher nested = NestedLauncher::kNone;
};

// A value that lists every worker or node (TF_CONFIG,
// PADDLE_TRAINER_ENDPOINTS, WORKER_ADDRS) is left out above this size: Linux
// caps one environment string at 128 KiB (MAX_ARG_STRLEN), and the rest of
// the environment needs room.
inline constexpr size_t kMaxClusterListBytes = 64 * 1024;
inline constexpr size_t kMaxTfConfigBytes = kMaxClusterListBytes;

// The variables trainlet sets for local rank `local_rank` (name, value), in a
// stable order; they replace inherited values. With in.nested == kPaddle the
// Paddle part is node-level only (PADDLE_JOB_ID, PADDLE_NNODES, PADDLE_MASTER,
// PADDLE_RANK = node rank, and on node rank 0 POD_IP = master_addr, so that
// the launcher there hosts its HTTP master at PADDLE_MASTER); no
// PADDLE_TRAINER_ID, which that launcher would read as its node rank.
// PADDLE_CURRENT_ENDPOINT is this node's entry of `nodes`, else self_addr.
std::vector<std::pair<std::string, std::string>> FrameworkEnv(const WorkerEnvInput& in,
                                                              int local_rank);

// The Kubeflow training-operator v1 spellings (JAXJob: COORDINATOR_ADDRESS
// host only, COORDINATOR_PORT, NUM_PROCESSES, PROCESS_ID; XGBoostJob/LightGBM:
// WORKER_ADDRS, WORKER_PORT), in a stable order. BuildWorkerEnv() sets the
// JAXJob ones only where `base` has no such variable, the XGBoostJob pair
// always. WORKER_ADDRS (the other nodes''
// addresses, node rank 1 up, comma-separated) and WORKER_PORT
// (master_port + 1) come only with one worker per node and several nodes,
// as in v1 where each pod is one worker.
std::vector<std::pair<std::string, std::string>> KubeflowV1Env(const WorkerEnvInput& in,
                                                               int local_rank);

// Every worker's Paddle endpoint, comma-separated in rank order: the worker
// with local rank l on node n at nodes[n].addr:(master_port + 1 + l), the
// ports TF_CONFIG uses. nullopt under the same conditions as TfConfigJson().
std::optional<std::string> PaddleTrainerEndpoints(const WorkerEnvInput& in);

// The TF_CONFIG JSON for global rank `rank`:
//   {"cluster":{"worker":["addr:port",...]},"task":{"type":"worker","index":RANK},
//    "environment":"cloud"}
// where the worker with local rank l on node n listens on
// nodes[n].addr:(master_port + 1 + l). nullopt when it would exceed
// kMaxTfConfigBytes, when `nodes` is empty or its local world sizes do not
// add up to world_size, or when a port would pass 65535.
std::optional<std::string> TfConfigJson(const WorkerEnvInput& in, int rank);

// `base` (the agent's environment) with FrameworkEnv() overriding it and
// KubeflowV1Env() filling its gaps, as "K=V" strings sorted by name. Also
// sets OMP_NUM_THREADS=1 when local_world_size > 1 and `base` has none (as
// torchrun does). Always dropped from `base`, even when nothing of ours
// replaces them: TF_CONFIG; the PADDLE_* names of InheritedPaddleNamesDropped();
// WORKER_ADDRS and WORKER_PORT, which go with MASTER_ADDR and RANK (ours),
// so KubeflowV1Env()'s pair is set over them. With in.nested == kPaddle the
// names of NestedPaddleLauncherNamesDropped() (MASTER_ADDR, MASTER_PORT,
// RANK, LOCAL_RANK, WORLD_SIZE, ...) are left out, ours and inherited alike.
std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkerEnvInput& in, int local_rank);

// Every name FrameworkEnv() and KubeflowV1Env() may set, whatever the
// input: their values follow the round. A warm standby worker is started
// without them and handed them (agent/warm_workers.h).
const std::vector<std::string>& RoundVariableNames();

// The inherited PADDLE_* variables BuildWorkerEnv() always drops: the ones
// FrameworkEnv() may set, and a v1 PaddleJob's parameter-server ones.
const std::vector<std::string>& InheritedPaddleNamesDropped();

// The torchrun-layer variables a nested Paddle launcher does not get.
const std::vector<std::string>& NestedPaddleLauncherNamesDropped();

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_WORKER_ENV_H_

#include "agent/worker_env.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "config/options.h"

namespace trainlet::agent {
namespace {

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// Whether `nodes` describes every worker and every worker port fits.
bool NodesConsistent(const WorkerEnvInput& in) {
  if (in.nodes.empty()) return false;
  int64_t total = 0;
  for (const NodeEndpoint& node : in.nodes) {
    if (node.local_world_size < 0) return false;
    total += node.local_world_size;
    if (static_cast<int64_t>(in.master_port) + node.local_world_size > 65535) return false;
  }
  return total == in.world_size;
}

// The port of the worker with local rank `l` (TF_CONFIG, Paddle endpoints).
int WorkerPort(const WorkerEnvInput& in, int l) { return in.master_port + 1 + l; }

using EnvList = std::vector<std::pair<std::string, std::string>>;

void AppendTorchrunEnv(const WorkerEnvInput& in, int local_rank, EnvList* env) {
  const int rank = in.first_global_rank + local_rank;
  const std::string rank_text = absl::StrCat(rank);
  const std::string world_text = absl::StrCat(in.world_size);
  env->insert(env->end(),
              {
                  {"MASTER_ADDR", in.master_addr},
                  {"MASTER_PORT",
                   absl::StrCat(in.agent_store_port > 0 ? in.agent_store_port : in.master_port)},
                  {"RANK", rank_text},
                  {"WORLD_SIZE", world_text},
                  {"LOCAL_RANK", absl::StrCat(local_rank)},
                  {"LOCAL_WORLD_SIZE", absl::StrCat(in.local_world_size)},
                  {"GROUP_RANK", absl::StrCat(in.node_rank)},
                  {"GROUP_WORLD_SIZE", absl::StrCat(in.nnodes)},
                  {"ROLE_NAME", "default"},
                  {"ROLE_RANK", rank_text},
                  {"ROLE_WORLD_SIZE", world_text},
                  {"NODE_RANK", absl::StrCat(in.node_rank)},
                  {"TORCHELASTIC_RUN_ID", in.job_id},
                  {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(in.restart_count)},
                  {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(in.max_restarts)},
              });
  // torch's env:// rendezvous then makes every rank a client of the agent's
  // store at MASTER_ADDR:MASTER_PORT, its keys under
  // /worker/attempt_<TORCHELASTIC_RESTART_COUNT> (torchrun's convention).
  if (in.agent_store_port > 0) env->emplace_back("TORCHELASTIC_USE_AGENT_STORE", "True");
}

// jax.distributed.initialize() with no arguments.
void AppendJaxEnv(const WorkerEnvInput& in, int local_rank, EnvList* env) {
  env->emplace_back("JAX_COORDINATOR_ADDRESS", JoinHostPort(in.master_addr, in.master_port));
  env->emplace_back("JAX_NUM_PROCESSES", absl::StrCat(in.world_size));
  env->emplace_back("JAX_PROCESS_ID", absl::StrCat(in.first_global_rank + local_rank));
}

// TensorFlow MultiWorkerMirroredStrategy.
void AppendTensorflowEnv(const WorkerEnvInput& in, int local_rank, EnvList* env) {
  if (std::optional<std::string> tf_config = TfConfigJson(in, in.first_global_rank + local_rank)) {
    env->emplace_back("TF_CONFIG", *std::move(tf_config));
  }
}

// XGBoost / Rabit tracker.
void AppendXgboostEnv(const WorkerEnvInput& in, int local_rank, EnvList* env) {
  env->emplace_back("DMLC_TRACKER_URI", in.master_addr);
  env->emplace_back("DMLC_TRACKER_PORT", absl::StrCat(in.master_port));
  env->emplace_back("DMLC_TASK_ID", absl::StrCat(in.first_global_rank + local_rank));
  env->emplace_back("DMLC_NUM_WORKER", absl::StrCat(in.world_size));
}

// PaddlePaddle collective mode: what paddle.distributed.launch gives each
// process it starts (so init_parallel_env() finds its peers without it; the
// device comes from FLAGS_selected_gpus, which the agent sets from the GPU
// placement), or, when the worker is that launcher, what its own flags
// default from.
void AppendPaddleEnv(const WorkerEnvInput& in, int local_rank, EnvList* env) {
  env->emplace_back("PADDLE_JOB_ID", in.job_id);
  env->emplace_back("PADDLE_NNODES", absl::StrCat(in.nnodes));
  env->emplace_back("PADDLE_MASTER", JoinHostPort(in.master_addr, in.master_port));
  if (in.nested == NestedLauncher::kPaddle) {
    // The launcher reads PADDLE_RANK as --rank (its node rank), and hosts its
    // HTTP master only where the host in PADDLE_MASTER is 127.0.0.1 or its
    // --host (POD_IP).
    env->emplace_back("PADDLE_RANK", absl::StrCat(in.node_rank));
    if (in.node_rank == 0) env->emplace_back("POD_IP", in.master_addr);
    return;
  }
  const std::string rank_text = absl::StrCat(in.first_global_rank + local_rank);
  const std::string world_text = absl::StrCat(in.world_size);
  env->emplace_back("PADDLE_TRAINER_ID", rank_text);
  env->emplace_back("PADDLE_TRAINERS_NUM", world_text);
  env->emplace_back("PADDLE_GLOBAL_RANK", rank_text);
  env->emplace_back("PADDLE_GLOBAL_SIZE", world_text);
  env->emplace_back("PADDLE_LOCAL_RANK", absl::StrCat(local_rank));
  env->emplace_back("PADDLE_LOCAL_SIZE", absl::StrCat(in.local_world_size));
  env->emplace_back("PADDLE_RANK_IN_NODE", absl::StrCat(local_rank));
  if (std::optional<std::string> endpoints = PaddleTrainerEndpoints(in)) {
    env->emplace_back("PADDLE_TRAINER_ENDPOINTS", *std::move(endpoints));
  }
  // This node's own address: from the member list, else (above its limit)
  // the assignment's entry for this node.
  std::string self_addr = in.self_addr;
  if (NodesConsistent(in) && in.node_rank >= 0 &&
      in.node_rank < static_cast<int>(in.nodes.size())) {
    self_addr = in.nodes[in.node_rank].addr;
  }
  if (!self_addr.empty() && in.master_port > 0 &&
      static_cast<int64_t>(in.master_port) + in.local_world_size <= 65535) {
    env->emplace_back("PADDLE_CURRENT_ENDPOINT",
                      JoinHostPort(self_addr, WorkerPort(in, local_rank)));
  }
}

// A static torchrun started by the worker (Kubeflow's PET_* convention).
void AppendNestedTorchrunEnv(const WorkerEnvInput& in, EnvList* env) {
  env->emplace_back("PET_NNODES", absl::StrCat(in.nnodes));
  env->emplace_back("PET_NODE_RANK", absl::StrCat(in.node_rank));
  env->emplace_back("PET_MASTER_ADDR", in.master_addr);
  env->emplace_back("PET_MASTER_PORT", absl::StrCat(in.master_port));
  env->emplace_back("PET_NPROC_PER_NODE", absl::StrCat(in.local_world_size));
}

}  // namespace

std::optional<std::string> TfConfigJson(const WorkerEnvInput& in, int rank) {
  if (!NodesConsistent(in)) return std::nullopt;
  std::string json = "{\"cluster\":{\"worker\":[";
  bool first = true;
  for (const NodeEndpoint& node : in.nodes) {
    for (int l = 0; l < node.local_world_size; ++l) {
      if (!first) json.push_back(',');
      first = false;
      AppendJsonString(&json, JoinHostPort(node.addr, WorkerPort(in, l)));
      if (json.size() > kMaxTfConfigBytes) return std::nullopt;
    }
  }
  absl::StrAppend(&json, "]},\"task\":{\"type\":\"worker\",\"index\":", rank,
                  "},\"environment\":\"cloud\"}");
  if (json.size() > kMaxTfConfigBytes) return std::nullopt;
  return json;
}

std::optional<std::string> PaddleTrainerEndpoints(const WorkerEnvInput& in) {
  if (!NodesConsistent(in)) return std::nullopt;
  std::string list;
  for (const NodeEndpoint& node : in.nodes) {
    for (int l = 0; l < node.local_world_size; ++l) {
      if (!list.empty()) list.push_back(',');
      absl::StrAppend(&list, JoinHostPort(node.addr, WorkerPort(in, l)));
      if (list.size() > kMaxClusterListBytes) return std::nullopt;
    }
  }
  return list;
}

std::vector<std::pair<std::string, std::string>> FrameworkEnv(const WorkerEnvInput& in,
                                                              int local_rank) {
  EnvList env;
  AppendTorchrunEnv(in, local_rank, &env);
  AppendJaxEnv(in, local_rank, &env);
  AppendTensorflowEnv(in, local_rank, &env);
  AppendXgboostEnv(in, local_rank, &env);
  AppendPaddleEnv(in, local_rank, &env);
  AppendNestedTorchrunEnv(in, &env);
  return env;
}

std::vector<std::pair<std::string, std::string>> KubeflowV1Env(const WorkerEnvInput& in,
                                                               int local_rank) {
  EnvList env = {
      // JAXJob: the host alone, and its port apart.
      {"COORDINATOR_ADDRESS", in.master_addr},
      {"COORDINATOR_PORT", absl::StrCat(in.master_port)},
      {"NUM_PROCESSES", absl::StrCat(in.world_size)},
      {"PROCESS_ID", absl::StrCat(in.first_global_rank + local_rank)},
  };
  // XGBoostJob (LightGBM): the master at MASTER_ADDR:MASTER_PORT, every other
  // pod at one of WORKER_ADDRS:WORKER_PORT.
  if (in.nnodes > 1 && in.world_size == in.nnodes && NodesConsistent(in) &&
      static_cast<int>(in.nodes.size()) == in.nnodes) {
    std::string addrs;
    for (size_t n = 1; n < in.nodes.size(); ++n) {
      if (n > 1) addrs.push_back(',');
      addrs.append(in.nodes[n].addr);
    }
    if (addrs.size() <= kMaxClusterListBytes) {
      env.emplace_back("WORKER_ADDRS", std::move(addrs));
      env.emplace_back("WORKER_PORT", absl::StrCat(WorkerPort(in, 0)));
    }
  }
  return env;
}

const std::vector<std::string>& InheritedPaddleNamesDropped() {
  static const auto* names = new std::vector<std::string>{
      "PADDLE_CURRENT_ENDPOINT", "PADDLE_GLOBAL_RANK", "PADDLE_GLOBAL_SIZE",
      "PADDLE_JOB_ID",           "PADDLE_LOCAL_RANK",  "PADDLE_LOCAL_SIZE",
      "PADDLE_MASTER",           "PADDLE_NNODES",      "PADDLE_RANK",
      "PADDLE_RANK_IN_NODE",     "PADDLE_SERVER_NUM",  "PADDLE_TRAINER_ENDPOINTS",
      "PADDLE_TRAINER_ID",       "PADDLE_TRAINER_NUM", "PADDLE_TRAINERS_ENDPOINTS",
      "PADDLE_TRAINERS_NUM",
  };
  return *names;
}

const std::vector<std::string>& NestedPaddleLauncherNamesDropped() {
  static const auto* names = new std::vector<std::string>{
      "GROUP_RANK",  "GROUP_WORLD_SIZE", "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT",      "NODE_RANK",       "RANK",
      "ROLE_NAME",   "ROLE_RANK",        "ROLE_WORLD_SIZE", "WORLD_SIZE",
  };
  return *names;
}

std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkerEnvInput& in, int local_rank) {
  std::map<std::string, std::string> env = base;
  // An inherited TF_CONFIG (a TFJob pod's) describes another cluster; drop it
  // even when ours is left out for size. So do inherited Paddle variables
  // (a PaddleJob's, or a launcher's above this agent): ours may leave some
  // out, and one left over would mix two launches.
  env.erase("TF_CONFIG");
  for (const std::string& name : InheritedPaddleNamesDropped()) env.erase(name);
  // XGBoostJob's machine list goes with MASTER_ADDR and RANK, which are
  // always ours: an operator's WORKER_ADDRS/WORKER_PORT would mix two lists.
  env.erase("WORKER_ADDRS");
  env.erase("WORKER_PORT");
  for (auto& [name, value] : FrameworkEnv(in, local_rank)) env[name] = std::move(value);
  for (auto& [name, value] : KubeflowV1Env(in, local_rank)) {
    const bool xgboost_pair = name == "WORKER_ADDRS" || name == "WORKER_PORT";
    if (xgboost_pair || base.count(name) == 0) env[name] = std::move(value);
  }
  if (in.nested == NestedLauncher::kPaddle) {
    // Paddle's launcher passes these on to the processes it starts, where
    // init_parallel_env() reads MASTER_ADDR:MASTER_PORT before PADDLE_MASTER
    // and builds its TCP store there: on node rank 0 that is the port the
    // launcher's own master listens on (EADDRINUSE), and RANK/WORLD_SIZE
    // count launchers, not its processes. Its own variables describe them.
    for (const std::string& name : NestedPaddleLauncherNamesDropped()) env.erase(name);
  }
  if (in.local_world_size > 1 && base.count("OMP_NUM_THREADS") == 0) {
    env["OMP_NUM_THREADS"] = "1";
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

const std::vector<std::string>& RoundVariableNames() {
  static const auto* const kNames = new std::vector<std::string>{"COORDINATOR_ADDRESS",
                                                                 "COORDINATOR_PORT",
                                                                 "DMLC_NUM_WORKER",
                                                                 "DMLC_TASK_ID",
                                                                 "DMLC_TRACKER_PORT",
                                                                 "DMLC_TRACKER_URI",
                                                                 "GROUP_RANK",
                                                                 "GROUP_WORLD_SIZE",
                                                                 "JAX_COORDINATOR_ADDRESS",
                                                                 "JAX_NUM_PROCESSES",
                                                                 "JAX_PROCESS_ID",
                                                                 "LOCAL_RANK",
                                                                 "LOCAL_WORLD_SIZE",
                                                                 "MASTER_ADDR",
                                                                 "MASTER_PORT",
                                                                 "NODE_RANK",
                                                                 "NUM_PROCESSES",
                                                                 "PADDLE_CURRENT_ENDPOINT",
                                                                 "PADDLE_GLOBAL_RANK",
                                                                 "PADDLE_GLOBAL_SIZE",
                                                                 "PADDLE_JOB_ID",
                                                                 "PADDLE_LOCAL_RANK",
                                                                 "PADDLE_LOCAL_SIZE",
                                                                 "PADDLE_MASTER",
                                                                 "PADDLE_NNODES",
                                                                 "PADDLE_RANK",
                                                                 "PADDLE_RANK_IN_NODE",
                                                                 "PADDLE_TRAINER_ENDPOINTS",
                                                                 "PADDLE_TRAINER_ID",
                                                                 "PADDLE_TRAINERS_NUM",
                                                                 "PET_MASTER_ADDR",
                                                                 "PET_MASTER_PORT",
                                                                 "PET_NNODES",
                                                                 "PET_NODE_RANK",
                                                                 "PET_NPROC_PER_NODE",
                                                                 "POD_IP",
                                                                 "PROCESS_ID",
                                                                 "RANK",
                                                                 "ROLE_NAME",
                                                                 "ROLE_RANK",
                                                                 "ROLE_WORLD_SIZE",
                                                                 "TF_CONFIG",
                                                                 "TORCHELASTIC_MAX_RESTARTS",
                                                                 "TORCHELASTIC_RESTART_COUNT",
                                                                 "TORCHELASTIC_RUN_ID",
                                                                 "TORCHELASTIC_USE_AGENT_STORE",
                                                                 "WORKER_ADDRS",
                                                                 "WORKER_PORT",
                                                                 "WORLD_SIZE"};
  return *kNames;
}

}  // namespace trainlet::agent

#include "agent/worker_env.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/options.h"

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

}  // namespace

std::optional<std::string> TfConfigJson(const WorkerEnvInput& in, int rank) {
  if (in.nodes.empty()) return std::nullopt;
  int64_t total = 0;
  for (const NodeEndpoint& node : in.nodes) {
    if (node.local_world_size < 0) return std::nullopt;
    total += node.local_world_size;
    if (static_cast<int64_t>(in.master_port) + node.local_world_size > 65535) return std::nullopt;
  }
  if (total != in.world_size) return std::nullopt;
  std::string json = "{\"cluster\":{\"worker\":[";
  bool first = true;
  for (const NodeEndpoint& node : in.nodes) {
    for (int l = 0; l < node.local_world_size; ++l) {
      if (!first) json.push_back(',');
      first = false;
      AppendJsonString(&json, JoinHostPort(node.addr, in.master_port + 1 + l));
      if (json.size() > kMaxTfConfigBytes) return std::nullopt;
    }
  }
  absl::StrAppend(&json, "]},\"task\":{\"type\":\"worker\",\"index\":", rank,
                  "},\"environment\":\"cloud\"}");
  if (json.size() > kMaxTfConfigBytes) return std::nullopt;
  return json;
}

std::vector<std::pair<std::string, std::string>> FrameworkEnv(const WorkerEnvInput& in,
                                                              int local_rank) {
  const int rank = in.first_global_rank + local_rank;
  const std::string rank_text = absl::StrCat(rank);
  const std::string world_text = absl::StrCat(in.world_size);
  std::vector<std::pair<std::string, std::string>> env = {
      // torchrun (torch.distributed.run) for each worker.
      {"MASTER_ADDR", in.master_addr},
      {"MASTER_PORT", absl::StrCat(in.master_port)},
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
      // JAX: jax.distributed.initialize() with no arguments.
      {"JAX_COORDINATOR_ADDRESS", JoinHostPort(in.master_addr, in.master_port)},
      {"JAX_NUM_PROCESSES", world_text},
      {"JAX_PROCESS_ID", rank_text},
  };
  // TensorFlow MultiWorkerMirroredStrategy.
  if (std::optional<std::string> tf_config = TfConfigJson(in, rank)) {
    env.emplace_back("TF_CONFIG", *std::move(tf_config));
  }
  // XGBoost / Rabit tracker.
  env.emplace_back("DMLC_TRACKER_URI", in.master_addr);
  env.emplace_back("DMLC_TRACKER_PORT", absl::StrCat(in.master_port));
  env.emplace_back("DMLC_TASK_ID", rank_text);
  env.emplace_back("DMLC_NUM_WORKER", world_text);
  // A static torchrun started by the worker (Kubeflow's PET_* convention).
  env.emplace_back("PET_NNODES", absl::StrCat(in.nnodes));
  env.emplace_back("PET_NODE_RANK", absl::StrCat(in.node_rank));
  env.emplace_back("PET_MASTER_ADDR", in.master_addr);
  env.emplace_back("PET_MASTER_PORT", absl::StrCat(in.master_port));
  env.emplace_back("PET_NPROC_PER_NODE", absl::StrCat(in.local_world_size));
  return env;
}

std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const WorkerEnvInput& in, int local_rank) {
  std::map<std::string, std::string> env = base;
  // An inherited TF_CONFIG (a TFJob pod's) describes another cluster; drop it
  // even when ours is left out for size.
  env.erase("TF_CONFIG");
  for (auto& [name, value] : FrameworkEnv(in, local_rank)) env[name] = std::move(value);
  if (in.local_world_size > 1 && base.count("OMP_NUM_THREADS") == 0) {
    env["OMP_NUM_THREADS"] = "1";
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

}  // namespace trainlet::agent

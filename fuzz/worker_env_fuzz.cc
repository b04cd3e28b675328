// Fuzz target: TfConfigJson, PaddleTrainerEndpoints and BuildWorkerEnv over
// a fuzzed round assignment and agent environment. Counts and ranks stay in what a
// coordinator that validates its joins can produce (local world sizes
// 1..1024, at most 64 nodes); addresses, the job id, the port and the
// inherited environment are arbitrary. Checks: TF_CONFIG, when set, is valid
// JSON within kMaxTfConfigBytes and is the only TF_CONFIG (an inherited one
// never leaks through); the Paddle endpoint list and WORKER_ADDRS stay within
// kMaxClusterListBytes; an inherited JAXJob v1 variable is never replaced;
// WORKER_ADDRS/WORKER_PORT and the PADDLE_* names trainlet owns are ours or
// absent, never inherited; under a nested Paddle launcher there is no
// PADDLE_TRAINER_ID, MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK or
// WORLD_SIZE; the result is sorted NAME=VALUE with unique names.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "agent/worker_env.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;
using trainlet::fuzz::FuzzInput;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  agent::WorkerEnvInput w;
  w.job_id = in.String(40);
  w.master_addr = in.String(80);
  w.master_port = in.Byte() % 2 ? in.IntInRange(INT32_MIN, INT32_MAX) : in.IntInRange(1, 65535);
  w.restart_count = in.IntInRange(0, 1000);
  w.max_restarts = in.IntInRange(0, 1000);
  const int nnodes = 1 + in.Pick(64);
  int rank_base = 0;
  for (int n = 0; n < nnodes; ++n) {
    agent::NodeEndpoint node{in.Byte() % 4 ? w.master_addr : in.String(80), 1 + in.Pick(4)};
    if (in.Byte() == 0xff) node.local_world_size = in.IntInRange(1, 1024);
    if (n == static_cast<int>(in.Pick(nnodes))) {
      w.node_rank = n;
      w.first_global_rank = rank_base;
      w.local_world_size = node.local_world_size;
    }
    rank_base += node.local_world_size;
    w.nodes.push_back(std::move(node));
  }
  w.nnodes = nnodes;
  w.world_size = in.Byte() % 8 ? rank_base : in.IntInRange(1, 1 << 20);  // sometimes wrong
  if (in.Byte() % 4 == 0) w.nodes.clear();
  std::map<std::string, std::string> base;
  for (int i = in.Pick(4); i > 0; --i) {
    std::string name = in.String(16);
    if (!name.empty() && name.find('=') == std::string::npos) base[name] = in.String(64);
  }
  if (in.Byte() % 2) base["TF_CONFIG"] = "{\"stale\":true}";
  if (in.Byte() % 2) base["PROCESS_ID"] = in.String(8);
  if (in.Byte() % 2) base["WORKER_ADDRS"] = in.String(8);
  if (in.Byte() % 2) base["MASTER_ADDR"] = in.String(8);
  for (const std::string& name : agent::InheritedPaddleNamesDropped()) {
    if (in.Byte() % 4 == 0) base[name] = in.String(8);
  }
  w.nested = in.Byte() % 2 ? agent::NestedLauncher::kPaddle : agent::NestedLauncher::kNone;
  const int local_rank = in.Pick(w.local_world_size);

  std::optional<std::string> tf = agent::TfConfigJson(w, w.first_global_rank + local_rank);
  if (tf.has_value()) {
    FUZZ_CHECK(tf->size() <= agent::kMaxTfConfigBytes, "TF_CONFIG too large");
    FUZZ_CHECK(trainlet::fuzz::JsonChecker::Valid(*tf), *tf);
  }
  std::optional<std::string> endpoints = agent::PaddleTrainerEndpoints(w);
  FUZZ_CHECK(!endpoints.has_value() || endpoints->size() <= agent::kMaxClusterListBytes,
             "PADDLE_TRAINER_ENDPOINTS too large");
  std::vector<std::string> env = agent::BuildWorkerEnv(base, w, local_rank);
  std::map<std::string, std::string> ours;
  for (auto& [name, value] : agent::FrameworkEnv(w, local_rank)) ours[name] = value;
  for (auto& [name, value] : agent::KubeflowV1Env(w, local_rank)) ours[name] = value;
  std::set<std::string> owned(agent::InheritedPaddleNamesDropped().begin(),
                              agent::InheritedPaddleNamesDropped().end());
  owned.insert("WORKER_ADDRS");
  owned.insert("WORKER_PORT");
  std::set<std::string> nested_dropped(agent::NestedPaddleLauncherNamesDropped().begin(),
                                       agent::NestedPaddleLauncherNamesDropped().end());
  std::string previous_name;
  bool saw_tf = false;
  for (size_t i = 0; i < env.size(); ++i) {
    size_t eq = env[i].find('=');
    FUZZ_CHECK(eq != std::string::npos, env[i]);
    std::string name = env[i].substr(0, eq);
    FUZZ_CHECK(i == 0 || previous_name < name, "not sorted or duplicate: " + name);
    previous_name = name;
    const std::string value = env[i].substr(eq + 1);
    if (name == "PROCESS_ID" && base.count(name) != 0) {
      FUZZ_CHECK(value == base[name], "v1 replaced: " + name);
    }
    if (owned.count(name) != 0) {
      FUZZ_CHECK(ours.count(name) != 0 && value == ours[name], "inherited survived: " + name);
    }
    FUZZ_CHECK(!(w.nested == agent::NestedLauncher::kPaddle && nested_dropped.count(name) != 0),
               "under a nested Paddle launcher: " + name);
    if (name == "WORKER_ADDRS" || name == "PADDLE_TRAINER_ENDPOINTS") {
      FUZZ_CHECK(value.size() <= agent::kMaxClusterListBytes || base.count(name) != 0,
                 name + " too large");
    }
    FUZZ_CHECK(!(name == "PADDLE_TRAINER_ID" && w.nested == agent::NestedLauncher::kPaddle),
               "PADDLE_TRAINER_ID under a nested Paddle launcher");
    if (name == "TF_CONFIG") {
      saw_tf = true;
      FUZZ_CHECK(tf.has_value() && env[i].substr(eq + 1) == *tf, "TF_CONFIG is not ours");
    }
  }
  FUZZ_CHECK(saw_tf == tf.has_value(), "TF_CONFIG missing");
  return 0;
}

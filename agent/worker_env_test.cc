#include "agent/worker_env.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/golden.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::Key;
using ::testing::Not;
using Pairs = std::vector<std::pair<std::string, std::string>>;

// Node 1 of 2 nodes with 2 workers each.
WorkerEnvInput SecondOfTwoNodes() {
  WorkerEnvInput in;
  in.job_id = "job";
  in.node_rank = 1;
  in.nnodes = 2;
  in.local_world_size = 2;
  in.first_global_rank = 2;
  in.world_size = 4;
  in.master_addr = "job-node-0-0.job";
  in.master_port = 29500;
  in.restart_count = 1;
  in.max_restarts = 3;
  in.nodes = {{"10.0.0.1", 2}, {"10.0.0.2", 2}};
  return in;
}

// One worker on each of three nodes (the v1 XGBoostJob shape), rank 2.
WorkerEnvInput ThirdOfThreeSingleWorkerNodes() {
  WorkerEnvInput in;
  in.job_id = "xgb-worker";
  in.node_rank = 2;
  in.nnodes = 3;
  in.local_world_size = 1;
  in.first_global_rank = 2;
  in.world_size = 3;
  in.master_addr = "xgb-worker-0-0.xgb";
  in.master_port = 9999;
  in.nodes = {{"xgb-worker-0-0.xgb", 1}, {"xgb-worker-0-1.xgb", 1}, {"xgb-worker-0-2.xgb", 1}};
  return in;
}

// What a pod's container starts with; the goldens show what survives.
const std::map<std::string, std::string>& PodBaseEnv() {
  static const auto* base = new std::map<std::string, std::string>{
      {"HOME", "/root"},
      {"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
      {"PATH", "/usr/local/bin:/usr/bin:/bin"},
      {"RANK", "0"},                                 // a v1 operator's: replaced.
      {"PADDLE_MASTER", "old-worker-0:36543"},       // a v1 PaddleJob's: replaced.
      {"COORDINATOR_PORT", "6666"},                  // a v1 JAXJob's: kept.
      {"TF_CONFIG", R"({"cluster":{"worker":[]}})"}  // always dropped.
  };
  return *base;
}

// Compares `actual` with agent/testdata/<name>; TRAINLET_UPDATE_GOLDEN=1
// rewrites the file instead.
void ExpectGolden(const std::string& name, const std::string& actual) {
  trainlet::testing::ExpectGoldenFile(TRAINLET_AGENT_TESTDATA, name, actual);
}

std::string EnvText(const std::vector<std::string>& env) {
  return absl::StrCat(absl::StrJoin(env, "\n"), "\n");
}

bool HasName(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}

TEST(FrameworkEnv, AllVariablesForNodeOneOfTwo) {
  const Pairs expected = {
      {"MASTER_ADDR", "job-node-0-0.job"},
      {"MASTER_PORT", "29500"},
      {"RANK", "3"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", "3"},
      {"ROLE_WORLD_SIZE", "4"},
      {"NODE_RANK", "1"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"JAX_COORDINATOR_ADDRESS", "job-node-0-0.job:29500"},
      {"JAX_NUM_PROCESSES", "4"},
      {"JAX_PROCESS_ID", "3"},
      {"TF_CONFIG",
       R"({"cluster":{"worker":["10.0.0.1:29501","10.0.0.1:29502","10.0.0.2:29501",)"
       R"("10.0.0.2:29502"]},"task":{"type":"worker","index":3},"environment":"cloud"})"},
      {"DMLC_TRACKER_URI", "job-node-0-0.job"},
      {"DMLC_TRACKER_PORT", "29500"},
      {"DMLC_TASK_ID", "3"},
      {"DMLC_NUM_WORKER", "4"},
      {"PADDLE_JOB_ID", "job"},
      {"PADDLE_NNODES", "2"},
      {"PADDLE_MASTER", "job-node-0-0.job:29500"},
      {"PADDLE_TRAINER_ID", "3"},
      {"PADDLE_TRAINERS_NUM", "4"},
      {"PADDLE_GLOBAL_RANK", "3"},
      {"PADDLE_GLOBAL_SIZE", "4"},
      {"PADDLE_LOCAL_RANK", "1"},
      {"PADDLE_LOCAL_SIZE", "2"},
      {"PADDLE_RANK_IN_NODE", "1"},
      {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:29501,10.0.0.1:29502,10.0.0.2:29501,10.0.0.2:29502"},
      {"PADDLE_CURRENT_ENDPOINT", "10.0.0.2:29502"},
      {"PET_NNODES", "2"},
      {"PET_NODE_RANK", "1"},
      {"PET_MASTER_ADDR", "job-node-0-0.job"},
      {"PET_MASTER_PORT", "29500"},
      {"PET_NPROC_PER_NODE", "2"},
  };
  EXPECT_THAT(FrameworkEnv(SecondOfTwoNodes(), 1), ElementsAreArray(expected));
}

TEST(FrameworkEnv, AgentStore_IsTorchsMasterPortOnly) {
  WorkerEnvInput in = SecondOfTwoNodes();
  EXPECT_THAT(FrameworkEnv(in, 1), Not(Contains(Key(std::string("TORCHELASTIC_USE_AGENT_STORE")))));
  in.agent_store_port = 29499;
  const Pairs env = FrameworkEnv(in, 1);
  EXPECT_THAT(env, Contains(std::make_pair(std::string("MASTER_PORT"), std::string("29499"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("TORCHELASTIC_USE_AGENT_STORE"),
                                           std::string("True"))));
  // The other frameworks' rank 0 still listens on --master-port.
  EXPECT_THAT(env, Contains(std::make_pair(std::string("JAX_COORDINATOR_ADDRESS"),
                                           std::string("job-node-0-0.job:29500"))));
  EXPECT_THAT(env,
              Contains(std::make_pair(std::string("DMLC_TRACKER_PORT"), std::string("29500"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("PET_MASTER_PORT"), std::string("29500"))));
}

TEST(FrameworkEnv, LocalRankZero) {
  Pairs env = FrameworkEnv(SecondOfTwoNodes(), 0);
  EXPECT_THAT(env, Contains(std::make_pair(std::string("RANK"), std::string("2"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("LOCAL_RANK"), std::string("0"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("DMLC_TASK_ID"), std::string("2"))));
}

TEST(FrameworkEnv, Ipv6IsBracketedWhereAPortFollows) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.master_addr = "fd00::1";
  in.nodes = {{"fd00::1", 2}, {"fd00::2", 2}};
  Pairs env = FrameworkEnv(in, 0);
  EXPECT_THAT(env, Contains(std::make_pair(std::string("JAX_COORDINATOR_ADDRESS"),
                                           std::string("[fd00::1]:29500"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("MASTER_ADDR"), std::string("fd00::1"))));
  EXPECT_EQ(*TfConfigJson(in, 2),
            R"({"cluster":{"worker":["[fd00::1]:29501","[fd00::1]:29502","[fd00::2]:29501",)"
            R"("[fd00::2]:29502"]},"task":{"type":"worker","index":2},"environment":"cloud"})");
}

TEST(TfConfigJson, UnevenNodesAndEscaping) {
  WorkerEnvInput in;
  in.world_size = 3;
  in.master_port = 1000;
  in.nodes = {{"a\"b\\c", 1}, {"n\x01", 2}};
  EXPECT_EQ(*TfConfigJson(in, 0),
            R"({"cluster":{"worker":["a\"b\\c:1001","n\u0001:1001","n\u0001:1002"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(TfConfigJson, LeftOutWhenInconsistentOrOutOfPorts) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nodes.clear();
  EXPECT_EQ(TfConfigJson(in, 0), std::nullopt);
  in = SecondOfTwoNodes();
  in.world_size = 5;
  EXPECT_EQ(TfConfigJson(in, 0), std::nullopt);
  in = SecondOfTwoNodes();
  in.master_port = 65534;  // Workers would need 65535 and 65536.
  EXPECT_EQ(TfConfigJson(in, 0), std::nullopt);
  in.master_port = 65533;
  EXPECT_TRUE(TfConfigJson(in, 0).has_value());
}

TEST(TfConfigJson, LeftOutAbove64KiB) {
  WorkerEnvInput in;
  in.master_port = 29500;
  // 40-byte addresses: about 48 bytes per worker; 2000 workers ~ 96 KB.
  for (int n = 0; n < 250; ++n) in.nodes.push_back({std::string(40, 'h') + std::to_string(n), 8});
  in.world_size = 2000;
  in.local_world_size = 8;
  EXPECT_EQ(TfConfigJson(in, 0), std::nullopt);
  Pairs env = FrameworkEnv(in, 0);
  EXPECT_TRUE(
      std::none_of(env.begin(), env.end(), [](const auto& kv) { return kv.first == "TF_CONFIG"; }));
  in.nodes.resize(100);  // 800 workers ~ 39 KB: fits.
  in.world_size = 800;
  std::optional<std::string> json = TfConfigJson(in, 0);
  ASSERT_TRUE(json.has_value());
  EXPECT_LE(json->size(), kMaxTfConfigBytes);
}

TEST(BuildWorkerEnv, FrameworkOverridesInheritedRank) {
  std::map<std::string, std::string> base = {
      {"PATH", "/usr/bin"}, {"RANK", "7"}, {"MASTER_ADDR", "stale"}, {"HOME", "/root"}};
  std::vector<std::string> env = BuildWorkerEnv(base, SecondOfTwoNodes(), 1);
  EXPECT_THAT(env, Contains("RANK=3"));
  EXPECT_THAT(env, Not(Contains("RANK=7")));
  EXPECT_THAT(env, Contains("MASTER_ADDR=job-node-0-0.job"));
  EXPECT_THAT(env, Contains("PATH=/usr/bin"));
  EXPECT_THAT(env, Contains("HOME=/root"));
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& kv) { return kv.rfind("RANK=", 0) == 0; }),
            1);
  EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
}

TEST(BuildWorkerEnv, OmpNumThreadsRule) {
  WorkerEnvInput two = SecondOfTwoNodes();
  EXPECT_THAT(BuildWorkerEnv({}, two, 0), Contains("OMP_NUM_THREADS=1"));
  EXPECT_THAT(BuildWorkerEnv({{"OMP_NUM_THREADS", "8"}}, two, 0), Contains("OMP_NUM_THREADS=8"));
  WorkerEnvInput one = SecondOfTwoNodes();
  one.local_world_size = 1;
  std::vector<std::string> env = BuildWorkerEnv({}, one, 0);
  EXPECT_TRUE(std::none_of(env.begin(), env.end(), [](const std::string& kv) {
    return kv.rfind("OMP_NUM_THREADS=", 0) == 0;
  }));
}

TEST(BuildWorkerEnv, InheritedTfConfigIsDropped) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nodes.clear();  // No TF_CONFIG of ours.
  std::vector<std::string> env = BuildWorkerEnv({{"TF_CONFIG", "{\"old\":1}"}}, in, 0);
  EXPECT_TRUE(std::none_of(env.begin(), env.end(),
                           [](const std::string& kv) { return kv.rfind("TF_CONFIG=", 0) == 0; }));
}

TEST(PaddleEnv, EndpointsLeftOutAbove64KiBButCurrentEndpointStays) {
  WorkerEnvInput in;
  in.master_addr = "m";
  in.master_port = 29500;
  for (int n = 0; n < 250; ++n) in.nodes.push_back({std::string(40, 'h') + std::to_string(n), 8});
  in.world_size = 2000;
  in.local_world_size = 8;
  in.nnodes = 250;
  in.node_rank = 3;
  in.first_global_rank = 24;
  EXPECT_EQ(PaddleTrainerEndpoints(in), std::nullopt);
  std::vector<std::string> env = BuildWorkerEnv({}, in, 1);
  EXPECT_FALSE(HasName(env, "PADDLE_TRAINER_ENDPOINTS"));
  EXPECT_THAT(env,
              Contains(absl::StrCat("PADDLE_CURRENT_ENDPOINT=", std::string(40, 'h'), "3:29502")));
  in.nodes.resize(100);  // 800 workers ~ 39 KB: fits.
  in.world_size = 800;
  std::optional<std::string> list = PaddleTrainerEndpoints(in);
  ASSERT_TRUE(list.has_value());
  EXPECT_LE(list->size(), kMaxClusterListBytes);
  EXPECT_EQ(std::count(list->begin(), list->end(), ','), 799);
}

TEST(PaddleEnv, WithoutTheMemberListTheCurrentEndpointIsThisNodesOwn) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nodes.clear();  // above the coordinator's member-list limit.
  in.self_addr = "10.0.0.2";
  std::vector<std::string> env = BuildWorkerEnv({}, in, 1);
  EXPECT_FALSE(HasName(env, "PADDLE_TRAINER_ENDPOINTS"));
  EXPECT_THAT(env, Contains("PADDLE_CURRENT_ENDPOINT=10.0.0.2:29502"));
  EXPECT_THAT(env, Contains("PADDLE_TRAINER_ID=3"));
  EXPECT_THAT(env, Contains("PADDLE_MASTER=job-node-0-0.job:29500"));
  in.self_addr.clear();  // no address at all: none.
  EXPECT_FALSE(HasName(BuildWorkerEnv({}, in, 1), "PADDLE_CURRENT_ENDPOINT"));
  in.self_addr = "fd00::2";
  EXPECT_THAT(BuildWorkerEnv({}, in, 0), Contains("PADDLE_CURRENT_ENDPOINT=[fd00::2]:29501"));
  in.master_port = 65535;  // no port left for a worker.
  EXPECT_FALSE(HasName(BuildWorkerEnv({}, in, 0), "PADDLE_CURRENT_ENDPOINT"));
}

TEST(PaddleEnv, InheritedPaddleVariablesNeverSurvive) {
  // A PaddleJob's (parameter-server mode) or an outer launcher's.
  std::map<std::string, std::string> base = {{"PADDLE_TRAINER_ENDPOINTS", "old:1,old:2"},
                                             {"PADDLE_CURRENT_ENDPOINT", "old:1"},
                                             {"PADDLE_TRAINER_ID", "7"},
                                             {"PADDLE_TRAINERS_ENDPOINTS", "old:1"},
                                             {"PADDLE_TRAINER_NUM", "1"},
                                             {"PADDLE_SERVER_NUM", "1"},
                                             {"PADDLE_TRAINERS_NUM", "9"},
                                             {"PADDLE_RANK", "5"},
                                             {"PADDLE_GLOBAL_RANK", "7"},
                                             {"POD_IP", "10.0.0.2"}};
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nodes.clear();  // ours leaves the endpoints out.
  std::vector<std::string> env = BuildWorkerEnv(base, in, 1);
  for (const char* name :
       {"PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINERS_ENDPOINTS",
        "PADDLE_TRAINER_NUM", "PADDLE_SERVER_NUM", "PADDLE_RANK"}) {
    EXPECT_FALSE(HasName(env, name)) << name;
  }
  EXPECT_THAT(env, Contains("PADDLE_TRAINER_ID=3"));
  EXPECT_THAT(env, Contains("PADDLE_TRAINERS_NUM=4"));
  EXPECT_THAT(env, Contains("PADDLE_GLOBAL_RANK=3"));
  EXPECT_THAT(env, Contains("POD_IP=10.0.0.2"));  // the pod's own, not a Paddle variable.
  in.nested = NestedLauncher::kPaddle;            // no PADDLE_TRAINER_ID of ours, nor inherited.
  env = BuildWorkerEnv(base, in, 0);
  EXPECT_FALSE(HasName(env, "PADDLE_TRAINER_ID"));
  EXPECT_FALSE(HasName(env, "PADDLE_TRAINERS_NUM"));
  EXPECT_THAT(env, Contains("PADDLE_RANK=1"));
}

TEST(PaddleEnv, Ipv6MasterIsBracketed) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.master_addr = "fd00::1";
  in.nodes = {{"fd00::1", 2}, {"fd00::2", 2}};
  std::vector<std::string> env = BuildWorkerEnv({}, in, 0);
  EXPECT_THAT(env, Contains("PADDLE_MASTER=[fd00::1]:29500"));
  EXPECT_THAT(env, Contains("PADDLE_CURRENT_ENDPOINT=[fd00::2]:29501"));
}

TEST(PaddleEnv, NestedLauncherGetsNodeLevelVariablesOnly) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nested = NestedLauncher::kPaddle;
  std::vector<std::string> env =
      BuildWorkerEnv({{"POD_IP", "10.0.0.2"}, {"MASTER_ADDR", "pod-master"}, {"RANK", "5"}}, in, 0);
  EXPECT_THAT(env, Contains("PADDLE_JOB_ID=job"));
  EXPECT_THAT(env, Contains("PADDLE_NNODES=2"));
  EXPECT_THAT(env, Contains("PADDLE_MASTER=job-node-0-0.job:29500"));
  EXPECT_THAT(env, Contains("PADDLE_RANK=1"));
  EXPECT_THAT(env, Contains("POD_IP=10.0.0.2"));  // not node rank 0: the pod's own.
  for (const char* name : {"PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS",
                           "PADDLE_CURRENT_ENDPOINT", "PADDLE_GLOBAL_RANK", "PADDLE_LOCAL_RANK"}) {
    EXPECT_FALSE(HasName(env, name)) << name;
  }
  // The launcher passes its environment on: MASTER_ADDR:MASTER_PORT would
  // be where a child's init_parallel_env() builds its TCP store, on node 0
  // the port of the launcher's own master; RANK and WORLD_SIZE would count
  // launchers. Neither ours nor the pod's.
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                           "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"}) {
    EXPECT_FALSE(HasName(env, name)) << name;
  }
  // The rest describe the launchers, one per node, as for a nested torchrun.
  EXPECT_THAT(env, Contains("PET_NODE_RANK=1"));
  EXPECT_THAT(env, Contains("TORCHELASTIC_RESTART_COUNT=1"));
}

TEST(PaddleEnv, NestedLauncherOnNodeZeroHostsTheMasterAtItsAddress) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nested = NestedLauncher::kPaddle;
  in.node_rank = 0;
  in.first_global_rank = 0;
  std::vector<std::string> env = BuildWorkerEnv({{"POD_IP", "10.0.0.1"}}, in, 0);
  EXPECT_THAT(env, Contains("POD_IP=job-node-0-0.job"));
  EXPECT_THAT(env, Contains("PADDLE_RANK=0"));
  EXPECT_THAT(env, Contains("PADDLE_MASTER=job-node-0-0.job:29500"));
}

TEST(KubeflowV1Env, JaxSpellingsWithTheHostApart) {
  EXPECT_THAT(KubeflowV1Env(SecondOfTwoNodes(), 1),
              ElementsAreArray(Pairs{{"COORDINATOR_ADDRESS", "job-node-0-0.job"},
                                     {"COORDINATOR_PORT", "29500"},
                                     {"NUM_PROCESSES", "4"},
                                     {"PROCESS_ID", "3"}}));  // several workers per node: no
                                                              // WORKER_ADDRS.
}

TEST(KubeflowV1Env, XgboostWorkerAddrsListTheOtherNodes) {
  Pairs env = KubeflowV1Env(ThirdOfThreeSingleWorkerNodes(), 0);
  EXPECT_THAT(env, Contains(std::make_pair(std::string("WORKER_ADDRS"),
                                           std::string("xgb-worker-0-1.xgb,xgb-worker-0-2.xgb"))));
  EXPECT_THAT(env, Contains(std::make_pair(std::string("WORKER_PORT"), std::string("10000"))));
  WorkerEnvInput one = ThirdOfThreeSingleWorkerNodes();
  one.nnodes = one.world_size = 1;
  one.node_rank = one.first_global_rank = 0;
  one.nodes.resize(1);
  env = KubeflowV1Env(one, 0);
  EXPECT_TRUE(std::none_of(env.begin(), env.end(),
                           [](const auto& kv) { return kv.first == "WORKER_ADDRS"; }));
}

TEST(KubeflowV1Env, JaxSpellingsNeverOverrideTheAgentsEnvironment) {
  std::vector<std::string> env = BuildWorkerEnv({{"PROCESS_ID", "9"}, {"COORDINATOR_ADDRESS", ""}},
                                                ThirdOfThreeSingleWorkerNodes(), 0);
  EXPECT_THAT(env, Contains("PROCESS_ID=9"));
  EXPECT_THAT(env, Contains("COORDINATOR_ADDRESS="));  // set, even empty, is the user's.
  EXPECT_THAT(env, Contains("NUM_PROCESSES=3"));
}

// WORKER_ADDRS:WORKER_PORT and MASTER_ADDR:MASTER_PORT are one machine list,
// indexed by RANK: an operator's pair beside trainlet's MASTER_ADDR and RANK
// would name another job's machines.
TEST(KubeflowV1Env, XgboostPairGoesWithMasterAddrAndRank) {
  std::map<std::string, std::string> base = {{"WORKER_ADDRS", "x-worker-0,x-worker-1"},
                                             {"WORKER_PORT", "9999"},
                                             {"MASTER_ADDR", "x-master-0"},
                                             {"RANK", "1"}};
  std::vector<std::string> env = BuildWorkerEnv(base, ThirdOfThreeSingleWorkerNodes(), 0);
  EXPECT_THAT(env, Contains("WORKER_ADDRS=xgb-worker-0-1.xgb,xgb-worker-0-2.xgb"));
  EXPECT_THAT(env, Contains("WORKER_PORT=10000"));
  EXPECT_THAT(env, Contains("MASTER_ADDR=xgb-worker-0-0.xgb"));
  EXPECT_THAT(env, Contains("RANK=2"));
  // Where trainlet sets no pair (two workers per node), none is left.
  env = BuildWorkerEnv(base, SecondOfTwoNodes(), 0);
  EXPECT_FALSE(HasName(env, "WORKER_ADDRS"));
  EXPECT_FALSE(HasName(env, "WORKER_PORT"));
}

// The full environment, byte for byte: agent/testdata/*.env.
TEST(WorkerEnvGolden, PaddleCollectiveNodeOneOfTwo) {
  ExpectGolden("worker_env_paddle_node1_local1.env",
               EnvText(BuildWorkerEnv(PodBaseEnv(), SecondOfTwoNodes(), 1)));
}

TEST(WorkerEnvGolden, NestedPaddleLauncherNodeZero) {
  WorkerEnvInput in = SecondOfTwoNodes();
  in.nested = NestedLauncher::kPaddle;
  in.node_rank = 0;
  in.first_global_rank = 0;
  in.local_world_size = 1;
  in.world_size = 2;
  in.nodes = {{"10.0.0.1", 1}, {"10.0.0.2", 1}};
  ExpectGolden("worker_env_paddle_launch_node0.env", EnvText(BuildWorkerEnv(PodBaseEnv(), in, 0)));
}

TEST(WorkerEnvGolden, KubeflowV1SpellingsOneWorkerPerNode) {
  ExpectGolden("worker_env_kubeflow_v1_rank2.env",
               EnvText(BuildWorkerEnv(PodBaseEnv(), ThirdOfThreeSingleWorkerNodes(), 0)));
}

}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {

// Every name either layer sets, for node 0 and a later node, one worker per
// node and several, nested Paddle or not, is a round variable: a warm
// standby is started without them and handed them (warm_workers.h), so one
// missing here would be stale in a warm worker.
TEST(RoundVariableNames, CoverEverythingTheLayersSet) {
  const std::vector<std::string>& names = RoundVariableNames();
  for (NestedLauncher nested : {NestedLauncher::kNone, NestedLauncher::kPaddle}) {
    for (int local_world_size : {1, 2}) {
      for (int node_rank : {0, 1}) {
        WorkerEnvInput in;
        in.job_id = "j";
        in.node_rank = node_rank;
        in.nnodes = 2;
        in.local_world_size = local_world_size;
        in.first_global_rank = node_rank * local_world_size;
        in.world_size = 2 * local_world_size;
        in.master_addr = "10.0.0.1";
        in.nodes = {{"10.0.0.1", local_world_size}, {"10.0.0.2", local_world_size}};
        in.self_addr = in.nodes[node_rank].addr;
        in.nested = nested;
        auto layers = FrameworkEnv(in, 0);
        for (auto& kv : KubeflowV1Env(in, 0)) layers.push_back(kv);
        for (const auto& [name, value] : layers) {
          EXPECT_NE(std::find(names.begin(), names.end(), name), names.end())
              << name << " (nested " << static_cast<int>(nested) << ", node " << node_rank << ")";
        }
      }
    }
  }
}

}  // namespace
}  // namespace trainlet::agent

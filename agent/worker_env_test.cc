#include "agent/worker_env.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::Contains;
using ::testing::ElementsAreArray;
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
      {"PET_NNODES", "2"},
      {"PET_NODE_RANK", "1"},
      {"PET_MASTER_ADDR", "job-node-0-0.job"},
      {"PET_MASTER_PORT", "29500"},
      {"PET_NPROC_PER_NODE", "2"},
  };
  EXPECT_THAT(FrameworkEnv(SecondOfTwoNodes(), 1), ElementsAreArray(expected));
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

}  // namespace
}  // namespace trainlet::agent

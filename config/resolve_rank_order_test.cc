#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "config/topology_labels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using testing::RunSteps;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The configuration ResolveRankOrder makes of a downward API file `text`
// with the default keys.
RunConfig FromFile(const std::string& name, const std::string& text) {
  RunSteps steps({"--nnodes=2", "--node-rank=0", "--topology-file=" + WriteFile(name, text)});
  EXPECT_TRUE(steps.Through(&ResolveRankOrder).ok());
  return steps.config();
}

TEST(ParseTopologyPairs, WidestFirstAsGiven) {
  absl::StatusOr<Domains> d = ParseTopologyPairs(" zone=z1 , switch=sw-12,", "--topology");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(*d, ElementsAre(Pair("zone", "z1"), Pair("switch", "sw-12")));
}

TEST(ParseTopologyPairs, BadInput_NamesTheInput) {
  for (const char* bad :
       {"zone", "zone=", "=z1", "zone=a b", "zo ne=z", "zone=a,zone=b", "boot_id=x"}) {
    absl::StatusOr<Domains> d = ParseTopologyPairs(bad, "TRAINLET_TOPOLOGY");
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("TRAINLET_TOPOLOGY")) << bad;
  }
  std::string many;
  for (int i = 0; i < 17; ++i) many += "k" + std::to_string(i) + "=v,";
  EXPECT_FALSE(ParseTopologyPairs(many, "--topology").ok());
  EXPECT_FALSE(ParseTopologyPairs("k=" + std::string(257, 'v'), "--topology").ok());
}

TEST(ParseDownwardApiFile, GoQuotedValues) {
  // What the kubelet writes: key="value" lines, %q escaping, sorted keys.
  absl::StatusOr<std::map<std::string, std::string>> m = ParseDownwardApiFile(
      "app=\"trainer\"\n"
      "cloud.google.com/gce-topology-block=\"b-1\"\n"
      "note=\"say \\\"hi\\\"\\n\\tback\\\\slash \\u00e9\\x41\\101\"",
      "labels");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at("cloud.google.com/gce-topology-block"), "b-1");
  EXPECT_EQ(m->at("note"),
            "say \"hi\"\n\tback\\slash \xc3\xa9"
            "AA");
}

TEST(ParseDownwardApiFile, Malformed_NamesFileAndLine) {
  for (const char* bad : {"k=v", "k=\"v", "k=\"a\"b\"", "=\"v\"", "k=\"\\q\"", "k=\"\\x4\""}) {
    absl::StatusOr<std::map<std::string, std::string>> m =
        ParseDownwardApiFile(std::string("a=\"1\"\n") + bad, "/etc/podinfo/labels");
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_THAT(m.status().message(), HasSubstr("/etc/podinfo/labels line 2")) << bad;
  }
}

TEST(ResolveRankOrder, FlagAndFiles_WidestFirst_SchedulerMarkFound) {
  const std::string labels =
      WriteFile("labels",
                "kueue.x-k8s.io/tas=\"true\"\nnvidia.com/gpu.clique=\"c0ffee.3\"\n"
                "topology.k8s.aws/network-node-layer-2=\"nn-2\"\n"
                "topology.k8s.aws/network-node-layer-1=\"nn-1\"\n");
  RunSteps steps(
      {"--nnodes=2", "--node-rank=0", "--topology=region=r1", "--topology-file=" + labels});
  ASSERT_TRUE(steps.Through(&ResolveRankOrder).ok());
  const RunConfig& c = steps.config();
  EXPECT_THAT(c.topology_domains, ElementsAre(Pair("region", "r1"),
                                              Pair("topology.k8s.aws/network-node-layer-1", "nn-1"),
                                              Pair("topology.k8s.aws/network-node-layer-2", "nn-2"),
                                              Pair("nvidia.com/gpu.clique", "c0ffee.3")));
  EXPECT_EQ(c.scheduler_placement, "kueue.x-k8s.io/tas");
  EXPECT_EQ(c.rank_order, v1::RANK_ORDER_AUTO);
  EXPECT_FALSE(c.node_rank_from_index);  // --node-rank is explicit
}

// Volcano's job-wide network topology and KAI's topology name keep the job
// in one domain but place its pods there in any order: they are no index
// placement, and must not turn topology order off.
TEST(ResolveRankOrder, JobWideTopologyConstraints_AreNoIndexPlacement) {
  EXPECT_EQ(FromFile("annotations-job-wide",
                     "kai.scheduler/topology=\"cluster-topology\"\n"
                     "kai.scheduler/topology-required-placement=\"zone\"\n"
                     "volcano.sh/network-topology-highest-tier=\"2\"\n"
                     "volcano.sh/network-topology-mode=\"hard\"\n")
                .scheduler_placement,
            "");
  EXPECT_EQ(FromFile("annotations-segments",
                     "kai.scheduler/segment-size=\"4\"\n"
                     "kai.scheduler/topology=\"cluster-topology\"\n")
                .scheduler_placement,
            "kai.scheduler/segment-size");
}

// A FIFO nothing writes to blocked the agent's start forever in open().
TEST(ResolveRankOrder, FifoOrDirectory_IsAnErrorNotAHang) {
  const std::string fifo = ::testing::TempDir() + "/topology-fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Unblocks a reader that opened the FIFO after all (the bug), so that
  // the test fails instead of hanging.
  std::atomic<bool> done{false};
  std::thread unblock([&] {
    for (int i = 0; i < 300 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (done) return;
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) close(fd);
  });
  absl::Status s = RunSteps({"--nnodes=2", "--node-rank=0", "--topology-file=" + fifo})
                       .Through(&ResolveRankOrder);
  done = true;
  unblock.join();
  unlink(fifo.c_str());
  EXPECT_THAT(s.message(), HasSubstr("not a regular file"));
  EXPECT_THAT(s.message(), HasSubstr("topology-fifo"));

  EXPECT_THAT(RunSteps({"--nnodes=2", "--node-rank=0", "--topology-file=" + ::testing::TempDir()})
                  .Through(&ResolveRankOrder)
                  .message(),
              HasSubstr("not a regular file"));
}

// Topograph's chart before NVIDIA/topograph#208 labelled the leaf switch
// "block" and the top tier "datacenter": the default keys read them, widest
// first.
TEST(ResolveRankOrder, DefaultKeys_ReadTopographsEarlierLabelNames) {
  EXPECT_THAT(FromFile("labels-topograph-v0",
                       "network.topology.nvidia.com/accelerator=\"nvl1\"\n"
                       "network.topology.nvidia.com/block=\"s1\"\n"
                       "network.topology.nvidia.com/datacenter=\"s3\"\n"
                       "network.topology.nvidia.com/spine=\"s2\"\n")
                  .topology_domains,
              ElementsAre(Pair("network.topology.nvidia.com/datacenter", "s3"),
                          Pair("network.topology.nvidia.com/spine", "s2"),
                          Pair("network.topology.nvidia.com/block", "s1"),
                          Pair("network.topology.nvidia.com/accelerator", "nvl1")));
}

TEST(ResolveRankOrder, TopologyKeysChooseWhatIsRead) {
  const std::string labels = WriteFile("labels2", "rack=\"r7\"\nrow=\"w2\"\nzone=\"z\"\n");
  RunSteps steps({"--nnodes=2", "--node-rank=0", "--topology-file=" + labels,
                  "--topology-keys=row,rack", "--rank-order=topology"});
  ASSERT_TRUE(steps.Through(&ResolveRankOrder).ok());
  EXPECT_THAT(steps.config().topology_domains, ElementsAre(Pair("row", "w2"), Pair("rack", "r7")));
  EXPECT_EQ(steps.config().rank_order, v1::RANK_ORDER_TOPOLOGY);
}

TEST(ResolveRankOrder, PodIndexHint_IsFromIndex) {
  RunSteps steps({"--nnodes=2", "--coordinator=head"}, {{"JOB_COMPLETION_INDEX", "1"}});
  ASSERT_TRUE(steps.Through(&ResolveRankOrder).ok());
  EXPECT_EQ(steps.config().node_rank_hint, 1);
  EXPECT_TRUE(steps.config().node_rank_from_index);
}

TEST(ResolveRankOrder, BadInput_IsAUsageErrorNamingIt) {
  EXPECT_THAT(RunSteps({"--nnodes=2", "--node-rank=0", "--rank-order=fast"})
                  .Through(&ResolveRankOrder)
                  .message(),
              HasSubstr("--rank-order: expected auto, index or topology"));
  EXPECT_THAT(RunSteps({"--nnodes=2", "--node-rank=0", "--topology-file=/nonexistent/labels"})
                  .Through(&ResolveRankOrder)
                  .message(),
              HasSubstr("--topology-file"));
  const std::string spaced = WriteFile("annotations", "rack=\"a b\"\n");
  EXPECT_THAT(
      RunSteps({"--nnodes=2", "--node-rank=0", "--topology-file=" + spaced, "--topology-keys=rack"})
          .Through(&ResolveRankOrder)
          .message(),
      HasSubstr("the value of rack"));
}

}  // namespace
}  // namespace trainlet::agent

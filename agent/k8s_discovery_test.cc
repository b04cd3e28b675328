#include "agent/k8s_discovery.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Env = std::map<std::string, std::string>;

TEST(ParseJobSetHostname, TrainerPodNames) {
  auto h = ParseJobSetHostname("my-train-node-0-12");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->prefix, "my-train-node");
  EXPECT_EQ(h->job_index, 0);
  EXPECT_EQ(h->pod_index, 12);
  h = ParseJobSetHostname("t-node-3-0");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->prefix, "t-node");
  EXPECT_EQ(h->job_index, 3);
}

TEST(ParseJobSetHostname, RejectsOtherShapes) {
  for (const char* name : {"", "workstation", "node-0", "node-0-1", "-a-0-1", "a--0-1",
                           "t-node-x-1", "t-node-0-", "t-node-0-1a", "t-node-0-12345678901"}) {
    EXPECT_FALSE(ParseJobSetHostname(name).has_value()) << name;
  }
}

TEST(SubdomainFromFqdn, KubernetesShape) {
  EXPECT_EQ(SubdomainFromFqdn("t-node-0-1", "t-node-0-1.t.default.svc.cluster.local"), "t");
  EXPECT_EQ(SubdomainFromFqdn("t-node-0-1", "t-node-0-1.t.default.svc"), "t");
  EXPECT_EQ(SubdomainFromFqdn("t-node-0-1", "t-node-0-1.example.com"), "");
  EXPECT_EQ(SubdomainFromFqdn("t-node-0-1", "other.t.default.svc.cluster.local"), "");
  EXPECT_EQ(SubdomainFromFqdn("t-node-0-1", ""), "");
}

SystemInfo Pod(const std::string& hostname, const std::string& fqdn = "") {
  SystemInfo sys;
  sys.hostname = hostname;
  sys.fqdn = fqdn;
  return sys;
}

TEST(DiscoverKubernetes, JobPodSigns) {
  Env k8s = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  EXPECT_TRUE(DiscoverKubernetes(k8s, Pod("t-node-0-1")).in_kubernetes);
  EXPECT_THAT(DiscoverKubernetes(k8s, Pod("t-node-0-1")).job_pod_signs,
              ElementsAre("JobSet hostname t-node-0-1"));
  EXPECT_THAT(DiscoverKubernetes(k8s, Pod("web-7d9f8-x2b4k")).job_pod_signs, IsEmpty());
  Env indexed = k8s;
  indexed["JOB_COMPLETION_INDEX"] = "3";
  indexed["PET_MASTER_ADDR"] = "m";
  indexed["PET_MASTER_PORT"] = "\n";
  EXPECT_THAT(DiscoverKubernetes(indexed, Pod("web")).job_pod_signs,
              ElementsAre("JOB_COMPLETION_INDEX=3", "PET_MASTER_ADDR", "PET_MASTER_PORT"));
  // Outside Kubernetes nothing is a pod.
  indexed.erase("KUBERNETES_SERVICE_HOST");
  KubernetesDiscovery outside = DiscoverKubernetes(indexed, Pod("t-node-0-1"));
  EXPECT_FALSE(outside.in_kubernetes);
  EXPECT_THAT(outside.job_pod_signs, IsEmpty());
}

TEST(DiscoverKubernetes, NothingOutsideKubernetes) {
  KubernetesDiscovery d = DiscoverKubernetes({}, Pod("t-node-0-1"));
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_FALSE(d.node_rank.has_value());
  EXPECT_FALSE(d.coordinator_host.has_value());
  EXPECT_FALSE(d.job_id.has_value());
}

TEST(DiscoverKubernetes, PetVariables) {
  KubernetesDiscovery d = DiscoverKubernetes({{"PET_NNODES", "2:4"},
                                              {"PET_NODE_RANK", "1"},
                                              {"JOB_COMPLETION_INDEX", "5"},
                                              {"PET_MASTER_ADDR", "m"},
                                              {"PET_MASTER_PORT", "23456"},
                                              {"PET_NPROC_PER_NODE", "gpu"},
                                              {"PET_MAX_RESTARTS", "2"}},
                                             Pod("x"));
  EXPECT_EQ(d.nnodes->text, "2:4");
  EXPECT_EQ(d.nnodes->origin, "PET_NNODES");
  EXPECT_EQ(d.node_rank->text, "1");
  EXPECT_EQ(d.node_rank->origin, "PET_NODE_RANK");
  EXPECT_EQ(d.coordinator_host->text, "m");
  EXPECT_EQ(d.master_port->text, "23456");
  EXPECT_EQ(d.nproc_per_node->text, "gpu");
  EXPECT_EQ(d.max_restarts->text, "2");
}

TEST(DiscoverKubernetes, EmptyVariablesAreUnset) {
  KubernetesDiscovery d =
      DiscoverKubernetes({{"PET_NODE_RANK", ""}, {"JOB_COMPLETION_INDEX", "4"}}, Pod("x"));
  EXPECT_EQ(d.node_rank->origin, "JOB_COMPLETION_INDEX");
}

TEST(DiscoverKubernetes, JobSetHostnameWithFqdn) {
  KubernetesDiscovery d =
      DiscoverKubernetes({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}},
                         Pod("t-node-0-3", "t-node-0-3.t.ns.svc.cluster.local"));
  EXPECT_EQ(d.node_rank->text, "3");
  EXPECT_EQ(d.node_rank->origin, "JobSet hostname t-node-0-3");
  EXPECT_EQ(d.coordinator_host->text, "t-node-0-0.t");
  EXPECT_EQ(d.coordinator_host->origin,
            "JobSet hostname t-node-0-3 and FQDN t-node-0-3.t.ns.svc.cluster.local");
  EXPECT_EQ(d.job_id->text, "t-node");
}

TEST(DiscoverKubernetes, PetAndIndexBeatHostname) {
  KubernetesDiscovery d =
      DiscoverKubernetes({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                          {"JOB_COMPLETION_INDEX", "1"},
                          {"PET_MASTER_ADDR", "explicit"}},
                         Pod("t-node-0-3", "t-node-0-3.t.ns.svc.cluster.local"));
  EXPECT_EQ(d.node_rank->text, "1");
  EXPECT_EQ(d.coordinator_host->text, "explicit");
  EXPECT_EQ(d.job_id->text, "t-node");
}

}  // namespace
}  // namespace trainlet::agent

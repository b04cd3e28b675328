#include "agent/k8s_discovery.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

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

// A fake filesystem root in a temp dir, removed afterwards.
class FakeRoot {
 public:
  FakeRoot() {
    char tmpl[] = "/tmp/trainlet_volcano_XXXXXX";
    const char* dir = mkdtemp(tmpl);
    if (dir != nullptr) path_ = dir;
  }
  ~FakeRoot() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  void Write(const std::string& relative, const std::string& content) {
    std::string full = path_ + "/" + relative;
    for (size_t slash = full.find('/', path_.size() + 1); slash != std::string::npos;
         slash = full.find('/', slash + 1)) {
      mkdir(full.substr(0, slash).c_str(), 0755);
    }
    std::ofstream(full) << content;
  }

 private:
  std::string path_;
};

// Pod <job>-<task>-<index> of Volcano job "vj", task "worker".
SystemInfo VolcanoPodAt(const FakeRoot& root, int index, bool with_fqdn = true) {
  SystemInfo sys;
  sys.root = root.path();
  sys.hostname = "vj-worker-" + std::to_string(index);
  if (with_fqdn) sys.fqdn = sys.hostname + ".vj.default.svc.cluster.local";
  return sys;
}

Env VolcanoEnv(int index) {
  return {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", std::to_string(index)}};
}

TEST(ParseVolcanoHostFile, OneHostALine) {
  auto hosts = ParseVolcanoHostFile("vj-worker-0.vj\n  vj-worker-1.vj \n\n", "f");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("vj-worker-0.vj", "vj-worker-1.vj"));
  auto bad = ParseVolcanoHostFile("vj-worker-0.vj\nslots=8 x\n", "/etc/volcano/worker.host");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("/etc/volcano/worker.host line 2: \"slots=8 x\""));
}

TEST(DiscoverVolcano, HostFileGivesCountCoordinatorAndTask) {
  FakeRoot root;
  root.Write("etc/volcano/ps.host", "vj-ps-0.vj\n");
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\nvj-worker-2.vj\n");
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(2), VolcanoPodAt(root, 2));
  EXPECT_THAT(d.job_pod_signs, ElementsAre("VK_TASK_INDEX=2"));
  ASSERT_TRUE(d.nnodes.has_value());
  EXPECT_EQ(d.nnodes->text, "3");
  EXPECT_EQ(d.nnodes->origin, "/etc/volcano/worker.host (its line count)");
  EXPECT_EQ(d.node_rank->text, "2");
  EXPECT_EQ(d.node_rank->origin, "VK_TASK_INDEX");
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0.vj");
  EXPECT_EQ(d.job_id->text, "vj-worker");
  EXPECT_THAT(d.notes, IsEmpty());
  std::optional<VolcanoPod> pod = DiscoverVolcano(VolcanoEnv(2), VolcanoPodAt(root, 2, false));
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ(pod->task, "worker");
  EXPECT_EQ(pod->subdomain, "vj");  // from the host file's line.
}

TEST(DiscoverVolcano, DashedNamesAndVcTaskIndex) {
  FakeRoot root;
  root.Write("etc/volcano/my_task.host", "my-job-my-task-0.my-job\nmy-job-my-task-1.my-job\n");
  SystemInfo sys;
  sys.root = root.path();
  sys.hostname = "my-job-my-task-1";
  KubernetesDiscovery d =
      DiscoverKubernetes({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VC_TASK_INDEX", "1"}}, sys);
  EXPECT_EQ(d.nnodes->text, "2");
  EXPECT_EQ(d.coordinator_host->text, "my-job-my-task-0.my-job");
  EXPECT_EQ(d.job_id->text, "my-job-my-task");
  EXPECT_EQ(d.node_rank->origin, "VC_TASK_INDEX");
}

TEST(DiscoverVolcano, WithoutHostFilesUsesFqdnAndVcTaskNum) {
  FakeRoot root;
  Env env = VolcanoEnv(1);
  env["VC_WORKER_NUM"] = "4";
  env["VC_WORKER_HOSTS"] = "vj-worker-0.vj,vj-worker-1.vj,vj-worker-2.vj,vj-worker-3.vj";
  KubernetesDiscovery d = DiscoverKubernetes(env, VolcanoPodAt(root, 1));
  EXPECT_EQ(d.nnodes->text, "4");
  EXPECT_EQ(d.nnodes->origin, "VC_WORKER_NUM");
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0.vj");
  EXPECT_EQ(d.node_rank->text, "1");
  // Without an FQDN the task is unknown: no count, a short coordinator name.
  d = DiscoverKubernetes(env, VolcanoPodAt(root, 1, false));
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0");
  EXPECT_THAT(d.job_pod_signs, ElementsAre("VK_TASK_INDEX=1"));  // so nnodes is required.
}

TEST(DiscoverVolcano, PetVariablesWin) {
  FakeRoot root;
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\n");
  Env env = VolcanoEnv(1);
  env["PET_NNODES"] = "5";
  env["PET_MASTER_ADDR"] = "explicit";
  KubernetesDiscovery d = DiscoverKubernetes(env, VolcanoPodAt(root, 1));
  EXPECT_EQ(d.nnodes->text, "5");
  EXPECT_EQ(d.coordinator_host->text, "explicit");
  EXPECT_EQ(d.node_rank->text, "1");
}

TEST(DiscoverVolcano, BadOrForeignHostFilesAreSkippedWithANote) {
  FakeRoot root;
  root.Write("etc/volcano/a.host", "vj-worker-0.vj\nnot a host\n");
  root.Write("etc/volcano/b.host", "other-0.o\nother-1.o\n");            // another task's.
  root.Write("etc/volcano/c.host", "vj-worker-1.vj\nvj-worker-0.vj\n");  // wrong line.
  mkdir((root.path() + "/etc/volcano/d.host").c_str(), 0755);            // not a file.
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(1), VolcanoPodAt(root, 1));
  EXPECT_THAT(
      d.notes,
      ElementsAre(
          ::testing::HasSubstr("/etc/volcano/a.host line 2"),
          "an unusable Volcano host file, skipped: /etc/volcano/d.host is not a regular file"));
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0.vj");  // from the FQDN.
}

TEST(DiscoverVolcano, NotAVolcanoPod) {
  FakeRoot root;
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\n");
  // The index does not match the hostname, or there is none, or no task part.
  EXPECT_FALSE(DiscoverVolcano(VolcanoEnv(3), VolcanoPodAt(root, 1)).has_value());
  EXPECT_FALSE(DiscoverVolcano({{"VK_TASK_INDEX", "x"}}, VolcanoPodAt(root, 1)).has_value());
  EXPECT_FALSE(DiscoverVolcano({}, VolcanoPodAt(root, 0)).has_value());
  SystemInfo plain;
  plain.hostname = "worker-0";
  EXPECT_FALSE(DiscoverVolcano(VolcanoEnv(0), plain).has_value());
  // Outside Kubernetes nothing is read.
  KubernetesDiscovery d = DiscoverKubernetes({{"VK_TASK_INDEX", "0"}}, VolcanoPodAt(root, 0));
  EXPECT_FALSE(d.coordinator_host.has_value());
  EXPECT_THAT(d.job_pod_signs, IsEmpty());
}

TEST(DiscoverVolcano, TakesPrecedenceOverAJobSetLookingHostname) {
  FakeRoot root;
  // Job "t", task "node-0" (a JobSet-like hostname t-node-0-1).
  root.Write("etc/volcano/node-0.host", "t-node-0-0.t\nt-node-0-1.t\n");
  SystemInfo sys;
  sys.root = root.path();
  sys.hostname = "t-node-0-1";
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(1), sys);
  EXPECT_EQ(d.job_id->text, "t-node-0");
  EXPECT_EQ(d.nnodes->text, "2");
  EXPECT_THAT(d.job_pod_signs, ElementsAre("VK_TASK_INDEX=1"));
}

}  // namespace
}  // namespace trainlet::agent

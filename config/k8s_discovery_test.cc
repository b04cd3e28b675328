#include "config/k8s_discovery.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/testing/temp_root.h"
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

using FakeRoot = trainlet::testing::TempRoot;

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
  root.Write("etc/volcano/ps.host", "\n");  // a task with no pods.
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\nvj-worker-2.vj\n");
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(2), VolcanoPodAt(root, 2));
  EXPECT_EQ(d.volcano_tasks, "");
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
  // Without an FQDN the task is the VC_<TASK>_NUM the hostname ends with;
  // the coordinator name is short.
  d = DiscoverKubernetes(env, VolcanoPodAt(root, 1, false));
  EXPECT_EQ(d.nnodes->text, "4");
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0");
  // Without either, no count.
  env.erase("VC_WORKER_NUM");
  d = DiscoverKubernetes(env, VolcanoPodAt(root, 1, false));
  EXPECT_FALSE(d.nnodes.has_value());
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
  mkdir((root.path() + "/etc/volcano/d.host").c_str(), 0755);  // not a file.
  // This task's by name, but its line 2 is another pod.
  root.Write("etc/volcano/worker.host", "vj-worker-1.vj\nvj-worker-0.vj\n");
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(1), VolcanoPodAt(root, 1));
  EXPECT_THAT(
      d.notes,
      ElementsAre(
          ::testing::HasSubstr("/etc/volcano/a.host line 2"),
          "an unusable Volcano host file, skipped: /etc/volcano/d.host is not a regular file",
          "a Volcano host file that does not list this pod, skipped: /etc/volcano/worker.host "
          "line 2 is \"vj-worker-0.vj\", not vj-worker-1"));
  EXPECT_EQ(d.volcano_tasks, "");
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0.vj");  // from the FQDN.
}

TEST(DiscoverVolcano, AnIndexPastTheTaskFilesEndIsNoted) {
  FakeRoot root;
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\n");
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(2), VolcanoPodAt(root, 2));
  EXPECT_THAT(d.notes, ElementsAre("a Volcano host file that does not list this pod, skipped: "
                                   "/etc/volcano/worker.host has 2 lines, none for "
                                   "VK_TASK_INDEX=2"));
}

TEST(DiscoverVolcano, AnInvalidVkTaskIndexFallsBackToVcTaskIndex) {
  FakeRoot root;
  root.Write("etc/volcano/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\n");
  for (const char* bad : {"x", "3", "-1"}) {
    Env env = {
        {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", bad}, {"VC_TASK_INDEX", "1"}};
    KubernetesDiscovery d = DiscoverKubernetes(env, VolcanoPodAt(root, 1));
    ASSERT_TRUE(d.node_rank.has_value()) << bad;
    EXPECT_EQ(d.node_rank->text, "1");
    EXPECT_EQ(d.node_rank->origin, "VC_TASK_INDEX");
    EXPECT_EQ(d.nnodes->text, "2");
  }
}

TEST(DiscoverVolcano, ReadsAtMost64HostFilesAndSaysSo) {
  FakeRoot root;
  for (int i = 0; i < 70; ++i) root.Write("etc/volcano/t" + std::to_string(i) + ".host", "\n");
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(0), VolcanoPodAt(root, 0));
  EXPECT_THAT(d.notes, ElementsAre("more than 64 *.host files in /etc/volcano: only 64 were read"));
}

// Kubernetes mounts a ConfigMap as keys that are links into a timestamped
// directory: worker.host -> ..data/worker.host, ..data -> ..2026_11_23_....
void WriteConfigMap(const FakeRoot& root, const std::map<std::string, std::string>& keys) {
  const std::string dir = root.path() + "/etc/volcano";
  mkdir((root.path() + "/etc").c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  const std::string stamp = "..2026_11_23_10_00_00.123456789";
  mkdir((dir + "/" + stamp).c_str(), 0755);
  ASSERT_EQ(symlink(stamp.c_str(), (dir + "/..data").c_str()), 0);
  for (const auto& [name, content] : keys) {
    std::ofstream(dir + "/" + stamp + "/" + name) << content;
    ASSERT_EQ(symlink(("..data/" + name).c_str(), (dir + "/" + name).c_str()), 0);
  }
}

TEST(DiscoverVolcano, ReadsAConfigMapsLinkedKeys) {
  FakeRoot root;
  WriteConfigMap(root, {{"worker.host", "vj-worker-0.vj\nvj-worker-1.vj\nvj-worker-2.vj\n"}});
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(1), VolcanoPodAt(root, 1));
  EXPECT_THAT(d.notes, IsEmpty());
  ASSERT_TRUE(d.nnodes.has_value());
  EXPECT_EQ(d.nnodes->text, "3");
  EXPECT_EQ(d.nnodes->origin, "/etc/volcano/worker.host (its line count)");
  EXPECT_EQ(d.coordinator_host->text, "vj-worker-0.vj");
}

TEST(DiscoverVolcano, ALinkOutOfEtcVolcanoIsSkippedWithANote) {
  FakeRoot root;
  root.Write("outside/worker.host", "vj-worker-0.vj\nvj-worker-1.vj\n");
  root.Write("etc/volcano/.keep", "");
  ASSERT_EQ(symlink((root.path() + "/outside/worker.host").c_str(),
                    (root.path() + "/etc/volcano/worker.host").c_str()),
            0);
  ASSERT_EQ(symlink("missing", (root.path() + "/etc/volcano/gone.host").c_str()), 0);
  KubernetesDiscovery d = DiscoverKubernetes(VolcanoEnv(1), VolcanoPodAt(root, 1));
  EXPECT_THAT(d.notes,
              ElementsAre("an unusable Volcano host file, skipped: /etc/volcano/gone.host cannot "
                          "be resolved: No such file or directory",
                          ::testing::StartsWith("an unusable Volcano host file, skipped: "
                                                "/etc/volcano/worker.host links outside "
                                                "/etc/volcano (to ")));
  EXPECT_FALSE(d.nnodes.has_value());
}

// The pytorch plugin's layout: task master (1 pod) and worker (2 pods).
TEST(DiscoverVolcano, SeveralTasksWithPodsGiveNoCountRankOrCoordinator) {
  FakeRoot root;
  WriteConfigMap(root, {{"master.host", "pj-master-0.pj\n"},
                        {"worker.host", "pj-worker-0.pj\npj-worker-1.pj\n"}});
  SystemInfo sys;
  sys.root = root.path();
  sys.hostname = "pj-master-0";
  sys.fqdn = "pj-master-0.pj.default.svc.cluster.local";
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "0"}};
  KubernetesDiscovery d = DiscoverKubernetes(env, sys);
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_FALSE(d.node_rank.has_value());
  EXPECT_FALSE(d.coordinator_host.has_value());
  ASSERT_TRUE(d.job_id.has_value());
  EXPECT_EQ(d.job_id->text, "pj");  // the same in both tasks' pods.
  EXPECT_EQ(d.volcano_tasks,
            "master, this pod's (1 host, /etc/volcano/master.host), worker (2 hosts, "
            "/etc/volcano/worker.host)");
  // Without host files: the svc plugin's variables say the same.
  FakeRoot empty;
  sys.root = empty.path();
  env["VC_MASTER_NUM"] = "1";
  env["VC_WORKER_NUM"] = "2";
  env["VC_WORKER_HOSTS"] = "pj-worker-0.pj,pj-worker-1.pj";
  d = DiscoverKubernetes(env, sys);
  EXPECT_FALSE(d.nnodes.has_value());
  EXPECT_EQ(d.volcano_tasks, "master (this pod's), worker (2 hosts, VC_WORKER_NUM)");
  // A task with no pods does not count.
  env["VC_WORKER_NUM"] = "0";
  d = DiscoverKubernetes(env, sys);
  EXPECT_EQ(d.volcano_tasks, "");
  EXPECT_EQ(d.nnodes->text, "1");
}

// Volcano's MPI example: tasks mpimaster (the launcher) and mpiworker.
TEST(ApplyMpiConventions, VolcanoLauncherAndWorkerTasks) {
  FakeRoot root;
  WriteConfigMap(root,
                 {{"mpimaster.host", "mj-mpimaster-0.mj\n"},
                  {"mpiworker.host", "mj-mpiworker-0.mj\nmj-mpiworker-1.mj\nmj-mpiworker-2.mj\n"}});
  SystemInfo launcher;
  launcher.root = root.path();
  launcher.hostname = "mj-mpimaster-0";
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "0"}};
  KubernetesDiscovery d = DiscoverKubernetes(env, launcher);
  ApplyMpiConventions(MpiRole::kLauncher, env, launcher, &d);
  EXPECT_EQ(d.volcano_tasks, "");
  ASSERT_TRUE(d.nnodes.has_value());
  EXPECT_EQ(d.nnodes->text, "3");
  EXPECT_EQ(d.nnodes->origin, "/etc/volcano/mpiworker.host (the worker task's host count)");
  EXPECT_FALSE(d.node_rank.has_value());
  EXPECT_FALSE(d.coordinator_host.has_value());
  EXPECT_EQ(d.job_id->text, "mj");

  SystemInfo worker = launcher;
  worker.hostname = "mj-mpiworker-2";
  env["VK_TASK_INDEX"] = "2";
  d = DiscoverKubernetes(env, worker);
  ApplyMpiConventions(MpiRole::kWorker, env, worker, &d);
  EXPECT_EQ(d.volcano_tasks, "");
  ASSERT_TRUE(d.coordinator_host.has_value());
  EXPECT_EQ(d.coordinator_host->text, "mj-mpimaster-0.mj");
  EXPECT_EQ(d.coordinator_host->origin,
            "/etc/volcano/mpimaster.host (the launcher task's first host)");
  EXPECT_EQ(d.nnodes->text, "3");
  EXPECT_EQ(d.node_rank->text, "2");
  EXPECT_EQ(d.job_id->text, "mj");
}

TEST(ApplyMpiConventions, VolcanoLayoutsItCannotMapStayRefused) {
  FakeRoot root;
  WriteConfigMap(
      root, {{"a.host", "j-a-0.j\n"}, {"b.host", "j-b-0.j\nj-b-1.j\n"}, {"c.host", "j-c-0.j\n"}});
  SystemInfo sys;
  sys.root = root.path();
  sys.hostname = "j-a-0";
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "0"}};
  KubernetesDiscovery d = DiscoverKubernetes(env, sys);
  ApplyMpiConventions(MpiRole::kLauncher, env, sys, &d);
  EXPECT_THAT(d.volcano_tasks, ::testing::HasSubstr("c (1 host"));  // three tasks.
  EXPECT_FALSE(d.nnodes.has_value());
  // One task: its count is not the launcher's workers, its first host not
  // the workers' launcher.
  FakeRoot one;
  WriteConfigMap(one, {{"worker.host", "vj-worker-0.vj\nvj-worker-1.vj\n"}});
  d = DiscoverKubernetes(VolcanoEnv(1), VolcanoPodAt(one, 1));
  ApplyMpiConventions(MpiRole::kWorker, VolcanoEnv(1), VolcanoPodAt(one, 1), &d);
  EXPECT_FALSE(d.coordinator_host.has_value());
  d = DiscoverKubernetes(VolcanoEnv(0), VolcanoPodAt(one, 0));
  ApplyMpiConventions(MpiRole::kLauncher, VolcanoEnv(0), VolcanoPodAt(one, 0), &d);
  EXPECT_FALSE(d.nnodes.has_value());
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

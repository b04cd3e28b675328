#include "config/mpi_config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::map<std::string, std::string>;

SystemInfo Machine(const std::string& hostname = "launcher", const std::string& fqdn = "") {
  SystemInfo sys;
  sys.hostname = hostname;
  sys.fqdn = fqdn;
  sys.cpu_count = 4;
  return sys;
}

absl::StatusOr<MpiConfig> Launcher(std::vector<std::string> flags, const Env& env = {},
                                   const SystemInfo& sys = Machine()) {
  flags.insert(flags.end(), {"--", "mpirun", "-np", "4", "./app"});
  return ParseMpiConfig(MpiRole::kLauncher, flags, env, sys);
}
absl::StatusOr<MpiConfig> Worker(std::vector<std::string> flags, const Env& env = {},
                                 const SystemInfo& sys = Machine("w0")) {
  return ParseMpiConfig(MpiRole::kWorker, flags, env, sys);
}

TEST(MpiConfig, Launcher_CountsWorkers_HostsTheCoordinator_NoRank) {
  absl::StatusOr<MpiConfig> c = Launcher({"--nnodes=3"}, {{"JOB_COMPLETION_INDEX", "0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->run.nnodes.max, 4);  // 3 workers + the launcher.
  EXPECT_EQ(c->run.host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->run.node_rank_hint, -1);
  EXPECT_EQ(c->run.bind_addr, "0.0.0.0");
  EXPECT_EQ(c->run.advertise_addr, "launcher");
  EXPECT_EQ(c->mpi, "auto");
  EXPECT_EQ(c->ready_timeout, absl::Minutes(5));
  EXPECT_EQ(c->placement_timeout, absl::Seconds(60));
  EXPECT_THAT(c->run.command, ::testing::ElementsAre("mpirun", "-np", "4", "./app"));
}

TEST(MpiConfig, Launcher_StandaloneCoordinator) {
  absl::StatusOr<MpiConfig> c =
      Launcher({"--nnodes=2", "--coordinator=coord:4000", "--host-coordinator=no"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->run.host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->run.coordinator_host, "coord");
  EXPECT_EQ(c->run.coordinator_port, 4000);
}

TEST(MpiConfig, Launcher_Errors) {
  auto elastic = Launcher({"--nnodes=2:4"});
  EXPECT_EQ(elastic.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(elastic.status().message(), HasSubstr("fixed number of worker pods"));
  auto mpi = Launcher({"--mpi=lam"});
  EXPECT_THAT(mpi.status().message(),
              HasSubstr("--mpi: expected auto, openmpi, openmpi5, mpich or intel, got \"lam\""));
  auto no_command = ParseMpiConfig(MpiRole::kLauncher, {"--nnodes=2"}, {}, Machine());
  EXPECT_THAT(no_command.status().message(), HasSubstr("no COMMAND after --"));
  auto placement = Launcher({"--require-placement", "--placement-timeout=0"});
  EXPECT_THAT(placement.status().message(), HasSubstr("--placement-timeout must be above 0"));
  auto state = Launcher({"--state-dir=relative/dir"});
  EXPECT_THAT(state.status().message(), HasSubstr("--state-dir: expected an absolute path"));
}

TEST(MpiConfig, Launcher_FlagsAndEnvTwins) {
  absl::StatusOr<MpiConfig> c = Launcher(
      {"--mpi=openmpi5", "--launcher-as-node", "--nproc-per-node=2", "--ready-timeout=30s"},
      {{"TRAINLET_PLACEMENT_TIMEOUT", "5s"},
       {"TRAINLET_REQUIRE_PLACEMENT", "true"},
       {"TRAINLET_STATE_DIR", "/var/run/tl"},
       {"TRAINLET_SSH_KEY_DIR", "/root/.ssh"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mpi, "openmpi5");
  EXPECT_TRUE(c->launcher_as_node);
  EXPECT_EQ(c->run.nproc_per_node, 2);
  EXPECT_EQ(c->ready_timeout, absl::Seconds(30));
  EXPECT_EQ(c->placement_timeout, absl::Seconds(5));
  EXPECT_TRUE(c->require_placement);
  EXPECT_EQ(c->state_dir, "/var/run/tl");
  EXPECT_EQ(c->ssh_key_dir, "/root/.ssh");
}

TEST(MpiConfig, Launcher_SshMultiplexIsOnUnlessTurnedOff) {
  absl::StatusOr<MpiConfig> on = Launcher({}, {});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->ssh_multiplex);
  absl::StatusOr<MpiConfig> off = Launcher({}, {{"TRAINLET_SSH_MULTIPLEX", "false"}});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->ssh_multiplex);
  EXPECT_FALSE(Launcher({"--ssh-multiplex=maybe"}, {}).ok());
}

TEST(MpiConfig, Launcher_EarlyCommand) {
  absl::StatusOr<MpiConfig> c = Launcher({}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->early_command, MpiConfig::EarlyCommand::kAuto);
  c = Launcher({"--early-command=false"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->early_command, MpiConfig::EarlyCommand::kOff);
  c = Launcher({}, {{"TRAINLET_EARLY_COMMAND", "true"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->early_command, MpiConfig::EarlyCommand::kOn);
  c = Launcher({"--early-command=soon"}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::HasSubstr("--early-command: expected auto, true or false, got \"soon\""));
}

TEST(MpiConfig, Worker_JoinsTheLauncher_AdvertisesItsName) {
  absl::StatusOr<MpiConfig> c =
      Worker({"--coordinator=launcher", "--nproc-per-node=2", "--ssh-port=2022"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->run.host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->run.coordinator_host, "launcher");
  EXPECT_EQ(c->run.coordinator_port, 29400);
  EXPECT_EQ(c->run.advertise_addr, "w0");
  EXPECT_EQ(c->run.nproc_per_node, 2);
  EXPECT_EQ(c->ssh_port, 2022);
  EXPECT_TRUE(c->run.command.empty());
}

TEST(MpiConfig, Worker_Errors) {
  auto nowhere = Worker({});
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nowhere.status().message(), HasSubstr("cannot find the MPI launcher"));
  auto command = Worker({"--coordinator=l", "--", "sleep", "1"});
  EXPECT_THAT(command.status().message(), HasSubstr("takes no COMMAND"));
  auto port = Worker({"--coordinator=l", "--ssh-port=0"});
  EXPECT_THAT(port.status().message(), HasSubstr("--ssh-port"));
}

// Kubeflow Trainer's MPI runtime: JobSet `t` with replicated jobs launcher
// and node; the pods agree on the job id and find the launcher by name.
TEST(MpiConfig, JobSetPods_AgreeOnJobId_WorkerFindsLauncher) {
  Env k8s = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"JOB_COMPLETION_INDEX", "1"}};
  absl::StatusOr<MpiConfig> w =
      Worker({}, k8s, Machine("t-node-0-1", "t-node-0-1.t.default.svc.cluster.local"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->run.job_id, "t");
  EXPECT_EQ(w->run.coordinator_host, "t-launcher-0-0.t");
  EXPECT_EQ(w->run.node_rank_hint, 1);
  EXPECT_EQ(w->run.advertise_addr, "t-node-0-1.t.default.svc.cluster.local");
  k8s["JOB_COMPLETION_INDEX"] = "0";
  absl::StatusOr<MpiConfig> l = Launcher(
      {"--nnodes=2"}, k8s, Machine("t-launcher-0-0", "t-launcher-0-0.t.default.svc.cluster.local"));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->run.job_id, "t");
  EXPECT_EQ(l->run.node_rank_hint, -1);
  EXPECT_EQ(l->run.host_coordinator, HostCoordinator::kYes);
  // The launcher checks its certificate for the name its workers dial.
  EXPECT_EQ(CoordinatorTlsName(l->run, /*hosting=*/true), "t-launcher-0-0.t");
}

// Volcano's MPI example: tasks mpimaster (the launcher, one pod) and
// mpiworker (two), the svc plugin's host files; no flags anywhere.
TEST(MpiConfig, VolcanoPods_LauncherCountsTheWorkerTask_WorkerFindsTheLauncherTask) {
  char tmpl[] = "/tmp/trainlet_volcano_mpi_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  mkdir((root + "/etc").c_str(), 0755);
  mkdir((root + "/etc/volcano").c_str(), 0755);
  std::ofstream(root + "/etc/volcano/mpimaster.host") << "mj-mpimaster-0.mj\n";
  std::ofstream(root + "/etc/volcano/mpiworker.host") << "mj-mpiworker-0.mj\nmj-mpiworker-1.mj\n";
  Env k8s = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "0"}};
  SystemInfo launcher = Machine("mj-mpimaster-0", "mj-mpimaster-0.mj.default.svc.cluster.local");
  launcher.root = root;
  absl::StatusOr<MpiConfig> l = Launcher({}, k8s, launcher);
  SystemInfo worker = Machine("mj-mpiworker-1", "mj-mpiworker-1.mj.default.svc.cluster.local");
  worker.root = root;
  k8s["VK_TASK_INDEX"] = "1";
  absl::StatusOr<MpiConfig> w = Worker({}, k8s, worker);
  // A third task with pods: not a layout to guess.
  std::ofstream(root + "/etc/volcano/ps.host") << "mj-ps-0.mj\n";
  absl::StatusOr<MpiConfig> three = Worker({}, k8s, worker);
  std::system(("rm -rf '" + root + "'").c_str());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->run.nnodes.max, 3);  // two workers and the launcher.
  EXPECT_EQ(l->run.job_id, "mj");
  EXPECT_EQ(l->run.node_rank_hint, -1);
  EXPECT_EQ(l->run.host_coordinator, HostCoordinator::kYes);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->run.coordinator_host, "mj-mpimaster-0.mj");
  EXPECT_EQ(w->run.job_id, "mj");
  EXPECT_EQ(w->run.node_rank_hint, 1);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kFailedPrecondition) << three.status();
  EXPECT_THAT(three.status().message(), HasSubstr("set TRAINLET_COORDINATOR"));
}

TEST(MpiConfig, HelpShowsMpiOptions_HidesTorchOnes) {
  const std::string launcher = MpiHelpText(MpiRole::kLauncher);
  EXPECT_THAT(launcher, HasSubstr("--ready-timeout"));
  EXPECT_THAT(launcher, HasSubstr("--require-placement"));
  EXPECT_THAT(launcher, Not(HasSubstr("--master-port")));
  EXPECT_THAT(launcher, Not(HasSubstr("--node-rank")));
  const std::string worker = MpiHelpText(MpiRole::kWorker);
  EXPECT_THAT(worker, HasSubstr("--ssh-port"));
  EXPECT_THAT(worker, Not(HasSubstr("--max-restarts")));
  EXPECT_THAT(worker, Not(HasSubstr("--ready-timeout")));
}

}  // namespace
}  // namespace trainlet::agent

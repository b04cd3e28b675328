#include "agent/run_config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

SystemInfo Machine(int cpus = 8, int gpus = 0) {
  SystemInfo sys;
  sys.hostname = "workstation";
  sys.cpu_count = cpus;
  sys.gpu_count = gpus;
  return sys;
}

absl::StatusOr<RunConfig> Parse(std::vector<std::string> args, const Env& env = {},
                                const SystemInfo& sys = Machine()) {
  return ParseRunConfig(args, env, sys);
}

// Parses `flags` plus "-- python train.py".
absl::StatusOr<RunConfig> ParseFlags(std::vector<std::string> flags, const Env& env = {},
                                     const SystemInfo& sys = Machine()) {
  flags.push_back("--");
  flags.push_back("python");
  flags.push_back("train.py");
  return ParseRunConfig(flags, env, sys);
}

void ExpectInvalid(const absl::StatusOr<RunConfig>& c, const std::string& substring) {
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(substring));
}

// A Kubeflow Trainer v2 pod of TrainJob "t" (section 2.2 of the reference).
Env TrainerPod(int rank) {
  return {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
          {"JOB_COMPLETION_INDEX", std::to_string(rank)},
          {"PET_NNODES", "2"},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_MASTER_ADDR", "t-node-0-0.t"},
          {"PET_MASTER_PORT", "29500"},
          {"PET_NPROC_PER_NODE", "auto"}};
}

SystemInfo JobSetPod(const std::string& hostname, bool with_fqdn = true) {
  SystemInfo sys = Machine(4, 2);
  sys.hostname = hostname;
  if (with_fqdn) sys.fqdn = hostname + ".train.team-a.svc.cluster.local";
  return sys;
}

TEST(ParseRunConfig, NothingAtAllIsALocalSingleNodeRun) {
  auto c = Parse({"--", "python", "train.py"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->help_requested);
  EXPECT_EQ(c->nnodes.min, 1);
  EXPECT_EQ(c->nnodes.max, 1);
  EXPECT_EQ(c->node_rank_hint, 0);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->coordinator_host, "127.0.0.1");
  EXPECT_EQ(c->coordinator_port, 29400);
  EXPECT_EQ(c->job_id, "trainlet");
  EXPECT_EQ(c->node_id, "workstation");
  EXPECT_EQ(c->nproc_kind, NprocKind::kAuto);
  EXPECT_EQ(c->nproc_per_node, 8);  // No GPU: CPUs.
  EXPECT_EQ(c->master_port, 29500);
  EXPECT_EQ(c->health_port, 29401);
  EXPECT_EQ(c->grace_period, absl::Seconds(30));
  EXPECT_EQ(c->join_timeout, absl::Minutes(10));
  EXPECT_EQ(c->policy.last_call, absl::Milliseconds(500));
  EXPECT_EQ(c->policy.heartbeat_timeout, absl::Seconds(5));
  EXPECT_EQ(c->policy.min_nodes_timeout, absl::Minutes(5));
  EXPECT_EQ(c->policy.max_restarts, 0);
  EXPECT_FALSE(c->prefix_output);
  EXPECT_EQ(c->log_level, LogLevel::kInfo);
  EXPECT_TRUE(c->token.empty());
  EXPECT_TRUE(c->advertise_addr.empty());
  EXPECT_THAT(c->command, ElementsAre("python", "train.py"));
  EXPECT_THAT(absl::StrJoin(c->discovery_notes, "; "), HasSubstr("single-node run"));
}

TEST(ParseRunConfig, EveryFlagInEqualsForm) {
  auto c = ParseFlags({"--nnodes=2:4", "--nproc-per-node=3", "--node-rank=1",
                       "--coordinator=coord.example:1234", "--job-id=exp-7", "--master-port=29600",
                       "--grace-period=10s", "--join-timeout=90", "--node-id=n1",
                       "--advertise-addr=10.0.0.7", "--health-port=0", "--prefix-output",
                       "--log-level=debug", "--max-restarts=5", "--last-call=2s",
                       "--heartbeat-timeout=750ms", "--min-nodes-timeout=1m"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.min, 2);
  EXPECT_EQ(c->nnodes.max, 4);
  EXPECT_EQ(c->nproc_kind, NprocKind::kFixed);
  EXPECT_EQ(c->nproc_per_node, 3);
  EXPECT_EQ(c->node_rank_hint, 1);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->coordinator_host, "coord.example");
  EXPECT_EQ(c->coordinator_port, 1234);
  EXPECT_EQ(c->job_id, "exp-7");
  EXPECT_EQ(c->master_port, 29600);
  EXPECT_EQ(c->grace_period, absl::Seconds(10));
  EXPECT_EQ(c->join_timeout, absl::Seconds(90));
  EXPECT_EQ(c->node_id, "n1");
  EXPECT_EQ(c->advertise_addr, "10.0.0.7");
  EXPECT_EQ(c->health_port, 0);
  EXPECT_TRUE(c->prefix_output);
  EXPECT_EQ(c->log_level, LogLevel::kDebug);
  EXPECT_EQ(c->policy.max_restarts, 5);
  EXPECT_EQ(c->policy.last_call, absl::Seconds(2));
  EXPECT_EQ(c->policy.heartbeat_timeout, absl::Milliseconds(750));
  EXPECT_EQ(c->policy.min_nodes_timeout, absl::Minutes(1));
  EXPECT_TRUE(c->discovery_notes.empty()) << absl::StrJoin(c->discovery_notes, "; ");
}

TEST(ParseRunConfig, EveryFlagInSpaceForm) {
  auto c = ParseFlags({"--nnodes", "2", "--nproc-per-node", "cpu", "--node-rank", "0", "--job-id",
                       "j", "--master-port", "29700", "--grace-period", "1m", "--node-id", "n0",
                       "--log-level", "error", "--prefix-output=false", "--health-port", "29402"},
                      {}, Machine(6, 0));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.max, 2);
  EXPECT_EQ(c->nproc_kind, NprocKind::kCpu);
  EXPECT_EQ(c->nproc_per_node, 6);
  EXPECT_EQ(c->node_rank_hint, 0);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->coordinator_host, "127.0.0.1");  // Rank 0 hosts it.
  EXPECT_EQ(c->master_port, 29700);
  EXPECT_EQ(c->grace_period, absl::Minutes(1));
  EXPECT_EQ(c->node_id, "n0");
  EXPECT_EQ(c->log_level, LogLevel::kError);
  EXPECT_FALSE(c->prefix_output);
  EXPECT_EQ(c->health_port, 29402);
}

TEST(ParseRunConfig, Ipv6Coordinator) {
  auto c = ParseFlags({"--coordinator=[::1]:29410", "--nnodes=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_host, "::1");
  EXPECT_EQ(c->coordinator_port, 29410);
  EXPECT_EQ(c->node_rank_hint, -1);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
}

TEST(ParseRunConfig, CoordinatorWithoutPortUsesDefault) {
  auto c = ParseFlags({"--coordinator=head", "--nnodes=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_port, 29400);
}

TEST(ParseRunConfig, HelpRequested) {
  auto c = Parse({"--nnodes=0", "--help"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->help_requested);
  c = Parse({"-h"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->help_requested);
}

TEST(ParseRunConfig, HelpTextComesFromTheTable) {
  std::string help = RunHelpText();
  EXPECT_THAT(help, HasSubstr("Usage: trainlet run [OPTIONS] -- COMMAND [ARGS...]"));
  for (const OptionSpec& spec : RunOptionTable()) {
    EXPECT_THAT(help, HasSubstr("--" + spec.name)) << spec.name;
    EXPECT_THAT(help, HasSubstr(EnvNameFor(spec.name))) << spec.name;
  }
  EXPECT_THAT(help, HasSubstr("env TRAINLET_NPROC_PER_NODE, default: auto"));
  EXPECT_THAT(help, HasSubstr("env TRAINLET_GRACE_PERIOD, default: 30s"));
}

// ---- Bad input: InvalidArgument naming the flag.

TEST(ParseRunConfig, BadNnodes) {
  ExpectInvalid(ParseFlags({"--nnodes=0"}), "--nnodes: expected N or MIN:MAX");
  ExpectInvalid(ParseFlags({"--nnodes=abc"}), "--nnodes: expected N or MIN:MAX");
  auto c = ParseFlags({"--nnodes=3:2"});
  EXPECT_EQ(c.status().message(),
            "--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= 100000, got \"3:2\"");
}

TEST(ParseRunConfig, BadNproc) {
  ExpectInvalid(ParseFlags({"--nproc-per-node=x"}),
                "--nproc-per-node: expected N in 1..1024, auto, gpu or cpu, got \"x\"");
  ExpectInvalid(ParseFlags({"--nproc-per-node=0"}), "--nproc-per-node");
  ExpectInvalid(ParseFlags({"--nproc-per-node=1025"}), "--nproc-per-node");
}

TEST(ParseRunConfig, NoCommand) {
  ExpectInvalid(Parse({"--nnodes=1"}), "no COMMAND after --");
  ExpectInvalid(Parse({"--nnodes=1", "--"}), "no COMMAND after --");
  ExpectInvalid(Parse({}), "usage: trainlet run");
}

TEST(ParseRunConfig, CommandWithoutSeparatorIsRejected) {
  ExpectInvalid(Parse({"python", "train.py"}), "unexpected argument \"python\"");
}

TEST(ParseRunConfig, UnknownFlag) {
  ExpectInvalid(ParseFlags({"--nproc-per-nod=2"}),
                "unknown flag --nproc-per-nod (did you mean --nproc-per-node?)");
}

TEST(ParseRunConfig, RankHintAtOrAboveNnodes) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=2"});
  // Well-formed values that cannot make a job: kExitConfig (78).
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("--node-rank: node rank 2 must be below nnodes 2 (from --nnodes)"));
  c = ParseFlags({"--nnodes=1:3", "--node-rank=3", "--coordinator=h"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("node rank 3 must be below nnodes 1:3"));
  EXPECT_TRUE(ParseFlags({"--nnodes=1:3", "--node-rank=2", "--coordinator=h"}).ok());
  ExpectInvalid(ParseFlags({"--node-rank=-1"}), "--node-rank: expected an integer");
}

TEST(ParseRunConfig, BadPorts) {
  ExpectInvalid(ParseFlags({"--coordinator=h:0", "--nnodes=2"}), "--coordinator: expected");
  ExpectInvalid(ParseFlags({"--coordinator=h:70000", "--nnodes=2"}), "--coordinator: expected");
  ExpectInvalid(ParseFlags({"--master-port=0"}), "--master-port: expected an integer in 1..65535");
  ExpectInvalid(ParseFlags({"--master-port=70000"}), "--master-port");
  ExpectInvalid(ParseFlags({"--health-port=70000"}), "--health-port: expected an integer in 0..");
  ExpectInvalid(ParseFlags({"--health-port=-1"}), "--health-port");
}

TEST(ParseRunConfig, PortClashes) {
  ExpectInvalid(ParseFlags({"--health-port=29500"}),
                "--health-port: port 29500 is also --master-port");
  ExpectInvalid(ParseFlags({"--health-port=29400"}),
                "--health-port: port 29400 is also the coordinator port");
  ExpectInvalid(ParseFlags({"--master-port=29400"}),
                "--master-port: port 29400 is also the coordinator port");
  // Not hosting the coordinator: its port is on another machine.
  EXPECT_TRUE(ParseFlags({"--master-port=29400", "--coordinator=h", "--nnodes=2"}).ok());
}

TEST(ParseRunConfig, OtherBadValues) {
  ExpectInvalid(ParseFlags({"--job-id=a/b"}), "--job-id: expected 1 to 128 characters");
  ExpectInvalid(ParseFlags({"--log-level=loud"}), "--log-level: expected debug");
  ExpectInvalid(ParseFlags({"--grace-period=soon"}), "--grace-period: expected a duration");
  ExpectInvalid(ParseFlags({"--join-timeout=0"}), "--join-timeout: expected a duration");
  ExpectInvalid(ParseFlags({"--heartbeat-timeout=0s"}), "--heartbeat-timeout");
  ExpectInvalid(ParseFlags({"--max-restarts=-1"}), "--max-restarts");
  ExpectInvalid(ParseFlags({"--node-id=a b"}), "--node-id: expected");
  ExpectInvalid(ParseFlags({"--advertise-addr="}), "--advertise-addr: expected");
  ExpectInvalid(ParseFlags({"--prefix-output=2"}), "--prefix-output: expected true or false");
}

TEST(ParseRunConfig, NoHostnameNeedsNodeId) {
  SystemInfo sys = Machine();
  sys.hostname.clear();
  auto c = ParseFlags({}, {}, sys);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("--node-id"));
  EXPECT_TRUE(ParseFlags({"--node-id=x"}, {}, sys).ok());
}

// ---- Environment and precedence.

TEST(ParseRunConfig, TrainletEnvFallback) {
  auto c = ParseFlags({}, {{"TRAINLET_NNODES", "3"},
                           {"TRAINLET_NODE_RANK", "2"},
                           {"TRAINLET_COORDINATOR", "head:1111"},
                           {"TRAINLET_JOB_ID", "from-env"},
                           {"TRAINLET_GRACE_PERIOD", "7"},
                           {"TRAINLET_PREFIX_OUTPUT", "true"},
                           {"TRAINLET_NPROC_PER_NODE", "2"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.max, 3);
  EXPECT_EQ(c->node_rank_hint, 2);
  EXPECT_EQ(c->coordinator_host, "head");
  EXPECT_EQ(c->coordinator_port, 1111);
  EXPECT_EQ(c->job_id, "from-env");
  EXPECT_EQ(c->grace_period, absl::Seconds(7));
  EXPECT_TRUE(c->prefix_output);
  EXPECT_EQ(c->nproc_per_node, 2);
  EXPECT_TRUE(c->discovery_notes.empty()) << absl::StrJoin(c->discovery_notes, "; ");
}

TEST(ParseRunConfig, BadTrainletEnvNamesTheVariable) {
  ExpectInvalid(ParseFlags({}, {{"TRAINLET_NNODES", "3:2"}}), "TRAINLET_NNODES: expected N");
  ExpectInvalid(ParseFlags({}, {{"TRAINLET_MASTER_PORT", "0"}}), "TRAINLET_MASTER_PORT: expected");
}

TEST(ParseRunConfig, PrecedenceFlagThenTrainletEnvThenKubernetesThenDefault) {
  Env env = {{"PET_NNODES", "4"},
             {"TRAINLET_NNODES", "3"},
             {"PET_NODE_RANK", "1"},
             {"PET_MASTER_ADDR", "pet-host"},
             {"PET_MASTER_PORT", "23456"}};
  auto flag = ParseFlags({"--nnodes=2"}, env);
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->nnodes.max, 2);
  auto trainlet_env = ParseFlags({}, env);
  ASSERT_TRUE(trainlet_env.ok()) << trainlet_env.status();
  EXPECT_EQ(trainlet_env->nnodes.max, 3);
  env.erase("TRAINLET_NNODES");
  auto kubernetes = ParseFlags({}, env);
  ASSERT_TRUE(kubernetes.ok()) << kubernetes.status();
  EXPECT_EQ(kubernetes->nnodes.max, 4);
  EXPECT_EQ(kubernetes->master_port, 23456);
  auto flag_port = ParseFlags({"--master-port=1000"}, env);
  ASSERT_TRUE(flag_port.ok());
  EXPECT_EQ(flag_port->master_port, 1000);
  auto flag_coord = ParseFlags({"--coordinator=flag-host"}, env);
  ASSERT_TRUE(flag_coord.ok());
  EXPECT_EQ(flag_coord->coordinator_host, "flag-host");
  auto env_rank = ParseFlags({}, {{"PET_NNODES", "4"},
                                  {"PET_NODE_RANK", "1"},
                                  {"TRAINLET_NODE_RANK", "3"},
                                  {"PET_MASTER_ADDR", "h"}});
  ASSERT_TRUE(env_rank.ok()) << env_rank.status();
  EXPECT_EQ(env_rank->node_rank_hint, 3);
}

// ---- Kubernetes discovery.

TEST(ParseRunConfig, TrainerPodPetVariables) {
  auto c = ParseFlags({}, TrainerPod(1), JobSetPod("t-node-0-1"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.max, 2);
  EXPECT_EQ(c->node_rank_hint, 1);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->coordinator_host, "t-node-0-0.t");
  EXPECT_EQ(c->coordinator_port, 29400);  // PET_MASTER_PORT is the workers' port.
  EXPECT_EQ(c->master_port, 29500);
  EXPECT_EQ(c->nproc_per_node, 2);  // auto: 2 GPUs.
  EXPECT_EQ(c->job_id, "t-node");
  std::string notes = absl::StrJoin(c->discovery_notes, "; ");
  EXPECT_THAT(notes, HasSubstr("nnodes 2 from PET_NNODES"));
  EXPECT_THAT(notes, HasSubstr("node rank 1 from PET_NODE_RANK"));
  EXPECT_THAT(notes, HasSubstr("coordinator host t-node-0-0.t from PET_MASTER_ADDR"));
  EXPECT_THAT(notes, HasSubstr("nproc-per-node 2 from PET_NPROC_PER_NODE=auto (auto: 2 GPUs)"));
  EXPECT_THAT(notes, HasSubstr("job id t-node from JobSet hostname t-node-0-1"));

  auto rank0 = ParseFlags({}, TrainerPod(0), JobSetPod("t-node-0-0"));
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ(rank0->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(rank0->coordinator_host, "t-node-0-0.t");
}

TEST(ParseRunConfig, PetMasterPortIsNotTheCoordinatorPort) {
  auto c = ParseFlags({}, {{"PET_NNODES", "2"},
                           {"PET_NODE_RANK", "1"},
                           {"PET_MASTER_ADDR", "master-0"},
                           {"PET_MASTER_PORT", "23456"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_host, "master-0");
  EXPECT_EQ(c->coordinator_port, 29400);
  EXPECT_EQ(c->master_port, 23456);
}

TEST(ParseRunConfig, TrainingOperatorElasticPetVariables) {
  auto c = ParseFlags({},
                      {{"PET_NNODES", "2:4"},
                       {"PET_MAX_RESTARTS", "7"},
                       {"PET_MASTER_ADDR", "job-worker-0"},
                       {"PET_NPROC_PER_NODE", "gpu"}},
                      Machine(8, 4));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->nnodes.elastic());
  EXPECT_EQ(c->policy.max_restarts, 7);
  EXPECT_EQ(c->nproc_kind, NprocKind::kGpu);
  EXPECT_EQ(c->nproc_per_node, 4);
  EXPECT_EQ(c->node_rank_hint, -1);
}

TEST(ParseRunConfig, BadKubernetesValuesNameTheVariable) {
  ExpectInvalid(ParseFlags({}, {{"PET_NNODES", "many"}}), "PET_NNODES: expected N or MIN:MAX");
  ExpectInvalid(ParseFlags({}, {{"PET_NODE_RANK", "x"}, {"PET_NNODES", "2"}}),
                "PET_NODE_RANK: expected an integer");
  ExpectInvalid(ParseFlags({}, {{"JOB_COMPLETION_INDEX", "-3"}}), "JOB_COMPLETION_INDEX");
  ExpectInvalid(ParseFlags({}, {{"PET_MASTER_PORT", "0"}}), "PET_MASTER_PORT: expected");
  ExpectInvalid(ParseFlags({}, {{"PET_NPROC_PER_NODE", "lots"}}), "PET_NPROC_PER_NODE: expected");
  ExpectInvalid(ParseFlags({}, {{"PET_MASTER_ADDR", "a b"}, {"PET_NNODES", "2"}}),
                "PET_MASTER_ADDR: expected a host name");
}

TEST(ParseRunConfig, JobCompletionIndexWhenNoPetNodeRank) {
  auto c = ParseFlags({"--nnodes=4", "--coordinator=head"}, {{"JOB_COMPLETION_INDEX", "3"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_rank_hint, 3);
  EXPECT_THAT(absl::StrJoin(c->discovery_notes, "; "),
              HasSubstr("node rank 3 from JOB_COMPLETION_INDEX"));
  auto pet = ParseFlags({"--nnodes=4", "--coordinator=head"},
                        {{"JOB_COMPLETION_INDEX", "3"}, {"PET_NODE_RANK", "2"}});
  ASSERT_TRUE(pet.ok());
  EXPECT_EQ(pet->node_rank_hint, 2);
}

TEST(ParseRunConfig, JobCompletionIndexAboveDefaultNnodesAsksForNnodes) {
  auto c = ParseFlags({}, {{"JOB_COMPLETION_INDEX", "3"}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("JOB_COMPLETION_INDEX: node rank 3 must be below nnodes 1 (the default)"));
}

TEST(ParseRunConfig, JobSetHostnameAndFqdn) {
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"TRAINLET_NNODES", "4"}};
  auto c = ParseFlags({}, env, JobSetPod("train-node-0-2"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_rank_hint, 2);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->coordinator_host, "train-node-0-0.train");
  EXPECT_EQ(c->coordinator_port, 29400);
  EXPECT_EQ(c->job_id, "train-node");
  EXPECT_EQ(c->node_id, "train-node-0-2");
  std::string notes = absl::StrJoin(c->discovery_notes, "; ");
  EXPECT_THAT(notes, HasSubstr("node rank 2 from JobSet hostname train-node-0-2"));
  EXPECT_THAT(notes, HasSubstr("coordinator host train-node-0-0.train from JobSet hostname"));

  auto first = ParseFlags({}, env, JobSetPod("train-node-0-0"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->host_coordinator, HostCoordinator::kYes);
}

TEST(ParseRunConfig, JobSetHostnameWithoutFqdn) {
  auto c = ParseFlags({"--nnodes=2"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}},
                      JobSetPod("train-node-0-1", /*with_fqdn=*/false));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator_host, "train-node-0-0");
  EXPECT_EQ(c->node_rank_hint, 1);
}

TEST(ParseRunConfig, JobSetHostnameOutsideKubernetesIsIgnored) {
  auto c = ParseFlags({}, {}, JobSetPod("build-box-0-3"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_rank_hint, 0);  // The local single-node default, not pod 3.
  EXPECT_EQ(c->coordinator_host, "127.0.0.1");
  EXPECT_EQ(c->job_id, "trainlet");
}

TEST(ParseRunConfig, JobSetSecondChildJobGivesNoRank) {
  auto c = ParseFlags({"--nnodes=4"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}},
                      JobSetPod("train-node-1-0"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_rank_hint, -1);
  EXPECT_EQ(c->coordinator_host, "train-node-0-0.train");
}

// ---- Multi-node without a coordinator.

TEST(ParseRunConfig, MultiNodeWithoutRankOrCoordinatorFails) {
  auto c = ParseFlags({"--nnodes=2"});
  ExpectInvalid(c,
                "cannot find the coordinator: pass --coordinator=HOST:PORT (or "
                "TRAINLET_COORDINATOR, PET_MASTER_ADDR)");
  ExpectInvalid(ParseFlags({"--nnodes=1:2"}), "cannot find the coordinator");
}

TEST(ParseRunConfig, MultiNodeRankZeroHostsOnLoopback) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->coordinator_host, "127.0.0.1");
  EXPECT_EQ(c->coordinator_port, 29400);
}

TEST(ParseRunConfig, ElasticDefaultsToThreeRestarts) {
  auto c = ParseFlags({"--nnodes=2:4", "--node-rank=0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->policy.max_restarts, 3);
  auto fixed = ParseFlags({"--nnodes=4", "--node-rank=0"});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->policy.max_restarts, 0);
  auto explicit_zero = ParseFlags({"--nnodes=2:4", "--node-rank=0", "--max-restarts=0"});
  ASSERT_TRUE(explicit_zero.ok());
  EXPECT_EQ(explicit_zero->policy.max_restarts, 0);
}

TEST(ParseRunConfig, SingleNodeWithRemoteCoordinatorHasNoHint) {
  auto c = ParseFlags({"--coordinator=head"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_rank_hint, -1);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
}

// ---- Workers per node.

TEST(ParseRunConfig, NprocAuto) {
  auto gpus = ParseFlags({"--nproc-per-node=auto"}, {}, Machine(32, 4));
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->nproc_kind, NprocKind::kAuto);
  EXPECT_EQ(gpus->nproc_per_node, 4);
  auto cpus = ParseFlags({"--nproc-per-node=auto"}, {}, Machine(3, 0));
  ASSERT_TRUE(cpus.ok());
  EXPECT_EQ(cpus->nproc_per_node, 3);
  EXPECT_THAT(absl::StrJoin(cpus->discovery_notes, "; "),
              HasSubstr("nproc-per-node 3 (auto: no GPU, 3 CPUs)"));
}

TEST(ParseRunConfig, NprocGpu) {
  auto c = ParseFlags({"--nproc-per-node=gpu"}, {}, Machine(32, 8));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nproc_kind, NprocKind::kGpu);
  EXPECT_EQ(c->nproc_per_node, 8);
  auto none = ParseFlags({"--nproc-per-node=gpu"}, {}, Machine(32, 0));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("--nproc-per-node=gpu: no GPU found (looked for /dev/nvidia[0-9]*)"));
}

TEST(ParseRunConfig, NprocCpuAndFixed) {
  auto cpu = ParseFlags({"--nproc-per-node=CPU"}, {}, Machine(12, 4));
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->nproc_kind, NprocKind::kCpu);
  EXPECT_EQ(cpu->nproc_per_node, 12);
  auto fixed = ParseFlags({"--nproc-per-node=5"}, {}, Machine(12, 4));
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->nproc_kind, NprocKind::kFixed);
  EXPECT_EQ(fixed->nproc_per_node, 5);
  auto huge = ParseFlags({"--nproc-per-node=cpu"}, {}, Machine(4096, 0));
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->nproc_per_node, 1024);
}

// ---- Token.

TEST(ParseRunConfig, TokenFile) {
  char tmpl[] = "/tmp/trainlet_run_token_XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "abc123\n", 7), 7);
  close(fd);
  auto c = ParseFlags({"--token-file", tmpl});
  std::remove(tmpl);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->token_file, tmpl);
  EXPECT_EQ(c->token, "abc123");
}

TEST(ParseRunConfig, UnreadableTokenFile) {
  auto c = ParseFlags({}, {{"TRAINLET_TOKEN_FILE", "/nonexistent/token"}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("TRAINLET_TOKEN_FILE"));
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/token"));
}

}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {

TEST(ParseRunConfig, HostCoordinator_AutoFollowsRankHint_NoJoinsTheStandaloneOne) {
  std::map<std::string, std::string> env;
  SystemInfo sys;
  sys.hostname = "pod-0";
  sys.cpu_count = 2;
  auto host = ParseRunConfig({"--nnodes=2", "--node-rank=0", "--", "true"}, env, sys);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->host_coordinator, HostCoordinator::kYes);
  auto join = ParseRunConfig({"--nnodes=2", "--node-rank=0", "--coordinator=coord:29400",
                              "--host-coordinator=no", "--", "true"},
                             env, sys);
  ASSERT_TRUE(join.ok()) << join.status();
  EXPECT_EQ(join->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(join->node_rank_hint, 0);
  env["TRAINLET_HOST_COORDINATOR"] = "maybe";
  auto bad = ParseRunConfig({"--nnodes=2", "--node-rank=0", "--", "true"}, env, sys);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("TRAINLET_HOST_COORDINATOR"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace trainlet::agent

#include "config/run_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace run_config_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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
  // Loopback on free ports: two such runs on one machine do not clash.
  EXPECT_EQ(c->coordinator_port, 0);
  EXPECT_EQ(c->bind_addr, "127.0.0.1");
  EXPECT_EQ(c->master_port, 0);
  EXPECT_EQ(c->health_port, 0);  // Outside Kubernetes: no health server.
  EXPECT_EQ(c->advertise_addr, "127.0.0.1");
  EXPECT_EQ(c->job_id, "trainlet");
  EXPECT_EQ(c->node_id, "workstation");
  EXPECT_EQ(c->nproc_kind, NprocKind::kDefault);
  EXPECT_EQ(c->nproc_per_node, 1);  // No GPU: one worker, as torchrun.
  EXPECT_TRUE(c->warnings.empty());
  // Below Kubernetes' default terminationGracePeriodSeconds (30 s) with room
  // for the agent to kill what is left and exit (docs/kubernetes.md).
  EXPECT_EQ(c->grace_period, absl::Seconds(25));
  EXPECT_LE(c->grace_period + absl::Seconds(5), absl::Seconds(30));
  EXPECT_EQ(c->join_timeout, absl::Minutes(10));
  EXPECT_EQ(c->policy.last_call, absl::Milliseconds(500));
  EXPECT_EQ(c->policy.heartbeat_timeout, absl::Seconds(5));
  EXPECT_EQ(c->policy.min_nodes_timeout, absl::Minutes(5));
  EXPECT_EQ(c->policy.max_restarts, 0);
  EXPECT_FALSE(c->prefix_output);
  EXPECT_EQ(c->log_level, LogLevel::kInfo);
  EXPECT_TRUE(c->token.empty());
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
  // Loopback and no rank: whichever agent binds the port hosts it.
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kIfPortFree);
  EXPECT_EQ(c->bind_addr, "::1");
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
    if (spec.hidden) {  // torchrun's --rdzv-id and --rdzv-backend: flags, no variable
      EXPECT_THAT(help, Not(HasSubstr(EnvNameFor(spec.name)))) << spec.name;
      continue;
    }
    EXPECT_THAT(help, HasSubstr("--" + spec.name)) << spec.name;
    EXPECT_THAT(help, HasSubstr(EnvNameFor(spec.name))) << spec.name;
  }
  EXPECT_THAT(help, HasSubstr("--coordinator=HOST[:PORT], --rdzv-endpoint=HOST[:PORT]"));
  EXPECT_THAT(help, HasSubstr("--strict-env"));
  EXPECT_THAT(help,
              HasSubstr("env TRAINLET_NPROC_PER_NODE, default: the visible GPUs, or 1 without"));
  EXPECT_THAT(help, HasSubstr("env TRAINLET_GRACE_PERIOD, default: 25s"));
  EXPECT_THAT(help, HasSubstr("--bind-addr=ADDR"));
  EXPECT_THAT(help, HasSubstr("--standalone"));
  EXPECT_THAT(help, HasSubstr("PET_MAX_RESTARTS"));
  EXPECT_THAT(help, HasSubstr("Kubernetes discovery"));
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
  // `torchrun train.py` habits: the hint shows where the command goes.
  ExpectInvalid(Parse({"train.py"}),
                "put the command and its arguments after --, as in "
                "`-- python train.py`");
  ExpectInvalid(Parse({"--nproc_per_node=2", "train.py", "--lr=1"}), "-- python train.py");
}

TEST(ParseRunConfig, UnknownFlag) {
  ExpectInvalid(ParseFlags({"--nproc-per-nod=2"}),
                "unknown flag --nproc-per-nod (did you mean --nproc-per-node?)");
}

TEST(ParseRunConfig, RankHintAtOrAboveNnodes) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=2", "--coordinator=head"});
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
  ExpectInvalid(ParseFlags({"--health-port=29500", "--master-port=29500"}),
                "--health-port: port 29500 is also --master-port");
  ExpectInvalid(ParseFlags({"--health-port=29400", "--nnodes=2", "--node-rank=0"}),
                "--health-port: port 29400 is also the coordinator port");
  ExpectInvalid(ParseFlags({"--master-port=29400", "--nnodes=2", "--node-rank=0"}),
                "--master-port: port 29400 is also the coordinator port");
  // Not hosting the coordinator: its port is on another machine.
  EXPECT_TRUE(ParseFlags({"--master-port=29400", "--coordinator=h", "--nnodes=2"}).ok());
  // Free ports (0) never clash.
  EXPECT_TRUE(ParseFlags({"--health-port=29500"}).ok());
  // --agent-store's port: --master-port - 1 unless given.
  ExpectInvalid(
      ParseFlags({"--agent-store", "--agent-store-port=29500", "--coordinator=h", "--nnodes=2"}),
      "--agent-store-port: port 29500 is also --master-port");
  ExpectInvalid(
      ParseFlags({"--agent-store", "--health-port=29499", "--coordinator=h", "--nnodes=2"}),
      "--agent-store-port: port 29499 is also --health-port");
  ExpectInvalid(ParseFlags({"--agent-store", "--master-port=29401", "--nnodes=2", "--node-rank=0"}),
                "--agent-store-port: port 29400 is also the coordinator port");
  EXPECT_TRUE(ParseFlags({"--agent-store-port=29500"}).ok()) << "not used without --agent-store";
  ExpectInvalid(ParseFlags({"--agent-store", "--agent-store-port=0"}),
                "--agent-store-port: expected an integer in 1..65535");
  absl::StatusOr<RunConfig> c = ParseFlags({"--agent-store", "--agent-store-port=4000"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->agent_store);
  EXPECT_EQ(c->agent_store_port, 4000);
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
  ExpectInvalid(ParseFlags({"--advertise-addr=a b"}), "--advertise-addr: expected");
  ExpectInvalid(ParseFlags({"--advertise-addr=head!"}), "--advertise-addr: expected");
  ExpectInvalid(ParseFlags({"--coordinator=a b:29400", "--nnodes=2"}), "--coordinator: expected");
  ExpectInvalid(ParseFlags({"--host-coordinator=maybe"}), "--host-coordinator: expected");
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
  auto c = ParseFlags({}, {{"JOB_COMPLETION_INDEX", "3"}, {"TRAINLET_COORDINATOR", "head"}});
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

TEST(ParseRunConfig, VolcanoPodNeedsNoFlags) {
  char tmpl[] = "/tmp/trainlet_volcano_cfg_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  ASSERT_EQ(mkdir((root + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root + "/etc/volcano").c_str(), 0755), 0);
  std::ofstream(root + "/etc/volcano/worker.host") << "vj-worker-0.vj\nvj-worker-1.vj\n";
  std::ofstream(root + "/etc/volcano/bad.host") << "no such\n";
  SystemInfo sys = Machine(4, 0);
  sys.root = root;
  sys.hostname = "vj-worker-1";
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "1"}};
  auto c = ParseFlags({}, env, sys);
  std::system(("rm -rf '" + root + "'").c_str());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.max, 2);
  EXPECT_EQ(c->node_rank_hint, 1);
  EXPECT_EQ(c->coordinator_host, "vj-worker-0.vj");
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(c->job_id, "vj-worker");
  std::string notes = absl::StrJoin(c->discovery_notes, "; ");
  EXPECT_THAT(notes, HasSubstr("nnodes 2 from /etc/volcano/worker.host (its line count)"));
  EXPECT_THAT(notes, HasSubstr("node rank 1 from VK_TASK_INDEX"));
  EXPECT_THAT(notes,
              HasSubstr("an unusable Volcano host file, skipped: /etc/volcano/bad.host line 1"));
}

TEST(ParseRunConfig, VolcanoPodWithoutACountIsRefused) {
  SystemInfo sys = Machine(4, 0);
  sys.root = "/nonexistent-trainlet-root";
  sys.hostname = "vj-worker-1";
  auto c = ParseFlags({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", "1"}}, sys);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("VK_TASK_INDEX=1"));
}

// A Volcano job "pj" as the pytorch plugin lays it out: task master (1 pod)
// and worker (2 pods), host files as a ConfigMap's linked keys.
class VolcanoTwoTasks : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainlet_volcano_cfg_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    const std::string dir = root_ + "/etc/volcano";
    ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir + "/..2026_11_23_10_00_00.1").c_str(), 0755), 0);
    ASSERT_EQ(symlink("..2026_11_23_10_00_00.1", (dir + "/..data").c_str()), 0);
    for (const auto& [name, text] :
         std::map<std::string, std::string>{{"master.host", "pj-master-0.pj\n"},
                                            {"worker.host", "pj-worker-0.pj\npj-worker-1.pj\n"}}) {
      std::ofstream(dir + "/..data/" + name) << text;
      ASSERT_EQ(symlink(("..data/" + name).c_str(), (dir + "/" + name).c_str()), 0);
    }
  }
  void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }
  SystemInfo Pod(const std::string& hostname) const {
    SystemInfo sys = Machine(4, 0);
    sys.root = root_;
    sys.hostname = hostname;
    sys.fqdn = hostname + ".pj.default.svc.cluster.local";
    return sys;
  }
  static Env PodEnv(int index) {
    return {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"VK_TASK_INDEX", std::to_string(index)}};
  }
  std::string root_;
};

TEST_F(VolcanoTwoTasks, RunIsRefusedRatherThanSplitIntoTwoJobs) {
  const std::map<std::string, std::string> tasks = {
      {"pj-master-0",
       "master, this pod's (1 host, /etc/volcano/master.host), worker (2 hosts, "
       "/etc/volcano/worker.host)"},
      {"pj-worker-0",
       "worker, this pod's (2 hosts, /etc/volcano/worker.host), master (1 host, "
       "/etc/volcano/master.host)"}};
  for (const auto& [pod, listed] : tasks) {
    auto c = ParseFlags({}, PodEnv(0), Pod(pod));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << pod << c.status();
    EXPECT_THAT(c.status().message(),
                HasSubstr("this pod's Volcano job has several tasks with pods: " + listed));
    EXPECT_THAT(c.status().message(), HasSubstr("set TRAINLET_NNODES"));
    EXPECT_THAT(c.status().message(), HasSubstr("TRAINLET_COORDINATOR"));
  }
  // A count alone is not enough.
  Env env = PodEnv(0);
  env["TRAINLET_NNODES"] = "3";
  auto c = ParseFlags({}, env, Pod("pj-worker-0"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
}

TEST_F(VolcanoTwoTasks, ExplicitCountAndCoordinatorAreUsedWithoutTheTasksIndex) {
  Env env = PodEnv(0);
  env["TRAINLET_NNODES"] = "3";
  env["TRAINLET_COORDINATOR"] = "pj-master-0.pj";
  auto worker = ParseFlags({}, env, Pod("pj-worker-0"));
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->nnodes.max, 3);
  EXPECT_EQ(worker->coordinator_host, "pj-master-0.pj");
  EXPECT_EQ(worker->node_rank_hint, -1);  // index 0 of its task is not node rank 0.
  EXPECT_EQ(worker->host_coordinator, HostCoordinator::kNo);
  EXPECT_EQ(worker->job_id, "pj");  // the same in both tasks.
  auto master = ParseFlags({}, env, Pod("pj-master-0"));
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_EQ(master->job_id, "pj");
  // Its own line of master.host is the coordinator: it hosts it.
  EXPECT_EQ(master->node_rank_hint, 0);
  EXPECT_EQ(master->host_coordinator, HostCoordinator::kYes);
  EXPECT_THAT(absl::StrJoin(master->discovery_notes, "; "),
              HasSubstr("node rank 0: the coordinator host pj-master-0.pj is this pod's line of "
                        "/etc/volcano/master.host"));
  env["TRAINLET_NODE_RANK"] = "2";
  auto ranked = ParseFlags({}, env, Pod("pj-worker-1"));
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  EXPECT_EQ(ranked->node_rank_hint, 2);
}

TEST(ParseRunConfig, NestedPaddleLauncherIsOneWorkerPerNode) {
  SystemInfo gpus = Machine(32, 8);
  auto c = Parse({"--", "python", "-m", "paddle.distributed.launch", "train.py"}, {}, gpus);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nproc_per_node, 1);
  EXPECT_THAT(absl::StrJoin(c->discovery_notes, "; "),
              HasSubstr("nproc-per-node 1 (COMMAND is paddle.distributed.launch"));
  c = Parse({"--nproc-per-node=1", "--", "fleetrun", "train.py"}, {}, gpus);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nproc_per_node, 1);
  ExpectInvalid(
      Parse({"--nproc-per-node=8", "--", "python3", "-um", "paddle.distributed.launch", "train.py"},
            {}, gpus),
      "--nproc-per-node=8 gives 8 workers, but COMMAND is Paddle's launcher");
  ExpectInvalid(Parse({"--", "python", "-m", "paddle.distributed.launch", "t.py"},
                      {{"TRAINLET_NPROC_PER_NODE", "gpu"}}, gpus),
                "TRAINLET_NPROC_PER_NODE=gpu gives 8 workers");
  // Any other command keeps one worker per GPU.
  c = Parse({"--", "python", "train.py"}, {}, gpus);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nproc_per_node, 8);
}

TEST(ParseRunConfig, AnOperatorsWorkerAddrsIsNamedInAWarning) {
  auto c = ParseFlags({}, {{"WORKER_ADDRS", "x-worker-0,x-worker-1"}, {"WORKER_PORT", "9999"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(absl::StrJoin(c->warnings, "\n"),
              HasSubstr("WORKER_ADDRS/WORKER_PORT are set in this pod"));
  c = ParseFlags({});
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(absl::StrJoin(c->warnings, "\n"), ::testing::Not(HasSubstr("WORKER_ADDRS")));
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

TEST(ParseRunConfig, MultiNodeRankZeroHostsOnEveryInterface) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->coordinator_host, "127.0.0.1");  // Where it dials itself.
  EXPECT_EQ(c->coordinator_port, 29400);        // Where its peers dial it.
  EXPECT_EQ(c->bind_addr, "0.0.0.0");
  EXPECT_EQ(c->master_port, 29500);
  EXPECT_EQ(c->health_port, 0);
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

TEST(ParseRunConfig, NprocDefaultIsTheVisibleGpusOrOne) {
  auto none = ParseFlags({}, {}, Machine(32, 0));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->nproc_kind, NprocKind::kDefault);
  EXPECT_EQ(none->nproc_per_node, 1);
  EXPECT_THAT(absl::StrJoin(none->discovery_notes, "; "),
              HasSubstr("nproc-per-node 1 (default: no GPU visible)"));
  SystemInfo gpus = Machine(32, 4);
  gpus.gpu_devices = 8;
  gpus.gpu_note = "4 of 8 /dev/nvidia* devices, CUDA_VISIBLE_DEVICES=\"0,1,2,3\"";
  auto four = ParseFlags({}, {}, gpus);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->nproc_per_node, 4);
  EXPECT_THAT(absl::StrJoin(four->discovery_notes, "; "),
              HasSubstr("nproc-per-node 4 (default: 4 of 8 /dev/nvidia* devices, "
                        "CUDA_VISIBLE_DEVICES=\"0,1,2,3\")"));
  // PET_NPROC_PER_NODE=auto keeps torchrun's auto.
  auto pet = ParseFlags({}, {{"PET_NPROC_PER_NODE", "auto"}}, Machine(3, 0));
  ASSERT_TRUE(pet.ok());
  EXPECT_EQ(pet->nproc_per_node, 3);
}

// A machine whose node probe (which the agent runs: main's AgentSystemInfo)
// answers `probe` (nullptr: too slow), counting the probes.
struct Probed {
  SystemInfo sys;
  std::shared_ptr<v1::NodeProbe> probe;
  int* calls;
  absl::Duration* timeout_seen;
};
Probed ProbedMachine(std::shared_ptr<v1::NodeProbe> probe, int* calls,
                     absl::Duration* timeout_seen = nullptr) {
  Probed m{Machine(32, 0), std::move(probe), calls, timeout_seen};
  m.sys.node_probe_available = true;
  return m;
}

// ParseFlags, then what the agent does where the config plans the probe
// before the workers (agent/node_probe.h's ProbeNodeBeforeWorkers), with
// the machine's answer.
absl::StatusOr<RunConfig> ParseFlags(std::vector<std::string> flags, const Env& env,
                                     const Probed& m) {
  absl::StatusOr<RunConfig> c = ParseFlags(std::move(flags), env, m.sys);
  if (!c.ok() || c->node_probe_timing != NodeProbeTiming::kBeforeWorkers) return c;
  ++*m.calls;
  if (m.timeout_seen != nullptr) *m.timeout_seen = c->probe_timeout;
  const std::string note =
      m.probe == nullptr ? "did not finish within 2s; going on without it" : "";
  if (absl::Status s = ResolveWithNodeProbe(m.probe, note, env, m.sys, &*c); !s.ok()) return s;
  return c;
}

TEST(ParseRunConfig, NprocDefaultIsNvmlsVisibleGpusWhenTheProbeHasThem) {
  auto probe = std::make_shared<v1::NodeProbe>();
  probe->mutable_nvml()->set_status(v1::Source::OK);
  probe->set_visible_gpu_count(8);
  probe->set_visibility_note("8 GPUs (NVML)");
  int calls = 0;
  absl::Duration timeout;
  auto c = ParseFlags({}, {}, ProbedMachine(probe, &calls, &timeout));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(timeout, absl::Seconds(2));
  EXPECT_EQ(c->nproc_per_node, 8);
  EXPECT_EQ(c->node_probe, probe);
  EXPECT_THAT(absl::StrJoin(c->discovery_notes, "; "), HasSubstr("(default: 8 GPUs (NVML))"));
  // MPI slots and --nproc-per-node=gpu use the same count.
  auto gpu = ParseFlags({"--nproc-per-node=gpu"}, {}, ProbedMachine(probe, &calls));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->nproc_per_node, 8);
  // Without NVML the probe's list is the whole node's (sysfs): the
  // container's /dev/nvidia* count stays.
  probe->mutable_nvml()->set_status(v1::Source::ABSENT);
  auto sysfs_only = ParseFlags({}, {}, ProbedMachine(probe, &calls));
  ASSERT_TRUE(sysfs_only.ok());
  EXPECT_EQ(sysfs_only->nproc_per_node, 1);
}

TEST(ParseRunConfig, ProbeTooSlowIsAWarningAndZeroTimeoutTurnsItOff) {
  int calls = 0;
  auto slow = ParseFlags({}, {}, ProbedMachine(nullptr, &calls));
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(slow->node_probe, nullptr);
  EXPECT_THAT(absl::StrJoin(slow->warnings, "; "), HasSubstr("node probe: did not finish"));
  calls = 0;
  absl::Duration timeout;
  auto off = ParseFlags({"--probe-timeout=0"}, {}, ProbedMachine(nullptr, &calls));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(calls, 0);
  auto env = ParseFlags({}, {{"TRAINLET_PROBE_TIMEOUT", "250ms"}},
                        ProbedMachine(nullptr, &calls, &timeout));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(timeout, absl::Milliseconds(250));
}

TEST(ParseRunConfig, ProbeThatCanChangeNoWorkersEnv_IsNotWaitedFor) {
  // A probe that reads no GPU driver (main's AgentSystemInfo says it is
  // deferrable): a single-node run without GPUs and without --bind-numa
  // does not wait.
  auto probe = std::make_shared<v1::NodeProbe>();
  int calls = 0;
  auto machine = [&](int gpu_devices) {
    Probed m = ProbedMachine(probe, &calls);
    m.sys.gpu_devices = gpu_devices;
    m.sys.node_probe_deferrable = true;
    return m;
  };
  auto single = ParseFlags({}, {}, machine(0));
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(single->node_probe, nullptr);
  EXPECT_EQ(single->node_probe_timing, NodeProbeTiming::kOnceWorkersRun);
  EXPECT_TRUE(single->warnings.empty());
  // Anything its answer can change: waited for, as before.
  for (const auto& [flags, gpu_devices] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{"--nnodes=2", "--coordinator=head"}, 0},
           {{"--nnodes=1:2", "--coordinator=head"}, 0},
           {{"--bind-numa"}, 0},
           {{}, 1}}) {
    calls = 0;
    auto c = ParseFlags(flags, {}, machine(gpu_devices));
    ASSERT_TRUE(c.ok()) << absl::StrJoin(flags, " ") << ": " << c.status();
    EXPECT_EQ(calls, 1) << absl::StrJoin(flags, " ");
    EXPECT_EQ(c->node_probe, probe) << absl::StrJoin(flags, " ");
    EXPECT_EQ(c->node_probe_timing, NodeProbeTiming::kBeforeWorkers) << absl::StrJoin(flags, " ");
  }
  // --probe-timeout=0: no probe at all.
  auto off = ParseFlags({"--probe-timeout=0"}, {}, machine(0));
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->node_probe_timing, NodeProbeTiming::kOff);
  // Not deferrable (a probe that loads NVML or reads a fixture tree): it is
  // waited for.
  calls = 0;
  auto nvml = ParseFlags({}, {}, ProbedMachine(probe, &calls));
  ASSERT_TRUE(nvml.ok());
  EXPECT_EQ(calls, 1);
}

TEST(ParseRunConfig, GpuBindingAndBindNuma) {
  auto def = ParseFlags({});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->gpu_binding, GpuBinding::kList);
  EXPECT_FALSE(def->bind_numa);
  auto c = ParseFlags({"--gpu-binding=single", "--bind-numa"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpu_binding, GpuBinding::kSingle);
  EXPECT_TRUE(c->bind_numa);
  ExpectInvalid(ParseFlags({}, {{"TRAINLET_GPU_BINDING", "each"}}), "TRAINLET_GPU_BINDING");
}

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

// ---- A local coordinator address is hosted.

// A machine with a LAN address and a fake resolver that counts its calls.
struct Resolver {
  std::map<std::string, std::vector<std::string>> names;
  std::map<std::string, std::string> canonical;
  int calls = 0;
};

SystemInfo LanMachine(Resolver* resolver) {
  SystemInfo sys = Machine();
  sys.fqdn = "workstation.lab.example";
  sys.local_addrs = [] {
    return std::vector<std::string>{"127.0.0.1", "192.168.1.20", "::1", "fe80::1"};
  };
  sys.resolve = [resolver](const std::string& host) -> std::optional<ResolvedHost> {
    ++resolver->calls;
    auto it = resolver->names.find(host);
    if (it == resolver->names.end()) return std::nullopt;
    ResolvedHost r;
    r.addrs = it->second;
    auto c = resolver->canonical.find(host);
    if (c != resolver->canonical.end()) r.canonical_name = c->second;
    return r;
  };
  return sys;
}

TEST(ParseRunConfig, LocalCoordinator_SingleNode_IsHosted) {
  Resolver r;
  r.names["alias"] = {"192.168.1.20"};
  SystemInfo sys = LanMachine(&r);
  for (const char* coordinator :
       {"localhost:29411", "127.0.0.1:29411", "[::1]:29411", "127.0.1.1:29411",
        "192.168.1.20:29411", "workstation:29411", "WORKSTATION.:29411",
        "workstation.lab.example:29411", "alias:29411", "0.0.0.0:29411"}) {
    auto c = ParseFlags({"--nnodes=1", std::string("--coordinator=") + coordinator}, {}, sys);
    ASSERT_TRUE(c.ok()) << coordinator << ": " << c.status();
    EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes) << coordinator;
    EXPECT_EQ(c->coordinator_port, 29411) << coordinator;
    EXPECT_EQ(c->node_rank_hint, -1) << coordinator;
  }
  // Only "alias" needed the resolver.
  EXPECT_EQ(r.calls, 1);
}

TEST(ParseRunConfig, InterfaceAddresses_ListedOnlyToPlaceTheCoordinator) {
  // Listing them is a netlink dump on the start-up path (issue 10): a run
  // without a coordinator address, or with a name of this host, never asks.
  Resolver r;
  SystemInfo sys = LanMachine(&r);
  int listed = 0;
  sys.local_addrs = [&listed] {
    ++listed;
    return std::vector<std::string>{"127.0.0.1", "192.168.1.20"};
  };
  ASSERT_TRUE(ParseFlags({"--nnodes=1"}, {}, sys).ok());
  ASSERT_TRUE(ParseFlags({"--nnodes=2", "--coordinator=workstation:29411"}, {}, sys).ok());
  EXPECT_EQ(listed, 0);
  auto c = ParseFlags({"--nnodes=1", "--coordinator=192.168.1.20:29411"}, {}, sys);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(listed, 1);
}

TEST(ParseRunConfig, RemoteCoordinator_IsJoined) {
  Resolver r;
  r.names["head"] = {"10.0.0.1"};
  SystemInfo sys = LanMachine(&r);
  for (const char* coordinator : {"head:29400", "10.0.0.1:29400", "unresolvable:29400"}) {
    auto c = ParseFlags({"--nnodes=1", std::string("--coordinator=") + coordinator}, {}, sys);
    ASSERT_TRUE(c.ok()) << coordinator << ": " << c.status();
    EXPECT_EQ(c->host_coordinator, HostCoordinator::kNo) << coordinator;
    EXPECT_TRUE(c->advertise_addr.empty()) << coordinator;
  }
}

TEST(ParseRunConfig, LocalCoordinator_SeveralNodesWithoutRank_WhoeverBindsHostsIt) {
  Resolver r;
  SystemInfo sys = LanMachine(&r);
  auto loopback = ParseFlags({"--nnodes=3", "--coordinator=127.0.0.1:29411"}, {}, sys);
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_EQ(loopback->host_coordinator, HostCoordinator::kIfPortFree);
  EXPECT_EQ(loopback->bind_addr, "127.0.0.1");
  EXPECT_EQ(loopback->advertise_addr, "127.0.0.1");
  auto elastic = ParseFlags({"--nnodes=1:4", "--coordinator=workstation"}, {}, sys);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->host_coordinator, HostCoordinator::kIfPortFree);
  EXPECT_EQ(elastic->bind_addr, "0.0.0.0");
  // Whoever hosts it advertises what peers dial.
  EXPECT_EQ(elastic->advertise_addr, "workstation");
  EXPECT_EQ(r.calls, 0);
}

TEST(ParseRunConfig, RankHintDecidesWithoutResolving) {
  Resolver r;
  r.names["alias"] = {"192.168.1.20"};
  SystemInfo sys = LanMachine(&r);
  auto rank1 = ParseFlags({"--nnodes=2", "--node-rank=1", "--coordinator=alias"}, {}, sys);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  EXPECT_EQ(rank1->host_coordinator, HostCoordinator::kNo);
  auto rank0 = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=alias"}, {}, sys);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ(rank0->host_coordinator, HostCoordinator::kYes);
  auto nothing = ParseFlags({}, {}, sys);
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(r.calls, 0);
}

TEST(ParseRunConfig, HostCoordinatorFlagWinsOverTheAddress) {
  Resolver r;
  SystemInfo sys = LanMachine(&r);
  auto no =
      ParseFlags({"--nnodes=1", "--coordinator=localhost:29411", "--host-coordinator=no"}, {}, sys);
  ASSERT_TRUE(no.ok()) << no.status();
  EXPECT_EQ(no->host_coordinator, HostCoordinator::kNo);
  auto yes =
      ParseFlags({"--nnodes=2", "--coordinator=10.0.0.1", "--host-coordinator=yes"}, {}, sys);
  ASSERT_TRUE(yes.ok()) << yes.status();
  EXPECT_EQ(yes->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(yes->advertise_addr, "10.0.0.1");
  EXPECT_EQ(r.calls, 0);
  // Joining needs somewhere to join.
  ExpectInvalid(ParseFlags({"--host-coordinator=no"}), "cannot find the coordinator");
}

// ---- Single-node defaults, bind address, health port.

TEST(ParseRunConfig, SingleNodeKeepsPortsItIsGiven) {
  auto c = ParseFlags({"--master-port=29600", "--health-port=29601"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->master_port, 29600);
  EXPECT_EQ(c->health_port, 29601);
  EXPECT_EQ(c->health_bind_addr, "127.0.0.1");
  EXPECT_EQ(c->coordinator_port, 0);
  auto env = ParseFlags({}, {{"TRAINLET_HEALTH_PORT", "29401"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->health_port, 29401);
  auto pet = ParseFlags({}, {{"PET_MASTER_PORT", "23456"}});
  ASSERT_TRUE(pet.ok());
  EXPECT_EQ(pet->master_port, 23456);
}

TEST(ParseRunConfig, InKubernetesTheHealthServerIsOnForKubeletProbes) {
  auto c = ParseFlags({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->health_port, 29401);
  EXPECT_EQ(c->health_bind_addr, "0.0.0.0");
  EXPECT_EQ(c->bind_addr, "127.0.0.1");  // The coordinator stays private.
  EXPECT_EQ(c->coordinator_port, 0);
  auto off = ParseFlags({"--health-port=0"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->health_port, 0);
}

TEST(ParseRunConfig, BindAddress) {
  auto loop = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=127.0.0.1:29411"});
  ASSERT_TRUE(loop.ok()) << loop.status();
  EXPECT_EQ(loop->bind_addr, "127.0.0.1");
  EXPECT_EQ(loop->health_bind_addr, "127.0.0.1");
  auto loop6 = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=[::1]:29411"});
  ASSERT_TRUE(loop6.ok());
  EXPECT_EQ(loop6->bind_addr, "::1");
  auto named = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=head"});
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->bind_addr, "0.0.0.0");
  auto flag = ParseFlags({"--nnodes=2", "--node-rank=0", "--bind-addr=10.0.0.5"},
                         {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"PET_NNODES", "2"}});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->bind_addr, "10.0.0.5");
  EXPECT_EQ(flag->health_bind_addr, "10.0.0.5");  // --bind-addr is for both servers.
  auto env = ParseFlags({}, {{"TRAINLET_BIND_ADDR", "[::]"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->bind_addr, "::");
  ExpectInvalid(ParseFlags({"--bind-addr=head"}), "--bind-addr: expected an IP address");
}

TEST(ParseRunConfig, MultiNodeWithoutTokenWarnsOnce) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->warnings.size(), 1u) << absl::StrJoin(c->warnings, "\n");
  EXPECT_THAT(c->warnings[0], HasSubstr("no token"));
  EXPECT_THAT(c->warnings[0], HasSubstr("anyone who can reach"));
  EXPECT_THAT(c->warnings[0], HasSubstr("--token-file"));
  EXPECT_THAT(c->warnings[0], HasSubstr("TRAINLET_TOKEN_FILE"));
  EXPECT_THAT(c->warnings[0], HasSubstr("/var/run/secrets/trainlet/token"));
  auto joiner = ParseFlags({"--nnodes=2", "--coordinator=head"});
  ASSERT_TRUE(joiner.ok());
  EXPECT_EQ(joiner->warnings.size(), 1u);
  auto single = ParseFlags({});
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->warnings.empty());
}

// ---- Node rank without a coordinator, pods without a node count.

TEST(ParseRunConfig, NodeRankAboveZeroWithoutCoordinatorIsAnError) {
  ExpectInvalid(ParseFlags({"--node-rank=1"}), "cannot find the coordinator");
  ExpectInvalid(ParseFlags({"--nnodes=2", "--node-rank=1"}), "cannot find the coordinator");
  auto env = ParseFlags({}, {{"TRAINLET_NNODES", "4"}, {"TRAINLET_NODE_RANK", "3"}});
  ExpectInvalid(env, "node rank 3 (from TRAINLET_NODE_RANK)");
  EXPECT_EQ(ExitCodeForConfigError(env.status()), kExitUsage);
}

TEST(ParseRunConfig, JobSetPodWithoutNodeCountFails) {
  Env pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"JOB_COMPLETION_INDEX", "0"}};
  auto c = ParseFlags({}, pod, JobSetPod("train-node-0-0"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_EQ(ExitCodeForConfigError(c.status()), kExitConfig);
  EXPECT_THAT(c.status().message(), HasSubstr("TRAINLET_NNODES"));
  EXPECT_THAT(c.status().message(), HasSubstr("--nnodes"));
  EXPECT_THAT(c.status().message(), HasSubstr("PET_NNODES"));
  EXPECT_THAT(c.status().message(), HasSubstr("JOB_COMPLETION_INDEX=0"));
  // Any one sign is enough: the hostname, or a PET_* variable.
  EXPECT_FALSE(
      ParseFlags({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, JobSetPod("t-node-0-1")).ok());
  EXPECT_FALSE(ParseFlags({},
                          {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                           {"PET_MASTER_ADDR", "m"},
                           {"PET_NODE_RANK", "0"}},
                          JobSetPod("web"))
                   .ok());
  // A node count from any source makes it a job.
  pod["TRAINLET_NNODES"] = "1";
  EXPECT_TRUE(ParseFlags({}, pod, JobSetPod("train-node-0-0")).ok());
  EXPECT_TRUE(ParseFlags({"--nnodes=1"}, pod, JobSetPod("train-node-0-0")).ok());
  // A plain pod (a Deployment, a bare Pod) is a single-node run.
  EXPECT_TRUE(
      ParseFlags({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, JobSetPod("web-7d9f8-x2b4k"))
          .ok());
}

// ---- torchrun spellings.

TEST(ParseRunConfig, TorchrunUnderscoreSpellingsWork) {
  auto c = ParseFlags({"--nproc_per_node=2", "--nnodes=2", "--node_rank=0", "--max_restarts=3",
                       "--master_port=29600"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nproc_per_node, 2);
  EXPECT_EQ(c->node_rank_hint, 0);
  EXPECT_EQ(c->policy.max_restarts, 3);
  EXPECT_EQ(c->master_port, 29600);
}

TEST(ParseRunConfig, StandaloneIsASingleNodeRun) {
  auto c = ParseFlags({"--standalone", "--nproc_per_node=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nnodes.max, 1);
  EXPECT_EQ(c->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(c->coordinator_port, 0);
  EXPECT_EQ(c->bind_addr, "127.0.0.1");
  EXPECT_EQ(c->nproc_per_node, 2);
  // Like torchrun's, it overrides what the pod says about other nodes.
  auto pod = ParseFlags({"--standalone"},
                        {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                         {"PET_NNODES", "4"},
                         {"PET_NODE_RANK", "2"},
                         {"PET_MASTER_ADDR", "t-node-0-0.t"}},
                        JobSetPod("t-node-0-2"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->nnodes.max, 1);
  EXPECT_EQ(pod->node_rank_hint, 0);
  EXPECT_EQ(pod->host_coordinator, HostCoordinator::kYes);
  EXPECT_EQ(pod->coordinator_host, "127.0.0.1");
  EXPECT_TRUE(ParseFlags({"--standalone", "--nnodes=1"}).ok());
  EXPECT_TRUE(ParseFlags({}, {{"TRAINLET_STANDALONE", "true"}}).ok());
}

TEST(ParseRunConfig, StandaloneConflicts) {
  ExpectInvalid(ParseFlags({"--standalone", "--nnodes=2"}), "--standalone");
  ExpectInvalid(ParseFlags({"--standalone", "--nnodes=1:2"}), "--nnodes");
  ExpectInvalid(ParseFlags({"--standalone", "--coordinator=h:1"}), "--coordinator");
  ExpectInvalid(ParseFlags({"--standalone"}, {{"TRAINLET_COORDINATOR", "h"}}),
                "TRAINLET_COORDINATOR");
  ExpectInvalid(ParseFlags({"--standalone", "--node-rank=1"}), "--node-rank");
  ExpectInvalid(ParseFlags({"--standalone", "--host-coordinator=no"}), "--host-coordinator");
}

TEST(ParseRunConfig, TorchrunFlagsGetTrainletsEquivalent) {
  struct Case {
    std::vector<std::string> args;
    std::string hint;
  };
  const Case cases[] = {
      {{"--master-addr=head"}, "--advertise-addr"},
      {{"--master_addr=head"}, "--coordinator"},
      {{"--rdzv-conf=timeout=900"}, "--join-timeout"},
      {{"--local-addr=10.0.0.1"}, "--advertise-addr"},
      // torchrun's log files: what makes a file per rank instead.
      {{"--redirects=3"}, "> DIR/rank$RANK.log 2>&1"},
      {{"-r", "3"}, "> DIR/rank$RANK.log 2>&1"},
      {{"--tee", "3"}, "tee DIR/rank$RANK.log"},
      {{"-t", "3"}, "--prefix-output"},
      {{"--log-dir=/tmp/x"}, "trainlet writes no log files"},
      {{"--log_dir=/tmp/x"}, "the pod's log"},
      {{"--local-ranks-filter=0"}, "--prefix-output"},
      {{"--monitor-interval=1"}, "not needed"},
      {{"--start-method=spawn"}, "not needed"},
      {{"--role=trainer"}, "ROLE_NAME"},
      {{"--run-path"}, "-- python"},
      {{"-m", "pkg.train"}, "-- python -m MODULE"},
      {{"--module"}, "-- python -m MODULE"},
      {{"--no-python"}, "COMMAND as given"},
      {{"--use-env"}, "LOCAL_RANK"},
  };
  for (const Case& c : cases) {
    auto r = ParseFlags(c.args);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(r.status().message(), HasSubstr("is a torchrun flag")) << c.args[0];
    EXPECT_THAT(r.status().message(), HasSubstr(c.hint)) << c.args[0];
  }
}

TEST(ParseRunConfig, RdzvEndpointIsTheCoordinator) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--rdzv-endpoint=head:1234"},
        std::vector<std::string>{"--rdzv_endpoint", "head:1234"}}) {
    auto c = ParseFlags(flags, {{"TRAINLET_NNODES", "2"}});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->coordinator_host, "head");
    EXPECT_EQ(c->coordinator_port, 1234);
  }
  // Its errors name it as typed.
  ExpectInvalid(ParseFlags({"--rdzv-endpoint=::1:29400"}), "--rdzv-endpoint");
  ExpectInvalid(ParseFlags({"--rdzv-endpoint"}), "--rdzv-endpoint: expected a value");
}

TEST(ParseRunConfig, RdzvBackendC10dOrStaticIsAcceptedWithOneNote) {
  for (const std::string backend : {"c10d", "static", "C10D"}) {
    auto c = ParseFlags({"--rdzv_backend=" + backend});
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->notes.size(), 1u);
    EXPECT_THAT(c->notes[0], HasSubstr("--rdzv-backend="));
    EXPECT_THAT(c->notes[0], HasSubstr("trainlet's own rendezvous"));
  }
  auto etcd = ParseFlags({"--rdzv-backend=etcd-v2"});
  ExpectInvalid(etcd, "--rdzv-backend: expected c10d or static");
  EXPECT_THAT(etcd.status().message(), HasSubstr("etcd"));
  auto none = ParseFlags({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->notes.empty());
}

TEST(ParseRunConfig, RdzvIdIsTheJobIdUnlessJobIdIsGiven) {
  auto c = ParseFlags({"--rdzv_id=llama-7"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job_id, "llama-7");
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_THAT(c->notes[0], HasSubstr("--rdzv-id=llama-7"));
  // A flag beats the variable, as every flag does.
  auto over_env = ParseFlags({"--rdzv-id=llama-7"}, {{"TRAINLET_JOB_ID", "other"}});
  ASSERT_TRUE(over_env.ok());
  EXPECT_EQ(over_env->job_id, "llama-7");
  // --job-id wins, and says so.
  auto both = ParseFlags({"--rdzv-id=llama-7", "--job-id=mine"});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->job_id, "mine");
  ASSERT_EQ(both->notes.size(), 1u);
  EXPECT_THAT(both->notes[0], HasSubstr("ignored"));
  // Validated like a job id, naming the flag.
  ExpectInvalid(ParseFlags({"--rdzv-id=a b"}), "--rdzv-id");
}

// ---- Tokens.

using FakeRoot = trainlet::testing::TempRoot;

TEST(ParseRunConfig, NcclConfigFilesAreReadOnceWithTheProbe) {
  FakeRoot root;
  root.Write("etc/nccl.conf", "NCCL_IB_HCA=mlx5_4\n");
  auto probe = std::make_shared<v1::NodeProbe>();
  int calls = 0;
  Probed sys = ProbedMachine(probe, &calls);
  sys.sys.root = root.path();
  auto c = ParseFlags({}, {}, sys);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nccl_conf_vars.at("NCCL_IB_HCA"), "mlx5_4");
  auto off = ParseFlags({"--probe-timeout=0"}, {}, sys);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->nccl_conf_vars.empty()) << "no probe, no advice to hold back";
}

TEST(ParseRunConfig, KubernetesSecretToken) {
  FakeRoot root;
  root.Write("var/run/secrets/trainlet/token", "s3cret\n");
  SystemInfo sys = JobSetPod("t-node-0-1");
  sys.root = root.path();
  Env pod = TrainerPod(1);
  auto c = ParseFlags({}, pod, sys);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_EQ(c->token_file, "/var/run/secrets/trainlet/token");
  EXPECT_TRUE(c->warnings.empty()) << absl::StrJoin(c->warnings, "\n");
  EXPECT_THAT(absl::StrJoin(c->discovery_notes, "; "),
              HasSubstr("token from /var/run/secrets/trainlet/token"));
  // A token file from a flag or TRAINLET_TOKEN_FILE wins.
  std::string other = root.Write("other-token", "flag-secret");
  auto flag = ParseFlags({"--token-file=" + other}, pod, sys);
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->token, "flag-secret");
  // Outside Kubernetes the path is not read.
  auto outside = ParseFlags({}, {}, sys);
  ASSERT_TRUE(outside.ok()) << outside.status();
  EXPECT_TRUE(outside->token.empty());
  // No Secret: no token (and the multi-node warning).
  sys.root = root.path() + "/nothing-here";
  auto none = ParseFlags({}, pod, sys);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->token.empty());
  EXPECT_EQ(none->warnings.size(), 1u);
}

TEST(ParseRunConfig, WhitespaceOnlyTokenIsAConfigError) {
  FakeRoot root;
  std::string path = root.Write("token", " \n\t\n");
  auto c = ParseFlags({"--token-file=" + path});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("is empty or only whitespace"));
  root.Write("var/run/secrets/trainlet/token", "\n");
  SystemInfo sys = JobSetPod("t-node-0-1");
  sys.root = root.path();
  auto secret = ParseFlags({}, TrainerPod(1), sys);
  EXPECT_EQ(secret.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(secret.status().message(), HasSubstr("/var/run/secrets/trainlet/token"));
}

// ---- D11: PET_MASTER_ADDR is a host, not an endpoint.

TEST(ParseRunConfig, PetMasterAddrWithAPortIsRefusedAtOnce) {
  auto c = ParseFlags(
      {}, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "host:1234"}});
  ExpectInvalid(c,
                "PET_MASTER_ADDR: expected a host name or IP address without a port, got "
                "\"host:1234\"");
  EXPECT_THAT(c.status().message(), HasSubstr("PET_MASTER_PORT"));
  ExpectInvalid(ParseFlags({}, {{"PET_NNODES", "2"}, {"PET_MASTER_ADDR", "[fd00::1]:1234"}}),
                "PET_MASTER_ADDR");
  // A bare IPv6 address is a host.
  auto v6 =
      ParseFlags({}, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "fd00::1"}});
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->coordinator_host, "fd00::1");
}

// ---- The address the hosting node advertises (issue 6, scope 3).

TEST(ParseRunConfig, Advertise_ConfiguredCoordinatorHostIsWhatPeersDial) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=head.example:29400"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise_addr, "head.example");
  auto rank0 = ParseFlags({}, TrainerPod(0), JobSetPod("t-node-0-0"));
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_EQ(rank0->advertise_addr, "t-node-0-0.t");
  auto jobset = ParseFlags({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"PET_NNODES", "2"}},
                           JobSetPod("train-node-0-0"));
  ASSERT_TRUE(jobset.ok()) << jobset.status();
  EXPECT_EQ(jobset->advertise_addr, "train-node-0-0.train");
}

TEST(ParseRunConfig, Advertise_WholeJobOnThisHostIsLoopback) {
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=localhost:29411"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise_addr, "127.0.0.1");
  auto v6 = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=[::1]:29411"});
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->advertise_addr, "::1");
  auto single = ParseFlags({"--nnodes=1", "--node-rank=0"});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->advertise_addr, "127.0.0.1");
}

TEST(ParseRunConfig, Advertise_NoCoordinatorAddressIsThisHostsName) {
  Resolver r;
  r.canonical["workstation"] = "workstation.dns.example";
  r.names["workstation"] = {"192.168.1.20"};
  SystemInfo sys = LanMachine(&r);
  auto fqdn = ParseFlags({"--nnodes=2", "--node-rank=0"}, {}, sys);
  ASSERT_TRUE(fqdn.ok()) << fqdn.status();
  EXPECT_EQ(fqdn->advertise_addr, "workstation.lab.example");  // From /etc/hosts.
  EXPECT_EQ(r.calls, 0);
  sys.fqdn.clear();
  auto canonical = ParseFlags({"--nnodes=2", "--node-rank=0"}, {}, sys);
  ASSERT_TRUE(canonical.ok()) << canonical.status();
  EXPECT_EQ(canonical->advertise_addr, "workstation.dns.example");
  EXPECT_EQ(r.calls, 1);
  sys.resolve = nullptr;
  auto hostname = ParseFlags({"--nnodes=2", "--node-rank=0"}, {}, sys);
  ASSERT_TRUE(hostname.ok()) << hostname.status();
  EXPECT_EQ(hostname->advertise_addr, "workstation");
  sys.hostname = "not a host";
  auto none = ParseFlags({"--nnodes=2", "--node-rank=0", "--node-id=n0"}, {}, sys);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("--advertise-addr"));
}

TEST(ParseRunConfig, Advertise_InKubernetesNeverLoopbackForSeveralNodes) {
  SystemInfo pod = JobSetPod("web-0");
  auto c = ParseFlags({"--nnodes=2", "--node-rank=0", "--coordinator=127.0.0.1:29411"},
                      {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, pod);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise_addr, "web-0.train.team-a.svc.cluster.local");
  auto single = ParseFlags({"--nnodes=1"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, pod);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->advertise_addr, "127.0.0.1");
}

TEST(ParseRunConfig, Advertise_OnlyTheHostingNodeUnlessGiven) {
  auto joiner = ParseFlags({}, TrainerPod(1), JobSetPod("t-node-0-1"));
  ASSERT_TRUE(joiner.ok()) << joiner.status();
  EXPECT_EQ(joiner->host_coordinator, HostCoordinator::kNo);
  EXPECT_TRUE(joiner->advertise_addr.empty());
  auto given = ParseFlags({"--advertise-addr=10.0.0.9"}, TrainerPod(1), JobSetPod("t-node-0-1"));
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->advertise_addr, "10.0.0.9");
  auto given0 = ParseFlags({"--advertise-addr=[fd00::9]", "--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(given0.ok());
  EXPECT_EQ(given0->advertise_addr, "fd00::9");
}

}  // namespace run_config_test
}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace run_config_test {

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

}  // namespace run_config_test
}  // namespace
}  // namespace trainlet::agent

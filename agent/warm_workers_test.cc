#include "agent/warm_workers.h"

#include <string>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/fake_worker_group.h"

namespace trainlet::agent {
namespace {
namespace warm_workers_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using V = std::vector<std::string>;

const absl::Time kNow = absl::UnixEpoch() + absl::Hours(1);

// AfterStart, then Tick() when the standbys are due.
void StartStandbys(WarmWorkers* warm, const std::vector<launcher::ProcessSpec>& specs,
                   launcher::testing::FakeWorkerGroup* group) {
  warm->AfterStart(specs, group, kNow);
  warm->Tick(kNow + WarmWorkers::kStartDelay, group);
}

RunConfig Config(V command, bool warm = true) {
  RunConfig config;
  config.command = std::move(command);
  config.warm_workers = warm;
  return config;
}

launcher::ProcessSpec Worker(int local_rank, const V& argv, V env) {
  launcher::ProcessSpec spec;
  spec.local_rank = local_rank;
  spec.global_rank = 4 + local_rank;
  spec.argv = argv;
  spec.env = std::move(env);
  return spec;
}

// Two local workers of round `round`: the round's variables change, the
// rest does not.
std::vector<launcher::ProcessSpec> Round(const V& argv, int round, V extra = {}) {
  std::vector<launcher::ProcessSpec> specs;
  for (int l = 0; l < 2; ++l) {
    V env = {"PATH=/usr/bin", "HOME=/root", "RANK=" + std::to_string(4 + l + round),
             "MASTER_PORT=" + std::to_string(29500 + round),
             "TORCHELASTIC_RESTART_COUNT=" + std::to_string(round)};
    env.insert(env.end(), extra.begin(), extra.end());
    specs.push_back(Worker(l, argv, env));
  }
  return specs;
}

TEST(WhyNotWarmable, ScriptsAndModulesOnly) {
  EXPECT_EQ(WhyNotWarmable(V{"python3", "-u", "train.py", "--x"}), "");
  EXPECT_EQ(WhyNotWarmable(V{"/usr/bin/python3.11", "-m", "pkg.train"}), "");
  EXPECT_EQ(WhyNotWarmable(V{"env", "-u", "X", "A=1", "python", "t.py"}), "");
  EXPECT_THAT(WhyNotWarmable(V{"sh", "-c", "python t.py"}), HasSubstr("not a Python interpreter"));
  EXPECT_THAT(WhyNotWarmable(V{"torchrun", "t.py"}), HasSubstr("not a Python interpreter"));
  EXPECT_THAT(WhyNotWarmable(V{"python", "-c", "print(1)"}), HasSubstr("-c CODE"));
  EXPECT_THAT(WhyNotWarmable(V{"python", "-"}), HasSubstr("stdin"));
  EXPECT_THAT(WhyNotWarmable(V{"python"}), HasSubstr("no script"));
  EXPECT_THAT(WhyNotWarmable(V{"python", "-i", "t.py"}), HasSubstr("-i"));
  EXPECT_THAT(WhyNotWarmable(V{"python", "-ux", "t.py"}), HasSubstr("-ux"));
  EXPECT_EQ(WhyNotWarmable(V{"python", "-X", "importtime", "t.py"}), "");  // -X's value
  EXPECT_THAT(WhyNotWarmable(V{"env", "--block-signal=INT", "python", "t.py"}),
              HasSubstr("--block-signal"));
}

TEST(StandbySpecFor, RunsTheLoaderWithTheTargetAndWithoutTheRoundsVariables) {
  const V argv = {"env", "A=1", "python3", "-u", "-X", "dev", "-m", "pkg.train", "--lr", "1"};
  launcher::ProcessSpec worker = Round(argv, 0)[1];
  worker.cpus = {2, 3};
  worker.numa_node = 1;
  auto command = ParsePythonCommand(argv);
  launcher::ProcessSpec standby = StandbySpecFor(worker, *command, "torch,json");
  ASSERT_EQ(standby.argv.size(), 13u);
  EXPECT_THAT(V(standby.argv.begin(), standby.argv.begin() + 7),
              ElementsAre("env", "A=1", "python3", "-u", "-X", "dev", "-c"));
  EXPECT_THAT(standby.argv[7], HasSubstr(std::to_string(StandbyBoot().size())));
  EXPECT_THAT(V(standby.argv.begin() + 8, standby.argv.end()),
              ElementsAre("--module", "pkg.train", "torch,json", "--lr", "1"));
  EXPECT_THAT(standby.env, ElementsAre("PATH=/usr/bin", "HOME=/root"));
  EXPECT_EQ(standby.cpus, worker.cpus);
  EXPECT_EQ(standby.numa_node, 1);
  EXPECT_FALSE(standby.from_standby);
  EXPECT_THAT(StandbyBoot(), HasSubstr("def _trainlet_standby"));
}

TEST(EnvAsInterpreterSees, AppliesTheEnvPrefix) {
  const V env = {"A=0", "B=1", "C=2"};
  EXPECT_EQ(EnvAsInterpreterSees(env, *ParsePythonCommand(V{"python", "t.py"})), env);
  EXPECT_THAT(EnvAsInterpreterSees(
                  env, *ParsePythonCommand(V{"env", "-u", "B", "A=9", "D=3", "python", "t.py"})),
              ElementsAre("C=2", "A=9", "D=3"));
  EXPECT_THAT(EnvAsInterpreterSees(env, *ParsePythonCommand(V{"env", "-i", "D=3", "python", "t"})),
              ElementsAre("D=3"));
}

TEST(WarmWorkers, OffUnlessAskedOrWhenTheCommandCannotBeWarmed) {
  EXPECT_FALSE(WarmWorkers(Config({"python3", "t.py"}, /*warm=*/false)).enabled());
  EXPECT_FALSE(WarmWorkers(Config({"bash", "-c", "python3 t.py"})).enabled());
  EXPECT_TRUE(WarmWorkers(Config({"python3", "t.py"})).enabled());
}

TEST(WarmWorkers, NextRoundTakesTheStandbys_WhenOnlyTheRoundsVariablesChanged) {
  const V argv = {"python3", "t.py"};
  WarmWorkers warm(Config(argv));
  SimulatedClock clock;
  launcher::testing::FakeWorkerGroup group(&clock);
  auto first = Round(argv, 0);
  warm.BeforeStart(&first, &group);  // no standbys yet: cold.
  EXPECT_FALSE(first[0].from_standby);
  StartStandbys(&warm, first, &group);
  ASSERT_EQ(group.standbys_started.size(), 2u);
  EXPECT_EQ(group.standbys_started[1].local_rank, 1);
  auto second = Round(argv, 1);
  warm.BeforeStart(&second, &group);
  EXPECT_TRUE(second[0].from_standby);
  EXPECT_TRUE(second[1].from_standby);
  EXPECT_THAT(second[0].standby_env, IsEmpty());  // no env prefix: `env` is handed.
  EXPECT_THAT(group.standbys_dropped, IsEmpty());
}

TEST(WarmWorkers, DropsTheStandbys_SayingWhy) {
  const V argv = {"python3", "t.py"};
  struct Case {
    std::string name;
    std::function<void(std::vector<launcher::ProcessSpec>*)> change;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"nproc", [](auto* s) { s->pop_back(); },
       "this round has 1 local worker, the standbys were for 2"},
      {"env", [](auto* s) { (*s)[1].env.push_back("NCCL_SOCKET_IFNAME=eth1"); },
       "local rank 1's environment changed (NCCL_SOCKET_IFNAME)"},
      {"env value", [](auto* s) { (*s)[0].env[0] = "PATH=/bin"; },
       "local rank 0's environment changed (PATH)"},
      {"binding", [](auto* s) { (*s)[0].cpus = {1}; },
       "local rank 0's CPU or NUMA binding changed"},
      {"command",
       [](auto* s) {
         (*s)[0].argv = {"python3", "u.py"};
       },
       "COMMAND changed"},
  };
  for (const Case& c : cases) {
    WarmWorkers warm(Config(argv));
    SimulatedClock clock;
    launcher::testing::FakeWorkerGroup group(&clock);
    StartStandbys(&warm, Round(argv, 0), &group);
    auto next = Round(argv, 1);
    c.change(&next);
    warm.BeforeStart(&next, &group);
    EXPECT_FALSE(next[0].from_standby) << c.name;
    ASSERT_EQ(group.standbys_dropped.size(), 1u) << c.name;
    EXPECT_EQ(group.standbys_dropped[0], c.why + "; this round starts cold") << c.name;
    // And the round after is prepared anew.
    StartStandbys(&warm, next, &group);
    EXPECT_EQ(group.standbys_started.size(), 2 + next.size()) << c.name;
  }
}

TEST(WarmWorkers, StandbysStartAfterTheDelay_AndNotForARoundThatEndedFirst) {
  const V argv = {"python3", "t.py"};
  WarmWorkers warm(Config(argv));
  SimulatedClock clock;
  launcher::testing::FakeWorkerGroup group(&clock);
  warm.AfterStart(Round(argv, 0), &group, kNow);
  EXPECT_EQ(warm.NextDeadline(), kNow + WarmWorkers::kStartDelay);
  warm.Tick(kNow + WarmWorkers::kStartDelay - absl::Milliseconds(1), &group);
  EXPECT_THAT(group.standbys_started, IsEmpty());
  // The round ends before they start: the next one is cold, and prepares
  // its own.
  auto next = Round(argv, 1);
  warm.BeforeStart(&next, &group);
  EXPECT_FALSE(next[0].from_standby);
  EXPECT_EQ(warm.NextDeadline(), absl::InfiniteFuture());
  warm.Tick(kNow + absl::Hours(1), &group);
  EXPECT_THAT(group.standbys_started, IsEmpty());
  warm.AfterStart(next, &group, kNow + absl::Seconds(5));
  warm.Tick(kNow + absl::Seconds(6), &group);
  EXPECT_EQ(group.standbys_started.size(), 2u);
}

TEST(WarmWorkers, EnvPrefixedCommand_IsHandedTheEnvTheInterpreterSees) {
  const V argv = {"env", "-u", "HOME", "python3", "t.py"};
  WarmWorkers warm(Config(argv));
  SimulatedClock clock;
  launcher::testing::FakeWorkerGroup group(&clock);
  StartStandbys(&warm, Round(argv, 0), &group);
  auto next = Round(argv, 1);
  warm.BeforeStart(&next, &group);
  ASSERT_TRUE(next[0].from_standby);
  EXPECT_THAT(next[0].standby_env, ElementsAre("PATH=/usr/bin", "RANK=5", "MASTER_PORT=29501",
                                               "TORCHELASTIC_RESTART_COUNT=1"));
}

TEST(WarmWorkers, AWorkerOnTheTerminalOrAFailedStandbyStart_TurnsItOff) {
  const V argv = {"python3", "t.py"};
  {
    WarmWorkers warm(Config(argv));
    SimulatedClock clock;
    launcher::testing::FakeWorkerGroup group(&clock);
    auto specs = Round(argv, 0);
    specs.resize(1);
    specs[0].foreground_tty = true;
    StartStandbys(&warm, specs, &group);
    EXPECT_FALSE(warm.enabled());
    EXPECT_THAT(group.standbys_started, IsEmpty());
  }
  {
    WarmWorkers warm(Config(argv));
    SimulatedClock clock;
    launcher::testing::FakeWorkerGroup group(&clock);
    group.standby_error = absl::UnimplementedError("no standbys here");
    StartStandbys(&warm, Round(argv, 0), &group);
    EXPECT_FALSE(warm.enabled());
    auto next = Round(argv, 1);
    warm.BeforeStart(&next, &group);
    EXPECT_FALSE(next[0].from_standby);
  }
}

}  // namespace warm_workers_test
}  // namespace
}  // namespace trainlet::agent

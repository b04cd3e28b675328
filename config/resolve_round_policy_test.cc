#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/coordinator_options.h"
#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using testing::RunSteps;

absl::Duration TableDefault(absl::string_view name) {
  const OptionSpec& spec = FindSpec(RunOptionTable(), name);
  absl::StatusOr<absl::Duration> d =
      ParseDurationValue(OptionValue{spec.default_text, "default", ValueSource::kDefault});
  EXPECT_TRUE(d.ok()) << name << ": " << d.status();
  return d.value_or(absl::ZeroDuration());
}

// The option table is where a default is written: the config, and the
// coordinator's options taken from it, hold the table's values.
TEST(ResolveRoundPolicy, DefaultsAreTheOptionTables_AndReachTheCoordinator) {
  RunSteps steps({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(steps.Through(&ResolveRoundPolicy).ok());
  const RunConfig& c = steps.config();
  EXPECT_EQ(c.grace_period, TableDefault("grace-period"));
  EXPECT_EQ(c.join_timeout, TableDefault("join-timeout"));
  EXPECT_EQ(c.hang_timeout, TableDefault("hang-timeout"));
  EXPECT_EQ(c.policy.last_call, TableDefault("last-call"));
  EXPECT_EQ(c.policy.heartbeat_timeout, TableDefault("heartbeat-timeout"));
  EXPECT_EQ(c.policy.min_nodes_timeout, TableDefault("min-nodes-timeout"));
  EXPECT_EQ(std::to_string(c.policy.release_streams_from),
            FindSpec(RunOptionTable(), "release-streams-from").default_text);
  EXPECT_EQ(c.policy.max_restarts, 0);
  EXPECT_EQ(c.log_level, LogLevel::kInfo);
  EXPECT_FALSE(c.prefix_output);
  EXPECT_FALSE(c.relay_output);
  EXPECT_EQ(OutputFormatName(c.progress_from_output.format),
            FindSpec(RunOptionTable(), "progress-from-output").default_text);

  const rendezvous::CoordinatorOptions o = CoordinatorOptionsFrom(c);
  EXPECT_EQ(o.last_call, c.policy.last_call);
  EXPECT_EQ(o.heartbeat_timeout, c.policy.heartbeat_timeout);
  EXPECT_EQ(o.min_nodes_timeout, c.policy.min_nodes_timeout);
  EXPECT_EQ(o.release_streams_from, c.policy.release_streams_from);
  EXPECT_EQ(o.max_nodes, 2);
}

TEST(ResolveRoundPolicy, AnElasticJobRestarts_KubernetesMaySayHowOften) {
  RunSteps elastic({"--nnodes=1:3", "--coordinator=head"});
  ASSERT_TRUE(elastic.Through(&ResolveRoundPolicy).ok());
  EXPECT_EQ(elastic.config().policy.max_restarts, kElasticMaxRestarts);
  RunSteps pet({"--nnodes=1:3", "--coordinator=head"}, {{"PET_MAX_RESTARTS", "7"}});
  ASSERT_TRUE(pet.Through(&ResolveRoundPolicy).ok());
  EXPECT_EQ(pet.config().policy.max_restarts, 7);
  EXPECT_THAT(absl::StrJoin(pet.config().discovery_notes, "\n"),
              HasSubstr("max restarts 7 from PET_MAX_RESTARTS"));
}

TEST(ResolveRoundPolicy, AnXgboostJobsMachineListIsAWarning) {
  RunSteps steps({}, {{"WORKER_ADDRS", "a,b"}});
  ASSERT_TRUE(steps.Through(&ResolveRoundPolicy).ok());
  EXPECT_THAT(absl::StrJoin(steps.config().warnings, "\n"), HasSubstr("WORKER_ADDRS/WORKER_PORT"));
}

TEST(ResolveRoundPolicy, ProgressFromOutput_IsValidatedAtStart) {
  RunSteps hf({"--prefix-output", "--progress-from-output=hf"});
  ASSERT_TRUE(hf.Through(&ResolveRoundPolicy).ok());
  EXPECT_EQ(hf.config().progress_from_output.format, OutputFormat::kHuggingFace);
  RunSteps regex({"--prefix-output"}, {{"TRAINLET_PROGRESS_FROM_OUTPUT", "iter (?P<step>\\d+)"}});
  ASSERT_TRUE(regex.Through(&ResolveRoundPolicy).ok());
  EXPECT_EQ(regex.config().progress_from_output.format, OutputFormat::kRegex);
  EXPECT_EQ(regex.config().progress_from_output.regex, "iter (?P<step>\\d+)");

  // A broken regex, or a format the agent could not read, is a usage error
  // naming the input.
  RunSteps bad({"--prefix-output", "--progress-from-output=iter (?P<step>\\d+"});
  absl::Status s = bad.Through(&ResolveRoundPolicy);
  EXPECT_THAT(s.message(), HasSubstr("--progress-from-output"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  RunSteps off({"--progress-from-output=off"});
  ASSERT_TRUE(off.Through(&ResolveRoundPolicy).ok());
  EXPECT_EQ(off.config().progress_from_output.format, OutputFormat::kOff);
}

// Asked for explicitly (flag or env), progress from output has the
// agent relay the output unchanged; the default auto, or off, relays nothing
// on its account, and --prefix-output relays (prefixed) anyway.
TEST(ResolveRoundPolicy, ProgressFromOutput_SetExplicitly_RelaysTheOutput) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    bool relay;
  };
  const Case cases[] = {
      {{}, {}, false},  // the default auto: the worker writes to the pod's stdout
      {{"--progress-from-output=off"}, {}, false},
      {{}, {{"TRAINLET_PROGRESS_FROM_OUTPUT", "off"}}, false},
      {{"--progress-from-output=auto"}, {}, true},
      {{"--progress-from-output=hf"}, {}, true},
      {{}, {{"TRAINLET_PROGRESS_FROM_OUTPUT", "deepspeed"}}, true},
      {{}, {{"TRAINLET_PROGRESS_FROM_OUTPUT", "iter (?P<step>\\d+)"}}, true},
      {{"--prefix-output", "--progress-from-output=hf"}, {}, false},  // prefixed instead
  };
  for (const Case& c : cases) {
    RunSteps steps(c.args, c.env);
    const std::string what = absl::StrCat(absl::StrJoin(c.args, " "), " env ",
                                          c.env.empty() ? "" : c.env.begin()->second);
    ASSERT_TRUE(steps.Through(&ResolveRoundPolicy).ok()) << what;
    EXPECT_EQ(steps.config().relay_output, c.relay) << what;
  }
}

}  // namespace
}  // namespace trainlet::agent

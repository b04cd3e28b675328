#include "config/coordinator_config.h"

#include <unistd.h>

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

TEST(ParseCoordinatorConfig, Defaults) {
  auto c = ParseCoordinatorConfig({}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->help_requested);
  EXPECT_EQ(c->port, 29400);
  EXPECT_EQ(c->bind_addr, "0.0.0.0");
  EXPECT_EQ(c->nnodes.min, 1);
  EXPECT_EQ(c->nnodes.max, 1);
  EXPECT_EQ(c->job_id, "trainlet");
  EXPECT_TRUE(c->token.empty());
  EXPECT_EQ(c->policy.max_restarts, 0);
  EXPECT_EQ(c->policy.last_call, absl::Milliseconds(500));
  EXPECT_EQ(c->policy.heartbeat_timeout, absl::Seconds(5));
  EXPECT_EQ(c->policy.min_nodes_timeout, absl::Minutes(5));
  EXPECT_EQ(c->log_level, LogLevel::kInfo);
}

TEST(ParseCoordinatorConfig, EveryFlag) {
  auto c =
      ParseCoordinatorConfig({"--port=29450", "--bind-addr", "[::]", "--nnodes=2:8", "--job-id=j1",
                              "--max-restarts=9", "--last-call=1s", "--heartbeat-timeout", "10",
                              "--min-nodes-timeout=30s", "--log-level=warning"},
                             {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 29450);
  EXPECT_EQ(c->bind_addr, "::");
  EXPECT_EQ(c->nnodes.min, 2);
  EXPECT_EQ(c->nnodes.max, 8);
  EXPECT_EQ(c->job_id, "j1");
  EXPECT_EQ(c->policy.max_restarts, 9);
  EXPECT_EQ(c->policy.last_call, absl::Seconds(1));
  EXPECT_EQ(c->policy.heartbeat_timeout, absl::Seconds(10));
  EXPECT_EQ(c->policy.min_nodes_timeout, absl::Seconds(30));
  EXPECT_EQ(c->log_level, LogLevel::kWarning);
}

TEST(ParseCoordinatorConfig, ElasticDefaultsToThreeRestarts) {
  auto c = ParseCoordinatorConfig({"--nnodes=1:4"}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->policy.max_restarts, 3);
}

TEST(ParseCoordinatorConfig, EnvFallbackAndPrecedence) {
  auto c = ParseCoordinatorConfig(
      {"--port=1000"},
      {{"TRAINLET_PORT", "2000"}, {"TRAINLET_JOB_ID", "env-job"}, {"PET_NNODES", "4"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 1000);
  EXPECT_EQ(c->job_id, "env-job");
  EXPECT_EQ(c->nnodes.max, 1);  // No Kubernetes discovery for the coordinator.
}

TEST(ParseCoordinatorConfig, BadInputNamesTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--port=0"}, "--port: expected an integer in 1..65535"},
      {{"--port=70000"}, "--port: expected an integer in 1..65535"},
      {{"--nnodes=3:2"}, "--nnodes: expected N or MIN:MAX"},
      {{"--job-id=a b"}, "--job-id: expected"},
      {{"--bind-addr="}, "--bind-addr: expected"},
      {{"--bind-addr=coord host"}, "--bind-addr: expected an IP address"},
      {{"--heartbeat-timeout=0"}, "--heartbeat-timeout: expected a duration"},
      {{"--log-level=x"}, "--log-level: expected"},
      {{"--nproc-per-node=2"}, "unknown flag --nproc-per-node"},
      {{"--prot=1"}, "did you mean --port?"},
      {{"--", "python"}, "the coordinator runs no COMMAND"},
  };
  for (const Case& c : cases) {
    auto r = ParseCoordinatorConfig(c.args, {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.args[0];
  }
}

TEST(ParseCoordinatorConfig, UnreadableTokenFile) {
  auto c = ParseCoordinatorConfig({"--token-file=/nonexistent/t"}, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/t"));
}

TEST(ParseCoordinatorConfig, Help) {
  auto c = ParseCoordinatorConfig({"--port=0", "-h"}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help_requested);
  std::string help = CoordinatorHelpText();
  EXPECT_THAT(help, HasSubstr("Usage: trainlet coordinator [OPTIONS]"));
  EXPECT_THAT(help, HasSubstr("env TRAINLET_BIND_ADDR, default: 0.0.0.0"));
  EXPECT_THAT(help, HasSubstr("--min-nodes-timeout=DURATION"));
}

// The coordinator does no Kubernetes discovery, so its help must not say so.
TEST(ParseCoordinatorConfig, HelpDoesNotMentionKubernetes) {
  std::string help = CoordinatorHelpText();
  EXPECT_THAT(help, ::testing::Not(HasSubstr("Kubernetes")));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("PET_")));
}

TEST(ParseCoordinatorConfig, WhitespaceOnlyTokenFileIsAConfigError) {
  char tmpl[] = "/tmp/trainlet_coord_token_XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, " \n", 2), 2);
  close(fd);
  auto c = ParseCoordinatorConfig({std::string("--token-file=") + tmpl}, {});
  std::remove(tmpl);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("is empty"));
}

TEST(ParseCoordinatorConfig, SlowNodeOptions) {
  auto d = ParseCoordinatorConfig({}, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->policy.slow_nodes, v1::SLOW_NODES_WARN);
  EXPECT_DOUBLE_EQ(d->policy.slow_node_threshold, 0.10);
  EXPECT_EQ(d->policy.slow_node_window, absl::Seconds(30));
  auto c = ParseCoordinatorConfig({"--slow-nodes=exclude", "--slow-node-threshold=25%"},
                                  {{"TRAINLET_SLOW_NODE_WINDOW", "1m"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->policy.slow_nodes, v1::SLOW_NODES_EXCLUDE);
  EXPECT_DOUBLE_EQ(c->policy.slow_node_threshold, 0.25);
  EXPECT_EQ(c->policy.slow_node_window, absl::Minutes(1));
  auto off = ParseCoordinatorConfig({"--slow-nodes=off", "--slow-node-threshold=5"}, {});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->policy.slow_nodes, v1::SLOW_NODES_OFF);
  EXPECT_DOUBLE_EQ(off->policy.slow_node_threshold, 0.05);
  for (const auto& [flag, what] : std::vector<std::pair<std::string, std::string>>{
           {"--slow-nodes=fail", "off, warn or exclude"},
           {"--slow-node-threshold=0%", "from 1% to 1000%"},
           {"--slow-node-threshold=ten", "from 1% to 1000%"},
           {"--slow-node-window=5s", "slow-node-window"},
           {"--slow-node-window=31m", "from 10s to 30m"},
       }) {
    auto bad = ParseCoordinatorConfig({flag}, {});
    ASSERT_FALSE(bad.ok()) << flag;
    EXPECT_THAT(bad.status().message(), HasSubstr(what)) << flag << ": " << bad.status();
  }
}

}  // namespace
}  // namespace trainlet::agent

#include "cmd/controller_command.h"

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

TEST(ParseControllerConfig, Defaults) {
  auto c = ParseControllerConfig({}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_host, "0.0.0.0");
  EXPECT_EQ(c->listen_port, 29600);
  EXPECT_EQ(c->http_host, "0.0.0.0");
  EXPECT_EQ(c->http_port, 29680);
  EXPECT_TRUE(c->db_path.empty());
  EXPECT_EQ(c->history_retention, 1000);
  EXPECT_EQ(c->history_max_age, absl::Hours(720));
  EXPECT_EQ(c->history_max_jobs, 1000);
  EXPECT_FALSE(c->db_required);
  EXPECT_EQ(c->stale_after, absl::Seconds(15));
  EXPECT_TRUE(c->tokens.empty());
  EXPECT_FALSE(c->tls.enabled());
}

TEST(ParseControllerConfig, EveryFlagAndEnvironment) {
  testing::TempRoot root;
  const std::string token = root.Write("token", "tok\n");
  auto c = ParseControllerConfig(
      {"--listen=127.0.0.1:29601", "--http", "[::1]:8080", "--db=/var/lib/trainlet/h.db",
       "--history-retention=50", "--history-max-age=0", "--token-file=" + token,
       "--log-level=debug", "--history-max-jobs=20", "--db-required"},
      {{"TRAINLET_STALE_AFTER", "30s"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_host, "127.0.0.1");
  EXPECT_EQ(c->listen_port, 29601);
  EXPECT_EQ(c->http_host, "::1");
  EXPECT_EQ(c->http_port, 8080);
  EXPECT_EQ(c->db_path, "/var/lib/trainlet/h.db");
  EXPECT_EQ(c->history_retention, 50);
  EXPECT_EQ(c->history_max_age, absl::ZeroDuration());
  EXPECT_EQ(c->history_max_jobs, 20);
  EXPECT_TRUE(c->db_required);
  EXPECT_EQ(c->stale_after, absl::Seconds(30));
  ASSERT_EQ(c->tokens.size(), 1u);
  ASSERT_NE(c->tokens.Find("tok"), nullptr);
  EXPECT_TRUE(c->tokens.Find("tok")->all_jobs);
  EXPECT_EQ(c->log_level, LogLevel::kDebug);
}

TEST(ParseControllerConfig, Errors_NameTheInput) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--listen=29600"}, "--listen: expected [ADDR]:PORT"},
      {{"--listen=:0"}, "--listen"},
      {{"--listen=host.example:29600"}, "--listen"},
      {{"--http=:29600"}, "--http: its port must differ"},
      {{"--history-retention=0"}, "--history-retention"},
      {{"--history-max-jobs=0"}, "--history-max-jobs"},
      {{"--db-required"}, "--db-required: needs --db"},
      {{"--stale-after=100ms"}, "--stale-after"},
      {{"--", "python"}, "runs no COMMAND"},
  };
  for (const Case& c : cases) {
    auto config = ParseControllerConfig(c.args, {});
    ASSERT_FALSE(config.ok()) << c.args[0];
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(config.status().message(), HasSubstr(c.message));
  }
  auto missing = ParseControllerConfig({"--token-file=/nonexistent/token"}, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParseControllerConfig, Help) {
  auto c = ParseControllerConfig({"--help"}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help_requested);
  EXPECT_THAT(ControllerHelpText(), HasSubstr("--history-retention"));
  EXPECT_THAT(ControllerHelpText(), HasSubstr("TRAINLET_DB"));
}

}  // namespace
}  // namespace trainlet::agent

#include "agent/status_command.h"

#include <sstream>

#include "common/exit_codes.h"
#include "controller/http_server.h"
#include "controller/testing/sample_snapshot.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

TEST(ParseHttpAddress, HostPortIpv6AndDefaults) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHttpAddress("ctl.example:8080", &host, &port).ok());
  EXPECT_EQ(host, "ctl.example");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseHttpAddress("10.0.0.1", &host, &port).ok());
  EXPECT_EQ(port, 29680);
  ASSERT_TRUE(ParseHttpAddress("[::1]:9", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9);
  EXPECT_FALSE(ParseHttpAddress("::1:9", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("host:0", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("host:", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("bad host:1", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("[::1", &host, &port).ok());
}

TEST(ParseStatusOptions, FlagBeatsEnvironmentBeatsDefault) {
  auto def = ParseStatusOptions({}, {});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->host, "127.0.0.1");
  EXPECT_EQ(def->port, 29680);
  auto env = ParseStatusOptions({"demo"}, {{"TRAINLET_CONTROLLER_HTTP", "ctl:1234"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->host, "ctl");
  EXPECT_EQ(env->job, "demo");
  auto flag = ParseStatusOptions({"--controller", "other:99", "--json", "--timeout=2s"},
                                 {{"TRAINLET_CONTROLLER_HTTP", "ctl:1234"}});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->host, "other");
  EXPECT_EQ(flag->port, 99);
  EXPECT_TRUE(flag->json);
  EXPECT_EQ(flag->timeout_seconds, 2);
}

TEST(ParseStatusOptions, BadInput_NamesIt) {
  EXPECT_THAT(ParseStatusOptions({"--nope"}, {}).status().message(), HasSubstr("--nope"));
  EXPECT_THAT(ParseStatusOptions({"a", "b"}, {}).status().message(), HasSubstr("one JOB"));
  EXPECT_THAT(ParseStatusOptions({"--timeout=x"}, {}).status().message(), HasSubstr("--timeout"));
  EXPECT_THAT(ParseStatusOptions({"--controller"}, {}).status().message(),
              HasSubstr("needs a value"));
  EXPECT_THAT(ParseStatusOptions({}, {{"TRAINLET_CONTROLLER_HTTP", "a b"}}).status().message(),
              HasSubstr("TRAINLET_CONTROLLER_HTTP"));
}

class StatusCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    controller::HttpServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = controller::HttpServer::Start(
        options, [] { return controller::testing::SampleSnapshot(); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = "--controller=127.0.0.1:" + std::to_string(server_->port());
  }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return RunStatusCommand(args, {}, out_, err_);
  }

  std::unique_ptr<controller::HttpServer> server_;
  std::string address_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(StatusCommandTest, Table_IsTheControllersSnapshot) {
  ASSERT_EQ(Run({address_}), kExitSuccess) << err_.str();
  // What the JSON carries (the sample's invalid UTF-8 arrives as U+FFFD).
  auto expected =
      controller::ParseSnapshotJson(controller::RenderJson(controller::testing::SampleSnapshot()));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(out_.str(), controller::RenderStatusTable(*expected));
  EXPECT_THAT(out_.str(), HasSubstr("demo-node-2  2     ffffffffffffffff  stale"));
}

TEST_F(StatusCommandTest, OneJob_InFull) {
  ASSERT_EQ(Run({address_, "demo"}), kExitSuccess) << err_.str();
  EXPECT_EQ(out_.str(),
            controller::RenderStatusTable(controller::testing::SampleSnapshot(), "demo"));
}

TEST_F(StatusCommandTest, Json_IsTheJobsJson) {
  ASSERT_EQ(Run({address_, "--json", "demo"}), kExitSuccess) << err_.str();
  controller::ControllerSnapshot expected = controller::testing::SampleSnapshot();
  expected.jobs.resize(1);
  EXPECT_EQ(out_.str(), controller::RenderJson(expected));
}

TEST_F(StatusCommandTest, UnknownJob_Exits1) {
  EXPECT_EQ(Run({address_, "nope"}), kExitStatusJobUnknown);
  EXPECT_THAT(err_.str(), HasSubstr("knows no job 'nope'"));
}

TEST_F(StatusCommandTest, Unreachable_Exits69NamingTheAddress) {
  const int port = server_->port();
  server_->Stop();
  EXPECT_EQ(Run({"--controller=127.0.0.1:" + std::to_string(port), "--timeout=1s"}),
            kExitUnavailable);
  EXPECT_THAT(err_.str(), HasSubstr("cannot reach the controller at http://127.0.0.1:"));
}

TEST(StatusCommand, Usage_Exits64) {
  std::ostringstream out, err;
  EXPECT_EQ(RunStatusCommand({"--bogus"}, {}, out, err), kExitUsage);
  EXPECT_EQ(RunStatusCommand({"--help"}, {}, out, err), kExitSuccess);
  EXPECT_THAT(out.str(), HasSubstr("Usage: trainlet status"));
}

}  // namespace
}  // namespace trainlet::agent

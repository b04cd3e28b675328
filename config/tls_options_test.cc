// The TLS options of `run`, the MPI commands and `coordinator`: all three
// files or none, --tls-dir, the TRAINLET_TLS_* variables, errors naming the
// input, and the name the coordinator's certificate is checked against.
#include <memory>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "config/coordinator_config.h"
#include "config/options.h"
#include "config/run_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/testing/test_pki.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class TlsOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = rendezvous::testing::TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki);
    auto node = pki_->Issue("node", "ca", {"DNS:localhost"});
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *node;
  }

  absl::StatusOr<rendezvous::TlsConfig> Parse(const std::vector<std::string>& args,
                                              const std::map<std::string, std::string>& env = {},
                                              std::vector<std::string>* warnings = nullptr) {
    std::vector<OptionSpec> table = TlsOptionSpecs(/*client=*/true);
    absl::StatusOr<ParsedOptions> parsed = ParseOptions(table, args, env, "trainlet test");
    if (!parsed.ok()) return parsed.status();
    std::vector<std::string> unused;
    return ParseTlsOptions(*parsed, warnings != nullptr ? warnings : &unused);
  }

  std::unique_ptr<rendezvous::testing::TestPki> pki_;
  rendezvous::testing::CertFiles node_;
};

TEST_F(TlsOptionsTest, NoOption_IsPlaintext) {
  auto tls = Parse({});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(tls->enabled());
}

TEST_F(TlsOptionsTest, ThreeFlags_LoadTheFiles) {
  std::vector<std::string> warnings;
  auto tls = Parse({"--tls-cert=" + node_.cert, "--tls-key=" + node_.key, "--tls-ca=" + node_.ca},
                   {}, &warnings);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled());
  EXPECT_THAT(tls->key_pem, HasSubstr("PRIVATE KEY"));
  EXPECT_TRUE(tls->server_name.empty());
  EXPECT_THAT(warnings, IsEmpty());
}

TEST_F(TlsOptionsTest, TlsDirFromTheEnvironment_ReadsCertManagerNames) {
  auto tls = Parse({"--tls-server-name=job-node-0-0.job"}, {{"TRAINLET_TLS_DIR", node_.dir + "/"}});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled());
  EXPECT_EQ(tls->server_name, "job-node-0-0.job");
}

TEST_F(TlsOptionsTest, OneFlagOverridesTheDirectory) {
  auto tls = Parse({"--tls-dir=" + node_.dir, "--tls-ca=/nonexistent/ca.pem"});
  ASSERT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tls.status().message(), HasSubstr("--tls-ca: cannot read /nonexistent/ca.pem"));
}

TEST_F(TlsOptionsTest, PartialConfiguration_NamesTheMissingOptionAndIsExit78) {
  auto tls = Parse({"--tls-cert=" + node_.cert}, {{"TRAINLET_TLS_CA", node_.ca}});
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(ExitCodeForConfigError(tls.status()), kExitConfig);
  EXPECT_THAT(tls.status().message(),
              HasSubstr("--tls-cert and TRAINLET_TLS_CA are set but not --tls-key "
                        "(TRAINLET_TLS_KEY)"));
}

TEST_F(TlsOptionsTest, ServerNameWithoutTls_IsAConfigurationError) {
  auto tls = Parse({"--tls-server-name=coordinator"});
  ASSERT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tls.status().message(), HasSubstr("--tls-server-name is set but TLS is not"));
}

TEST_F(TlsOptionsTest, MalformedServerName_IsAUsageError) {
  auto tls = Parse({"--tls-dir=" + node_.dir, "--tls-server-name=bad name"});
  ASSERT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tls.status().message(), HasSubstr("--tls-server-name"));
}

TEST_F(TlsOptionsTest, DirWithoutFiles_NamesTheFileItLooksFor) {
  auto tls = Parse({"--tls-dir=/nonexistent"});
  ASSERT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tls.status().message(),
              HasSubstr("--tls-dir's tls.crt: cannot read /nonexistent/tls.crt"));
}

TEST_F(TlsOptionsTest, Coordinator_TakesTlsAndAPlaintextHealthPort) {
  auto c = ParseCoordinatorConfig({"--tls-dir=" + node_.dir, "--health-port=29401"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls.enabled());
  EXPECT_EQ(c->health_port, 29401);
  auto clash = ParseCoordinatorConfig({"--port=29400", "--health-port=29400"}, {});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
  auto partial = ParseCoordinatorConfig({"--tls-key=" + node_.key}, {});
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kFailedPrecondition);
  auto no_name = ParseCoordinatorConfig({"--tls-dir=" + node_.dir, "--tls-server-name=x"}, {});
  EXPECT_EQ(no_name.status().code(), absl::StatusCode::kInvalidArgument)
      << "the coordinator checks no server name";
}

TEST(CoordinatorTlsName, HostingAgentChecksItsAdvertisedAddress) {
  RunConfig c;
  c.advertise_addr = "job-node-0-0.job";
  EXPECT_EQ(CoordinatorTlsName(c, /*hosting=*/true), "job-node-0-0.job");
  EXPECT_EQ(CoordinatorTlsName(c, /*hosting=*/false), "") << "the dialled host is checked";
  c.tls.server_name = "coordinator.example";
  EXPECT_EQ(CoordinatorTlsName(c, true), "coordinator.example");
  EXPECT_EQ(CoordinatorTlsName(c, false), "coordinator.example");
}

}  // namespace
}  // namespace trainlet::agent

#include "absl/strings/str_join.h"
#include "common/testing/temp_root.h"
#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using testing::RunSteps;

TEST(ResolveSecurity, TheTokenFromItsFile_OrTheKubernetesSecret) {
  trainlet::testing::TempRoot root;
  root.Write("token", "s3cret\n");
  RunSteps file({"--token-file=" + root.path() + "/token"});
  ASSERT_TRUE(file.Through(&ResolveSecurity).ok());
  EXPECT_EQ(file.config().token, "s3cret");

  RunSteps missing({"--token-file=" + root.path() + "/none"});
  EXPECT_EQ(missing.Through(&ResolveSecurity).code(), absl::StatusCode::kFailedPrecondition);

  root.Write("var/run/secrets/trainlet/token", "from-secret");
  SystemInfo pod = testing::Workstation();
  pod.root = root.path();
  RunSteps secret({}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, pod);
  ASSERT_TRUE(secret.Through(&ResolveSecurity).ok());
  EXPECT_EQ(secret.config().token, "from-secret");
  EXPECT_EQ(secret.config().token_file, kKubernetesTokenPath);
  RunSteps outside({}, {}, pod);
  ASSERT_TRUE(outside.Through(&ResolveSecurity).ok());
  EXPECT_EQ(outside.config().token, "") << "the Secret's path means nothing outside Kubernetes";
}

TEST(ResolveSecurity, AMultiNodeJobWithoutATokenIsWarnedAbout) {
  RunSteps single({});
  ASSERT_TRUE(single.Through(&ResolveSecurity).ok());
  EXPECT_TRUE(single.config().warnings.empty());

  RunSteps host({"--nnodes=2", "--node-rank=0"});
  ASSERT_TRUE(host.Through(&ResolveSecurity).ok());
  EXPECT_THAT(absl::StrJoin(host.config().warnings, "\n"),
              HasSubstr("no token: this multi-node job is unauthenticated, so anyone who can "
                        "reach the coordinator (port 29400 on 0.0.0.0)"));
}

TEST(ResolveSecurity, TlsGivenInPartIsRefused) {
  RunSteps part({"--tls-cert=/nonexistent/tls.crt"});
  absl::Status s = part.Through(&ResolveSecurity);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--tls-key"));
}

}  // namespace
}  // namespace trainlet::agent

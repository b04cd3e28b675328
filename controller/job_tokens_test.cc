#include "controller/job_tokens.h"

#include <string>

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;

TEST(JobTokensTest, OneLine_IsATokenForEveryJob_AsBefore) {
  // An agents' token file works unchanged, spaces and CRLF included.
  auto t = JobTokens::Parse("s3cret with spaces\r\n\n", "--token-file");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 1u);
  const TokenScope* scope = t->Find("s3cret with spaces");
  ASSERT_NE(scope, nullptr);
  EXPECT_TRUE(scope->all_jobs);
  EXPECT_TRUE(scope->Allows("anything"));
  EXPECT_EQ(t->Find("s3cret"), nullptr);
}

TEST(JobTokensTest, JobScopedTokens_AllowOnlyTheirJobs) {
  auto t = JobTokens::Parse(
      "# the controller's tokens\n"
      "admin\n"
      "jobs=team-a-* tok-a\n"
      "jobs=team-b-train,team-b-eval   tok-b\n",
      "--token-file");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_TRUE(t->Find("admin")->Allows("team-b-train"));
  const TokenScope* a = t->Find("tok-a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->Allows("team-a-llm"));
  EXPECT_TRUE(a->Allows("team-a-"));
  EXPECT_FALSE(a->Allows("team-b-train"));
  EXPECT_EQ(a->Describe(), "jobs team-a-*");
  const TokenScope* b = t->Find("tok-b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->Allows("team-b-eval"));
  EXPECT_FALSE(b->Allows("team-b-evaluation"));
  EXPECT_FALSE(b->Allows("team-a-llm"));
  EXPECT_EQ(t->Find("tok-c"), nullptr);
}

TEST(JobTokensTest, Errors_NameTheLine) {
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {"", "has no token"},
      {"# only a comment\n\n", "has no token"},
      {"a\njobs=team-a-*\n", "line 2: expected \"jobs=PATTERN"},
      {"jobs=team/a tok\n", "line 1: \"team/a\" is no job pattern"},
      {"jobs=*x tok\n", "is no job pattern"},
      {"jobs=a,,b tok\n", "\"\" is no job pattern"},
      {"tok\njobs=a tok\n", "line 2: the same token is listed twice"},
      {"to\x01k\n", "not printable ASCII"},
  };
  for (const Case& c : cases) {
    auto t = JobTokens::Parse(c.text, "--token-file f");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(t.status().message(), HasSubstr("--token-file f")) << c.text;
  }
}

TEST(JobTokensTest, ReadFile_NamesTheFile) {
  trainlet::testing::TempRoot root;
  auto t = JobTokens::ReadFile(root.Write("tokens", "jobs=j tok\n"), "--token-file");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->Find("tok")->Allows("k"));
  auto missing = JobTokens::ReadFile(root.path() + "/nope", "--token-file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));
}

TEST(JobTokensTest, AnyJob_AndNone) {
  EXPECT_TRUE(JobTokens().empty());
  EXPECT_TRUE(JobTokens::AnyJob("").empty());
  EXPECT_TRUE(JobTokens::AnyJob("x").Find("x")->all_jobs);
}

}  // namespace
}  // namespace trainlet::controller

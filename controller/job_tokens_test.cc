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

// A scoped line with a comment after its token (as the docs' example had
// it) made the comment part of the token, so the team's agents were
// refused; an indented scoped line became a token for every job whose
// text was "  jobs=...".
TEST(JobTokensTest, ScopedLine_CommentAfterTheTokenOrIndented) {
  auto t = JobTokens::Parse("jobs=team-a-* tok-a   # team A\n", "--token-file f");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("line 1: a job-scoped token is one word"));
  EXPECT_THAT(t.status().message(), HasSubstr("comments go on lines of their own"));
  t = JobTokens::Parse("admin\n  jobs=team-a-* tok-a\n\tjobs=team-b-* tok-b\n", "--token-file f");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE(t->Find("tok-a"), nullptr);
  EXPECT_FALSE(t->Find("tok-a")->all_jobs);
  EXPECT_TRUE(t->Find("tok-a")->Allows("team-a-x"));
  EXPECT_FALSE(t->Find("tok-b")->Allows("team-a-x"));
  // An unscoped line is still the whole line, as an agents' file has it.
  EXPECT_NE(t->Find("admin"), nullptr);
}

// Every RPC compares the presented token with every listed one (each in
// constant time), and parsing compared each new token with all before it:
// a 1 MiB file of short tokens (130,000) took minutes to load and made
// every call compare 130,000 tokens. The file holds at most 4,096.
TEST(JobTokensTest, TooManyTokens_IsAnErrorNamingTheLimit) {
  std::string text;
  for (int i = 0; i <= kMaxTokens; ++i) text += "tok-" + std::to_string(i) + "\n";
  auto t = JobTokens::Parse(text, "--token-file f");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("more than 4096 tokens"));
  EXPECT_THAT(t.status().message(), HasSubstr("line 4097"));
  text.erase(text.rfind("tok-"));
  t = JobTokens::Parse(text, "--token-file f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), static_cast<size_t>(kMaxTokens));
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

#include "rendezvous/preflight_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::PreflightReport Report(bool dns_fails, bool path_fails) {
  v1::PreflightReport r;
  auto add = [&](const char* check, bool fails, const char* reason) {
    v1::CheckResult* c = r.add_results();
    c->set_check(check);
    c->set_outcome(fails ? v1::CheckResult::FAIL : v1::CheckResult::PASS);
    if (fails) c->set_reason(reason);
  };
  add("dns", dns_fails, "1 of 2 names do not resolve");
  v1::CheckResult* skipped = r.add_results();
  skipped->set_check("gpu_ecc");
  skipped->set_outcome(v1::CheckResult::SKIPPED);
  skipped->set_reason("no NVML");
  add("path_round_trip", path_fails, "/ckpt: read-only file system");
  return r;
}

TEST(FailedChecks, OnlyTheFailuresInOneLine_SkippedIsNotFailed) {
  EXPECT_EQ(FailedChecks(Report(false, false)), "");
  EXPECT_EQ(FailedChecks(Report(true, true)),
            "dns: 1 of 2 names do not resolve; path_round_trip: /ckpt: read-only file system");
}

TEST(FailedChecks, ALongOrHostileReasonIsCutAndEscaped) {
  v1::PreflightReport r = Report(true, false);
  r.mutable_results(0)->set_reason(std::string(5000, 'x') + "\n\x1b[31m");
  const std::string line = FailedChecks(r);
  EXPECT_LE(line.size(), kMaxPreflightLine);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
}

TEST(PreflightWarnings, OneLinePerNode_NewOrChangedOnly) {
  PreflightWarnings w;
  EXPECT_TRUE(w.Set("a", "dns: x"));
  EXPECT_FALSE(w.Set("a", "dns: x")) << "the same line again: nothing new";
  EXPECT_TRUE(w.Set("a", "dns: y"));
  EXPECT_THAT(w.Lines(), ElementsAre("node a: dns: y"));
  w.Clear();
  EXPECT_TRUE(w.empty());
}

// Every failing node of a large job (a 64 MiB /dev/shm everywhere) must
// not make the coordinator tell everyone again and again: beyond the kept
// lines a node is only counted.
TEST(PreflightWarnings, BeyondTheCap_CountedNotNew) {
  PreflightWarnings w;
  for (int i = 0; i < kMaxPreflightWarnings; ++i) {
    EXPECT_TRUE(w.Set(absl::StrCat("n", i), "shm_size: 64 MiB"));
  }
  EXPECT_FALSE(w.Set("n16", "shm_size: 64 MiB"));
  EXPECT_FALSE(w.Set("n16", "shm_size: 64 MiB"));
  EXPECT_FALSE(w.Set("n17", "shm_size: 64 MiB"));
  const std::vector<std::string> lines = w.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kMaxPreflightWarnings) + 1);
  EXPECT_EQ(lines.back(), "and 2 more node(s)");
}

}  // namespace
}  // namespace trainlet::rendezvous

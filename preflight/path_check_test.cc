#include "preflight/path_check.h"

#include <dirent.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {
namespace path_check_test {

using ::testing::HasSubstr;
using trainlet::testing::TempRoot;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  return out;
}

TEST(CheckPath, NoPathIsSkipped) {
  BoundedRunner runner;
  const std::vector<v1::CheckResult> r = CheckPath("", "pod-0", {}, runner);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].check(), kCheckPathFreeSpace);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::SKIPPED);
  EXPECT_EQ(r[1].check(), kCheckPathRoundTrip);
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::SKIPPED);
}

TEST(CheckPath, AWritableDirectoryPassesAndKeepsNoFile) {
  TempRoot root;
  BoundedRunner runner;
  PathThresholds t;
  t.min_free_bytes = 1;
  const std::vector<v1::CheckResult> r = CheckPath(root.path(), "pod/../0", t, runner);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::PASS) << r[0].reason();
  EXPECT_GT(r[0].value(), 0);
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::PASS) << r[1].reason();
  EXPECT_THAT(r[1].reason(), HasSubstr("wrote, synced, read back and deleted 4096 bytes"));
  EXPECT_TRUE(Entries(root.path()).empty());
}

TEST(CheckPath, FreeSpaceUnderTheThresholdFails) {
  TempRoot root;
  BoundedRunner runner;
  PathThresholds t;
  t.min_free_bytes = ~uint64_t{0};  // more than any filesystem has.
  const std::vector<v1::CheckResult> r = CheckPath(root.path(), "pod-0", t, runner);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[0].reason(), HasSubstr("nearly full"));
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::PASS);  // the round trip itself still works.
}

TEST(CheckPath, AMissingDirectoryFailsBoth) {
  TempRoot root;
  BoundedRunner runner;
  const std::vector<v1::CheckResult> r =
      CheckPath(root.path() + "/checkpoints", "pod-0", {}, runner);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[0].reason(), HasSubstr("checkpoints: does not exist"));
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::FAIL);
}

TEST(CheckPath, AFileInsteadOfADirectoryFailsTheRoundTrip) {
  TempRoot root;
  const std::string file = root.Write("not-a-dir", "x");
  BoundedRunner runner;
  PathThresholds t;
  t.min_free_bytes = 1;
  const std::vector<v1::CheckResult> r = CheckPath(file, "pod-0", t, runner);
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[1].reason(), HasSubstr("not a directory"));
}

}  // namespace path_check_test
}  // namespace trainlet::preflight

// The checks against real small filesystems: tmpfs mounts of a few hundred
// KiB in a private mount namespace of this test process (so nothing leaks
// into the machine's mount table, even if the test dies), unmounted again
// by each test. Needs root (CAP_SYS_ADMIN); skipped elsewhere. Its own
// executable (preflight/CMakeLists.txt): unshare(CLONE_NEWNS) refuses a
// process with more than one thread, and this one starts none before it.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/bounded.h"
#include "preflight/check_result.h"
#include "preflight/host_checks.h"
#include "preflight/path_check.h"

namespace trainlet::preflight {
namespace {

using ::testing::HasSubstr;

class MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (unshare(CLONE_NEWNS) != 0) {
      skip_ = absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(errno), " (needs root)");
      return;
    }
    // Private: mounts made here do not propagate to the machine.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      skip_ = absl::StrCat("mount --make-rprivate /: ", std::strerror(errno));
    }
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  void TearDown() override {
    for (const std::string& dir : mounted_) {
      umount2(dir.c_str(), MNT_DETACH);
      rmdir(dir.c_str());
    }
  }

  // A fresh tmpfs of `size` ("256k") at a new directory, read-only with
  // MS_RDONLY; its path.
  std::string Tmpfs(const std::string& size, unsigned long flags = 0) {
    char dir[] = "/tmp/trainlet-preflight-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return "";
    }
    const std::string options = absl::StrCat("size=", size, ",mode=0755");
    if (mount("tmpfs", dir, "tmpfs", flags, options.c_str()) != 0) {
      ADD_FAILURE() << "mount tmpfs " << options << ": " << std::strerror(errno);
      rmdir(dir);
      return "";
    }
    mounted_.push_back(dir);
    return dir;
  }

  static std::string skip_;
  std::vector<std::string> mounted_;
};

std::string MountTest::skip_;

TEST_F(MountTest, ATinyShmFailsTheShmCheck) {
  const std::string shm = Tmpfs("1m");
  ASSERT_FALSE(shm.empty());
  const v1::NodeProbe probe = ReadHostLimits(shm);
  EXPECT_EQ(probe.shm_bytes(), 1u << 20);
  const v1::CheckResult r = CheckShmSize(probe, {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("/dev/shm is 1 MiB, under 1 GiB"));

  const std::string big = Tmpfs("2g");  // tmpfs reserves nothing up front.
  ASSERT_FALSE(big.empty());
  EXPECT_EQ(CheckShmSize(ReadHostLimits(big), {}).outcome(), v1::CheckResult::PASS);
}

TEST_F(MountTest, AReadOnlyPathFailsTheRoundTrip) {
  const std::string dir = Tmpfs("256k", MS_RDONLY);
  ASSERT_FALSE(dir.empty());
  BoundedRunner runner;
  PathThresholds t;
  t.min_free_bytes = 1;
  const std::vector<v1::CheckResult> r = CheckPath(dir, "pod-0", t, runner);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::PASS) << r[0].reason();
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[1].reason(), HasSubstr("read-only filesystem"));
}

TEST_F(MountTest, AFullPathFailsBothAndLeavesNoProbeFile) {
  const std::string dir = Tmpfs("256k");
  ASSERT_FALSE(dir.empty());
  // Fill it: write until ENOSPC.
  const std::string filler = dir + "/filler";
  const int fd = open(filler.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  const std::string block(4096, 'f');
  while (write(fd, block.data(), block.size()) > 0) {
  }
  close(fd);

  BoundedRunner runner;
  const std::vector<v1::CheckResult> r = CheckPath(dir, "pod-0", {}, runner);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[0].reason(), HasSubstr("0 bytes free of 256 KiB, under 1 GiB"));
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r[1].reason(), HasSubstr("no space left on the filesystem"));
  // Only the filler is left.
  EXPECT_EQ(access((dir + "/filler").c_str(), F_OK), 0);
  int entries = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) entries += e->d_name[0] == '.' ? 0 : 1;
    closedir(d);
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(MountTest, RoomForTheFileButUnderTheThresholdFailsOnlyFreeSpace) {
  const std::string dir = Tmpfs("1m");
  ASSERT_FALSE(dir.empty());
  BoundedRunner runner;
  PathThresholds t;
  t.min_free_bytes = 2 << 20;
  const std::vector<v1::CheckResult> r = CheckPath(dir, "pod-0", t, runner);
  EXPECT_EQ(r[0].outcome(), v1::CheckResult::FAIL);
  EXPECT_EQ(r[0].value(), 1 << 20);
  EXPECT_EQ(r[1].outcome(), v1::CheckResult::PASS) << r[1].reason();
}

}  // namespace
}  // namespace trainlet::preflight

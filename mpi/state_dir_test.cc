#include "mpi/state_dir.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi/formats.h"

namespace trainlet::mpi {
namespace {

using ::testing::HasSubstr;

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/trainlet-state-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    env_ = {{"TMPDIR", tmp_}};
    user_dir_ = absl::StrCat(tmp_, "/trainlet-", geteuid());
  }
  void TearDown() override {
    FILE* pipe = popen(absl::StrCat("rm -rf ", ShellQuote(tmp_)).c_str(), "r");
    if (pipe != nullptr) pclose(pipe);
  }
  mode_t Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  std::string tmp_;
  std::string user_dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(StateDirTest, DefaultPathUnderTmpdirIsPrivate) {
  absl::StatusOr<std::string> dir = PrepareStateDir("", "job-1", "node-0", env_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, absl::StrCat(user_dir_, "/job-1/node-0"));
  EXPECT_EQ(Mode(user_dir_), 0700u);
  EXPECT_EQ(Mode(*dir), 0700u);
  // Again: the same directory, no error.
  EXPECT_EQ(*PrepareStateDir("", "job-1", "node-0", env_), *dir);
}

TEST_F(StateDirTest, TmpdirDefaultsToTmp) {
  const std::string user_dir = absl::StrCat("/tmp/trainlet-", geteuid());
  const bool had_user_dir = access(user_dir.c_str(), F_OK) == 0;
  absl::StatusOr<std::string> dir =
      PrepareStateDir("", "trainlet-state-test", absl::StrCat("n", getpid()), {});
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, absl::StrCat(user_dir, "/trainlet-state-test/n", getpid()));
  rmdir(dir->c_str());
  rmdir(absl::StrCat(user_dir, "/trainlet-state-test").c_str());
  // What this test made, and only that (another user of it may exist).
  if (!had_user_dir) rmdir(user_dir.c_str());
}

TEST_F(StateDirTest, TwoNodesGetTwoDirs) {
  absl::StatusOr<std::string> a = PrepareStateDir("", "job", "pod-a", env_);
  absl::StatusOr<std::string> b = PrepareStateDir("", "job", "pod-b", env_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  struct stat st;
  EXPECT_EQ(stat(a->c_str(), &st), 0);
  EXPECT_EQ(stat(b->c_str(), &st), 0);
}

TEST_F(StateDirTest, SymlinkIsRefused) {
  ASSERT_EQ(mkdir(user_dir_.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(absl::StrCat(tmp_, "/elsewhere").c_str(), 0700), 0);
  ASSERT_EQ(symlink(absl::StrCat(tmp_, "/elsewhere").c_str(), (user_dir_ + "/job").c_str()), 0);
  absl::StatusOr<std::string> dir = PrepareStateDir("", "job", "node", env_);
  ASSERT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition) << dir.status();
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr(user_dir_ + "/job"));
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("symlink"));
}

TEST_F(StateDirTest, FileInTheWayIsRefused) {
  ASSERT_EQ(mkdir(user_dir_.c_str(), 0700), 0);
  FILE* f = fopen((user_dir_ + "/job").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  absl::StatusOr<std::string> dir = PrepareStateDir("", "job", "node", env_);
  ASSERT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition) << dir.status();
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("not a directory"));
}

TEST_F(StateDirTest, DirOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  ASSERT_EQ(mkdir(user_dir_.c_str(), 0700), 0);
  ASSERT_EQ(chown(user_dir_.c_str(), 65534, 65534), 0);
  absl::StatusOr<std::string> dir = PrepareStateDir("", "job", "node", env_);
  ASSERT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition) << dir.status();
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr(user_dir_));
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("owned by uid 65534"));
}

TEST_F(StateDirTest, LooseModeIsTightened) {
  ASSERT_EQ(mkdir(user_dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(user_dir_.c_str(), 0777), 0);
  ASSERT_EQ(mkdir((user_dir_ + "/job").c_str(), 0755), 0);
  absl::StatusOr<std::string> dir = PrepareStateDir("", "job", "node", env_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(Mode(user_dir_), 0700u);
  EXPECT_EQ(Mode(user_dir_ + "/job"), 0700u);
}

TEST_F(StateDirTest, ExplicitDirIsCreatedAndMadePrivate) {
  const std::string wanted = absl::StrCat(tmp_, "/given/state");
  absl::StatusOr<std::string> dir = PrepareStateDir(wanted + "/", "ignored", "ignored", env_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, wanted);
  EXPECT_EQ(Mode(wanted), 0700u);
  EXPECT_EQ(Mode(tmp_ + "/given"), 0700u);
}

TEST_F(StateDirTest, ExplicitSymlinkIsRefused) {
  ASSERT_EQ(mkdir((tmp_ + "/real").c_str(), 0700), 0);
  ASSERT_EQ(symlink((tmp_ + "/real").c_str(), (tmp_ + "/link").c_str()), 0);
  EXPECT_EQ(PrepareStateDir(tmp_ + "/link", "j", "n", env_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A symlinked parent is someone else's business (/var/run -> /run) and is followed.
  absl::StatusOr<std::string> dir = PrepareStateDir(tmp_ + "/link/mine", "j", "n", env_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(Mode(tmp_ + "/real/mine"), 0700u);
}

TEST_F(StateDirTest, ExplicitRelativeDirBecomesAbsolute) {
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(tmp_.c_str()), 0);
  absl::StatusOr<std::string> dir = PrepareStateDir("./rel", "j", "n", env_);
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, tmp_ + "/rel");
}

TEST_F(StateDirTest, UnsafeIdsAndPathsAreRefused) {
  for (const char* bad : {"", ".", "..", "a/b", "a b", "x%h", "it's"}) {
    EXPECT_EQ(PrepareStateDir("", "job", bad, env_).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(PrepareStateDir("", bad, "node", env_).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(PrepareStateDir(tmp_ + "/with space", "j", "n", env_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareStateDir(tmp_ + "/../x", "j", "n", env_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareStateDir("", "j", "n", {{"TMPDIR", "relative"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareStateDir("", "j", "n", {{"TMPDIR", "/my tmp"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainlet::mpi

#include "progress/progress.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

std::string Parent() {
  const char* t = getenv("TEST_TMPDIR");
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

bool Readable(int fd, int millis) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, millis) == 1;
}

TEST(ParseProgressTail, ReadsTheLastCompleteLine) {
  auto line = ParseProgressTail("step=1 loss=2\nstep=2 loss=0.5 lr=1e-4\n", true);
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(line->fields,
              ElementsAre(Pair("step", "2"), Pair("loss", "0.5"), Pair("lr", "1e-4")));
  EXPECT_EQ(line->Text(), "step=2 loss=0.5 lr=1e-4");
  ASSERT_NE(line->Find("loss"), nullptr);
  EXPECT_EQ(*line->Find("loss"), "0.5");
  // A last line still being written is not read; the one before it is.
  line = ParseProgressTail("step=3\nstep=4 lo", true);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->Text(), "step=3");
  // A file of one line without '\n' counts (echo -n, a plain write()).
  EXPECT_EQ(ParseProgressTail("step=5", true)->Text(), "step=5");
  // Read from the middle of a file: the first piece is not a whole line.
  EXPECT_FALSE(ParseProgressTail("=9 tail-of-a-long-line\n", false).has_value());
  EXPECT_EQ(ParseProgressTail("xx\nstep=6\n", false)->Text(), "step=6");
}

TEST(ParseProgressTail, ValidatesAndBoundsTokens) {
  EXPECT_FALSE(ParseProgressTail("", true).has_value());
  EXPECT_FALSE(ParseProgressTail("\n", true).has_value());
  EXPECT_FALSE(ParseProgressTail("hello world\n", true).has_value());
  const std::string long_value(kMaxProgressValueBytes + 1, 'v');
  const std::string long_key(kMaxProgressKeyBytes + 1, 'k');
  auto line = ParseProgressTail(absl::StrCat("step=7 bad\x1b=1 ", long_key, "=1 x=", long_value,
                                             " 9lives=1 ok.key-2=a\x01 v= =v tab\tafter=1\n"),
                                true);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->Text(), "step=7 after=1") << "tabs separate tokens too";
  EXPECT_EQ(line->skipped, 8);
  std::string many;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&many, "k", i, "=", i, " ");
  line = ParseProgressTail(many + "\n", true);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->fields.size(), kMaxProgressFields);
}

class ProgressDirTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ProgressDir::Options o;
    o.parent = Parent();
    o.use_inotify = GetParam();
    auto dir = ProgressDir::Create(o, {});
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
    dir_->Reset(2);
  }
  std::unique_ptr<ProgressDir> dir_;
};

TEST_P(ProgressDirTest, PrivateDirectory_RemovedWithItsFiles) {
  struct stat st;
  ASSERT_EQ(stat(dir_->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  EXPECT_EQ(dir_->fd() >= 0, GetParam());
  Write(dir_->ProgressFile(0), "step=1\n");
  Write(dir_->TracebackFile(0), "");
  const std::string path = dir_->path();
  dir_.reset();
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

TEST_P(ProgressDirTest, ReportsWritesAndTouches_OncePerCollect) {
  EXPECT_TRUE(dir_->Collect().empty());
  Write(dir_->ProgressFile(1), "step=10 loss=0.3\n");
  if (GetParam()) {
    EXPECT_TRUE(Readable(dir_->fd(), 1000));
  }
  std::vector<ProgressUpdate> updates = dir_->Collect();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].local_rank, 1);
  ASSERT_TRUE(updates[0].line.has_value());
  EXPECT_EQ(updates[0].line->Text(), "step=10 loss=0.3");
  EXPECT_TRUE(dir_->Collect().empty()) << "nothing changed since";
  if (GetParam()) {
    EXPECT_FALSE(Readable(dir_->fd(), 0)) << "the fd was drained";
  }

  // A touch (utimes) is progress without a line.
  struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  Write(dir_->ProgressFile(0), "");
  dir_->Collect();
  usleep(2000);  // a later mtime for the stat() fallback
  ASSERT_EQ(utimensat(AT_FDCWD, dir_->ProgressFile(0).c_str(), times, 0), 0);
  updates = dir_->Collect();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].local_rank, 0);
  EXPECT_FALSE(updates[0].line.has_value());

  // Files of other ranks and names are not progress.
  Write(absl::StrCat(dir_->path(), "/progress.7"), "step=1\n");
  Write(absl::StrCat(dir_->path(), "/progress.01"), "step=1\n");
  Write(dir_->TracebackFile(1), "Thread 0x1\n");
  EXPECT_TRUE(dir_->Collect().empty());
}

TEST_P(ProgressDirTest, ResetForgetsTheFilesOfTheLastRound) {
  Write(dir_->ProgressFile(0), "step=1\n");
  Write(dir_->TracebackFile(0), "");
  EXPECT_TRUE(dir_->TracebackOptedIn(0));
  dir_->Reset(2);
  EXPECT_FALSE(dir_->TracebackOptedIn(0));
  EXPECT_TRUE(dir_->Collect().empty());
  EXPECT_EQ(access(dir_->ProgressFile(0).c_str(), F_OK), -1);
}

TEST_P(ProgressDirTest, NeverFollowsSymlinksOrBlocksOnFifos) {
  ASSERT_EQ(symlink("/etc/passwd", dir_->ProgressFile(0).c_str()), 0);
  ASSERT_EQ(mkfifo(dir_->ProgressFile(1).c_str(), 0600), 0);
  for (const ProgressUpdate& u : dir_->Collect()) {
    EXPECT_FALSE(u.line.has_value()) << "rank " << u.local_rank;
  }
  ASSERT_EQ(symlink("/etc/passwd", dir_->TracebackFile(0).c_str()), 0);
  EXPECT_FALSE(dir_->TracebackOptedIn(0));
  EXPECT_EQ(dir_->ReadTraceback(0), "");
}

TEST_P(ProgressDirTest, ReadsOnlyTheEndOfALongFile) {
  std::string text;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, "step=", i, " loss=0.1\n");
  Write(dir_->ProgressFile(0), text);
  std::vector<ProgressUpdate> updates = dir_->Collect();
  ASSERT_EQ(updates.size(), 1u);
  ASSERT_TRUE(updates[0].line.has_value());
  EXPECT_EQ(updates[0].line->Text(), "step=4999 loss=0.1");
  Write(dir_->TracebackFile(0), std::string(kMaxTracebackBytes * 2, 't') + "end");
  const std::string traceback = dir_->ReadTraceback(0);
  EXPECT_EQ(traceback.size(), kMaxTracebackBytes);
  EXPECT_EQ(traceback.substr(traceback.size() - 3), "end");
}

INSTANTIATE_TEST_SUITE_P(InotifyAndStat, ProgressDirTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Inotify" : "Stat"; });

}  // namespace
}  // namespace trainlet::agent

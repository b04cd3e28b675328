#include "common/small_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace trainlet {
namespace {

class SmallFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/small-file-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const char* name : {"/file", "/fifo"}) unlink((dir_ + name).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(SmallFileTest, ReadRegularFile_ReadsUpToMax) {
  std::ofstream(dir_ + "/file") << "plm_rsh_agent = rsh\n";
  EXPECT_EQ(ReadRegularFile(dir_ + "/file", 1024), "plm_rsh_agent = rsh\n");
  EXPECT_EQ(ReadRegularFile(dir_ + "/file", 3), "plm");
  EXPECT_EQ(ReadRegularFile(dir_ + "/missing", 1024), std::nullopt);
}

// A FIFO nobody writes to: nullopt at once, never a wait for a writer.
TEST_F(SmallFileTest, ReadRegularFile_AFifoOrADirectoryIsNotRead) {
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(ReadRegularFile(dir_ + "/fifo", 1024), std::nullopt);
  EXPECT_EQ(ReadRegularFile(dir_, 1024), std::nullopt);
}

}  // namespace
}  // namespace trainlet

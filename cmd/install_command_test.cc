#include "cmd/install_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/exit_codes.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Binary content with a NUL and more than one read buffer's worth.
std::string BinaryContent() {
  std::string s(
      "\x7f"
      "ELF\0\x01",
      6);
  for (int i = 0; i < 200000; ++i) s.push_back(static_cast<char>(i * 31));
  return s;
}

TEST(InstallBinaryTest, CopiesToAFilePathExecutable) {
  testing::TempRoot root;
  const std::string src = root.Write("src/trainlet", BinaryContent());
  mkdir((root.path() + "/vol").c_str(), 0755);
  const mode_t old = umask(077);  // a narrow umask must not narrow the mode
  absl::StatusOr<std::string> got = InstallBinary(src, root.path() + "/vol/bin");
  umask(old);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, root.path() + "/vol/bin");
  EXPECT_EQ(ReadFile(*got), BinaryContent());
  EXPECT_EQ(ModeOf(*got), 0755u);
}

TEST(InstallBinaryTest, DirectoryDestGetsTrainletInside) {
  testing::TempRoot root;
  const std::string src = root.Write("src/x", "binary");
  mkdir((root.path() + "/vol").c_str(), 0755);
  for (const std::string& dest : {root.path() + "/vol", root.path() + "/vol/"}) {
    absl::StatusOr<std::string> got = InstallBinary(src, dest);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, root.path() + "/vol/trainlet");
    EXPECT_EQ(ReadFile(*got), "binary");
  }
}

TEST(InstallBinaryTest, ReplacesAnExistingFileWholeAndLeavesNoTemporary) {
  testing::TempRoot root;
  const std::string src = root.Write("src/x", "new");
  const std::string dest = root.Write("vol/trainlet", "an older, longer binary");
  chmod(dest.c_str(), 0500);
  ASSERT_TRUE(InstallBinary(src, dest).ok());
  EXPECT_EQ(ReadFile(dest), "new");
  EXPECT_EQ(ModeOf(dest), 0755u);
  // Only the target is in the directory: the temporary was renamed.
  EXPECT_EQ(access((dest + ".tmp-" + std::to_string(getpid())).c_str(), F_OK), -1);
}

TEST(InstallBinaryTest, MissingVolumeNamesThePath) {
  testing::TempRoot root;
  const std::string src = root.Write("src/x", "binary");
  absl::StatusOr<std::string> got = InstallBinary(src, root.path() + "/no-such-volume/trainlet");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("no-such-volume/trainlet.tmp-"));
  EXPECT_THAT(got.status().message(), HasSubstr("is the volume mounted"));
}

TEST(InstallBinaryTest, SourceMustBeARegularFile) {
  testing::TempRoot root;
  mkdir((root.path() + "/vol").c_str(), 0755);
  EXPECT_EQ(InstallBinary(root.path() + "/nothing", root.path() + "/vol").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::string> got = InstallBinary(root.path() + "/vol", root.path() + "/vol/t");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(access((root.path() + "/vol/t").c_str(), F_OK), -1);
}

TEST(RunInstallTest, ExitCodesAndOutput) {
  testing::TempRoot root;
  const std::string src = root.Write("src/x", "binary");
  mkdir((root.path() + "/vol").c_str(), 0755);
  std::ostringstream out, err;
  EXPECT_EQ(RunInstall({root.path() + "/vol"}, src, out, err), kExitSuccess);
  EXPECT_THAT(out.str(), HasSubstr("installed " + root.path() + "/vol/trainlet"));
  EXPECT_EQ(RunInstall({}, src, out, err), kExitUsage);
  EXPECT_EQ(RunInstall({"a", "b"}, src, out, err), kExitUsage);
  EXPECT_EQ(RunInstall({"--force"}, src, out, err), kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("expected one argument, DEST"));
  std::ostringstream err2;
  EXPECT_EQ(RunInstall({root.path() + "/missing/t"}, src, out, err2), kExitOsError);
  EXPECT_THAT(err2.str(), HasSubstr("trainlet install: cannot create"));
  std::ostringstream help;
  EXPECT_EQ(RunInstall({"--help"}, src, help, err), kExitSuccess);
  EXPECT_THAT(help.str(), HasSubstr("Usage: trainlet install DEST"));
}

}  // namespace
}  // namespace trainlet::agent

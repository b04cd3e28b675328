#include "rendezvous/token.h"

#include <string>

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

TEST(ConstantTimeEquals, ComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret2", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ReadBoundedFile, ReadsUpToTheBound_NamesTheFileOtherwise) {
  trainlet::testing::TempRoot root;
  const std::string exact = root.Write("exact", std::string(100, 'a'));
  auto read = ReadBoundedFile(exact, 100, "--token-file", "token file");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, std::string(100, 'a'));

  const std::string big = root.Write("big", std::string(101, 'a'));
  read = ReadBoundedFile(big, 100, "--token-file", "token file");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(),
              HasSubstr("--token-file: token file " + big + " is larger than 100 bytes"));

  read = ReadBoundedFile(root.path() + "/missing", 100, "--tls-ca");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(),
              HasSubstr("--tls-ca: cannot read " + root.path() + "/missing: No such file"));

  // A device that never ends is read one buffer past the bound, no more.
  read = ReadBoundedFile("/dev/zero", 1 << 20, "--token-file", "token file");
  EXPECT_THAT(read.status().message(), HasSubstr("is larger than 1048576 bytes"));
}

}  // namespace
}  // namespace trainlet::rendezvous

#include "mpi/keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi/formats.h"
#include "mpi/hosts.h"
#include "mpi/testing/test_util.h"

namespace trainlet::mpi {
namespace {

using ::trainlet::mpi::testing::ExpectGolden;
using ::trainlet::mpi::testing::RunShell;

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The "<type> <base64>" of an OpenSSH .pub line (drops the comment).
std::string TypeAndBase64(const std::string& pub) {
  const size_t first = pub.find(' ');
  const size_t second = pub.find_first_of(" \n", first + 1);
  return pub.substr(0, second);
}

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/trainlet-keys-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string ignored;
    RunShell(absl::StrCat("rm -rf ", ShellQuote(dir_)), &ignored);
  }
  std::string File(const std::string& name) const { return absl::StrCat(dir_, "/", name); }
  // ssh-keygen's key of `type_args` as dir_/name (and name.pub); its public line.
  std::string KeyGen(const std::string& name, const std::string& type_args) {
    std::string output;
    EXPECT_EQ(RunShell(absl::StrCat("ssh-keygen -q ", type_args, " -N '' -C test -f ",
                                    ShellQuote(File(name))),
                       &output),
              0)
        << output;
    return TypeAndBase64(ReadFile(File(name + ".pub")));
  }
  bool HaveKeygen() { return access("/usr/bin/ssh-keygen", X_OK) == 0; }

  std::string dir_;
};

TEST_F(KeysTest, GeneratedKeyIsAcceptedByOpenSsh) {
  absl::StatusOr<KeyPair> pair = GenerateEd25519();
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_THAT(pair->public_line, StartsWith("ssh-ed25519 AAAA"));
  EXPECT_TRUE(IsValidPublicKeyLine(pair->public_line)) << pair->public_line;
  EXPECT_THAT(pair->private_pem, StartsWith("-----BEGIN OPENSSH PRIVATE KEY-----"));
  EXPECT_EQ(*PublicLineOf(pair->private_pem), pair->public_line);

  if (!HaveKeygen()) GTEST_SKIP() << "no ssh-keygen";
  ASSERT_TRUE(WriteFileAtomically(File("id"), pair->private_pem, 0600).ok());
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat("ssh-keygen -y -f ", ShellQuote(File("id"))), &output), 0)
      << output;
  EXPECT_EQ(TypeAndBase64(output), pair->public_line);
  EXPECT_NE(GenerateEd25519()->public_line, pair->public_line);
}

TEST_F(KeysTest, MountedPrivateKeyOfAnyModeAndOwner) {
  if (!HaveKeygen()) GTEST_SKIP() << "no ssh-keygen";
  const std::string expected = KeyGen("ssh-privatekey", "-t ed25519");
  ASSERT_EQ(chmod(File("ssh-privatekey").c_str(), 0644), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(File("ssh-privatekey").c_str(), 65534, 65534), 0);
  }
  // A .pub that disagrees is ignored.
  std::ofstream(File("ssh-publickey"))
      << "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPDfVOErM2gZofCvvxaPGM5kgVfCuOHzoGE5cueIt82t x\n";
  KeyGen("id_rsa", "-t rsa -b 2048");  // present but later in the order
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->public_line, expected);
  EXPECT_EQ(pair->private_pem, ReadFile(File("ssh-privatekey")));
}

TEST_F(KeysTest, MountedEcdsaP521Pem) {
  if (!HaveKeygen()) GTEST_SKIP() << "no ssh-keygen";
  const std::string expected = KeyGen("id_ecdsa", "-t ecdsa -b 521 -m PEM");
  ASSERT_THAT(ReadFile(File("id_ecdsa")), StartsWith("-----BEGIN EC PRIVATE KEY-----"));
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->public_line, expected);
  EXPECT_THAT(expected, StartsWith("ecdsa-sha2-nistp521 "));
}

TEST_F(KeysTest, MountedRsaThroughASymlinkAsInASecretVolume) {
  if (!HaveKeygen()) GTEST_SKIP() << "no ssh-keygen";
  ASSERT_EQ(mkdir(File("..data").c_str(), 0755), 0);
  const std::string expected = KeyGen("..data/id_rsa", "-t rsa -b 2048 -m PEM");
  ASSERT_EQ(symlink("..data/id_rsa", File("id_rsa").c_str()), 0);
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->public_line, expected);
  EXPECT_THAT(expected, StartsWith("ssh-rsa "));
}

TEST_F(KeysTest, GarbageIsRefusedNamingTheFile) {
  std::ofstream(File("id_ed25519")) << "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n";
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  ASSERT_EQ(pair.status().code(), absl::StatusCode::kFailedPrecondition) << pair.status();
  EXPECT_THAT(std::string(pair.status().message()), HasSubstr(File("id_ed25519")));
}

TEST_F(KeysTest, EncryptedKeyIsRefusedWithoutPrompting) {
  if (!HaveKeygen()) GTEST_SKIP() << "no ssh-keygen";
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat("ssh-keygen -q -t ecdsa -m PEM -N secret -f ",
                                  ShellQuote(File("id_ecdsa")), " </dev/null"),
                     &output),
            0)
      << output;
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kFailedPrecondition) << pair.status();
}

TEST_F(KeysTest, PublicKeyOrDirectoryOrHugeFileIsRefused) {
  std::ofstream(File("ssh-privatekey"))
      << "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPDfVOErM2gZofCvvxaPGM5kgVfCuOHzoGE5cueIt82t\n";
  EXPECT_EQ(LoadMountedKey(dir_).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(unlink(File("ssh-privatekey").c_str()), 0);

  ASSERT_EQ(mkdir(File("id_ed25519").c_str(), 0700), 0);
  absl::StatusOr<KeyPair> pair = LoadMountedKey(dir_);
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pair.status().message()), HasSubstr("not a regular file"));
  ASSERT_EQ(rmdir(File("id_ed25519").c_str()), 0);

  std::ofstream(File("id_rsa")) << std::string(kMaxPrivateKeyFile + 1, 'A');
  pair = LoadMountedKey(dir_);
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pair.status().message()), HasSubstr("over the limit"));
}

TEST_F(KeysTest, UnreadableKeyIsRefused) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  std::ofstream(File("id_rsa")) << "x";
  ASSERT_EQ(chmod(File("id_rsa").c_str(), 0), 0);
  EXPECT_EQ(LoadMountedKey(dir_).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(KeysTest, EmptyDirIsNotFound) {
  EXPECT_EQ(LoadMountedKey(dir_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadMountedKey(File("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KeysTest, PublicLineOfRefusesNonKeys) {
  EXPECT_FALSE(PublicLineOf("").ok());
  EXPECT_FALSE(PublicLineOf("hello").ok());
  EXPECT_FALSE(PublicLineOf(std::string("-----BEGIN\0", 11)).ok());
}

TEST_F(KeysTest, WriteFileAtomicallyHasTheModeWhateverTheUmask) {
  const mode_t old = umask(0);
  absl::Status written = WriteFileAtomically(File("key"), "secret\n", 0600);
  absl::Status script = WriteFileAtomically(File("run.sh"), "#!/bin/sh\n", 0755);
  umask(0077);
  absl::Status public_file = WriteFileAtomically(File("hostfile"), "h slots=1\n", 0644);
  umask(old);
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(script.ok()) << script;
  ASSERT_TRUE(public_file.ok()) << public_file;
  struct stat st;
  ASSERT_EQ(stat(File("key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(stat(File("run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(File("hostfile").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(ReadFile(File("key")), "secret\n");
}

TEST_F(KeysTest, WriteFileAtomicallyReplacesAndLeavesNoTempFiles) {
  ASSERT_TRUE(WriteFileAtomically(File("f"), "one", 0600).ok());
  ASSERT_TRUE(WriteFileAtomically(File("f"), "two", 0600).ok());
  EXPECT_EQ(ReadFile(File("f")), "two");
  std::string listing;
  ASSERT_EQ(RunShell(absl::StrCat("ls -A ", ShellQuote(dir_)), &listing), 0);
  EXPECT_EQ(listing, "f\n");
  absl::Status status = WriteFileAtomically(File("missing/f"), "x", 0600);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(File("missing/f")));
}

}  // namespace
}  // namespace trainlet::mpi

#include "launcher/termination_log.h"

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::launcher {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(TerminationMessage, CodeNodeAndReasonOnOneLine) {
  EXPECT_EQ(TerminationMessage(75, "pod-0",
                               "job failed: worker local rank 1 (global rank 3) on node pod-1 "
                               "exited with code 3"),
            "exit code 75 on node pod-0: job failed: worker local rank 1 (global rank 3) on node "
            "pod-1 exited with code 3\n");
  EXPECT_EQ(TerminationMessage(64, "", "--nnodes: expected N"),
            "exit code 64: --nnodes: expected N\n");
  EXPECT_EQ(TerminationMessage(0, "n", ""), "exit code 0 on node n\n");
}

TEST(TerminationMessage, ASignalCodeWithoutAReasonNamesTheSignal) {
  EXPECT_THAT(TerminationMessage(143, "n", ""),
              StartsWith("exit code 143 on node n: stopped by signal 15 ("));
}

TEST(TerminationMessage, ControlBytesAreEscapedSoItStaysOneLine) {
  const std::string m = TerminationMessage(127, "n\x01", "not found: \"a\nb\tc\x7f\"\r");
  EXPECT_EQ(m, "exit code 127 on node n\\x01: not found: \"a\\nb\\tc\\x7f\"\\r\n");
  EXPECT_EQ(m.find('\n'), m.size() - 1);
}

TEST(TerminationMessage, BoundedToWhatTheKubeletKeeps) {
  const std::string reason(10000, 'x');
  const std::string m = TerminationMessage(1, "node-0", reason);
  EXPECT_EQ(m.size(), kMaxTerminationMessageBytes);
  EXPECT_THAT(m, StartsWith("exit code 1 on node node-0: xxx"));
  EXPECT_THAT(m, EndsWith(" bytes)\n"));  // says how much was cut
  // Escapes count: a reason of control bytes (4 bytes each once escaped).
  const std::string controls(5000, '\x02');
  const std::string c = TerminationMessage(1, "node-0", controls);
  EXPECT_LE(c.size(), kMaxTerminationMessageBytes);
  EXPECT_GT(c.size(), kMaxTerminationMessageBytes - 8);
  EXPECT_THAT(c, Not(HasSubstr("\\x0\n")));  // no escape cut in half
  EXPECT_EQ(c.find('\n'), c.size() - 1);
  // Any bound holds, however small.
  for (size_t max : {1u, 2u, 10u, 30u, 100u}) {
    EXPECT_LE(TerminationMessage(75, "a-long-node-name", reason, max).size(), max) << max;
  }
}

TEST(TerminationLog, WritesTheMessageOverAnEmptyFile) {
  trainlet::testing::TempRoot root;
  const std::string path = root.Write("termination-log", "");
  TerminationLog log(path, /*create=*/false);
  ASSERT_TRUE(log.Write("exit code 3 on node n1: x\n").ok());
  EXPECT_EQ(testing::ReadFile(path), "exit code 3 on node n1: x\n");
}

TEST(TerminationLog, ReplacesAStaleMessageThatNobodyWroteDuringTheRun) {
  trainlet::testing::TempRoot root;
  const std::string path = root.Write("termination-log", "an older run's longer message\n");
  TerminationLog log(path, /*create=*/true);
  ASSERT_TRUE(log.Write("exit code 0\n").ok());
  EXPECT_EQ(testing::ReadFile(path), "exit code 0\n");
}

TEST(TerminationLog, KeepsAFileLargerThanAMessageCanBe) {
  // TRAINLET_TERMINATION_LOG naming a file that is not a termination
  // message (a training log, through a symlink say): no message is ever
  // above 4096 bytes, so that file is somebody's data, kept whole.
  trainlet::testing::TempRoot root;
  const std::string data = std::string(kMaxTerminationMessageBytes, 'd') + "\n";
  const std::string path = root.Write("train.log", data);
  const std::string link = root.path() + "/msg";
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  TerminationLog log(link, /*create=*/true);
  const absl::Status s = log.Write("exit code 1\n");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(link));
  EXPECT_THAT(s.message(), HasSubstr("4097 bytes"));
  EXPECT_EQ(testing::ReadFile(path), data);
}

TEST(TerminationLog, KeepsAMessageAWorkerWroteDuringTheRun) {
  trainlet::testing::TempRoot root;
  const std::string path = root.Write("termination-log", "");
  TerminationLog log(path, /*create=*/false);
  root.Write("termination-log", "loss diverged at step 1200\n");  // the worker's own
  const absl::Status s = log.Write("exit code 1\n");
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(testing::ReadFile(path), "loss diverged at step 1200\n");
}

TEST(TerminationLog, TheDefaultFileIsNeverCreated) {
  trainlet::testing::TempRoot root;
  const std::string path = root.path() + "/termination-log";
  TerminationLog log(path, /*create=*/false);
  EXPECT_TRUE(absl::IsNotFound(log.Write("exit code 0\n")));
  EXPECT_FALSE(Exists(path));
}

TEST(TerminationLog, ANamedFileIsCreated) {
  trainlet::testing::TempRoot root;
  const std::string path = root.path() + "/msg";
  TerminationLog log(path, /*create=*/true);
  ASSERT_TRUE(log.Write("exit code 0\n").ok());
  EXPECT_EQ(testing::ReadFile(path), "exit code 0\n");
}

TEST(TerminationLog, NotWritableIsAnErrorAndWritesNothing) {
  trainlet::testing::TempRoot root;
  // A directory, and a path under a missing directory: neither can be
  // written (root ignores file modes, so modes cannot show it here).
  EXPECT_FALSE(TerminationLog(root.path(), /*create=*/true).Write("exit code 1\n").ok());
  const std::string missing = root.path() + "/no/such/dir/msg";
  EXPECT_TRUE(absl::IsNotFound(TerminationLog(missing, /*create=*/true).Write("x\n")));
  EXPECT_FALSE(Exists(missing));
}

TEST(TerminationLog, NeverBlocksOnAFifo) {
  trainlet::testing::TempRoot root;
  const std::string path = root.path() + "/fifo";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  // Never opened (no wait for a reader; a device is never opened either),
  // and the message says what it is.
  const absl::Status s = TerminationLog(path, /*create=*/false).Write("exit code 1\n");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path + " is not a regular file (a FIFO)"));
  const absl::Status d = TerminationLog(root.path(), /*create=*/true).Write("exit code 1\n");
  EXPECT_THAT(d.message(), HasSubstr("is not a regular file (a directory)"));
}

TEST(TerminationLog, OffWithNone) {
  TerminationLog log("none", /*create=*/true);
  EXPECT_TRUE(log.path().empty());
  EXPECT_TRUE(log.Write("x\n").ok());
}

TEST(TerminationLog, FromEnvNamedOrDefault) {
  EXPECT_EQ(TerminationLog::FromEnv({}).path(), kDefaultTerminationLog);
  EXPECT_FALSE(TerminationLog::FromEnv({}).explicit_path());
  EXPECT_EQ(TerminationLog::FromEnv({{kTerminationLogVariable, ""}}).path(),
            kDefaultTerminationLog);
  const TerminationLog named = TerminationLog::FromEnv({{kTerminationLogVariable, "/x/msg"}});
  EXPECT_EQ(named.path(), "/x/msg");
  EXPECT_TRUE(named.explicit_path());
}

TEST(TerminationReason, IsKeptBounded) {
  SetTerminationReason(std::string(10000, 'r'));
  EXPECT_EQ(TerminationReason().size(), kMaxTerminationMessageBytes);
  SetTerminationReason("job finished");
  EXPECT_EQ(TerminationReason(), "job finished");
  SetTerminationReason("");
}

}  // namespace
}  // namespace trainlet::launcher

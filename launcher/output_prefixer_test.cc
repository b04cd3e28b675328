#include "launcher/output_prefixer.h"

#include <signal.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

namespace trainlet {
namespace launcher {
namespace {

using testing::CaptureFd;

TEST(OutputPrefixer, CompleteLines_ArePrefixed) {
  CaptureFd out;
  OutputPrefixer prefixer("[rank 3] ", out.fd());
  prefixer.Append("hello\nworld\n\n");
  EXPECT_EQ(out.Contents(), "[rank 3] hello\n[rank 3] world\n[rank 3] \n");
  EXPECT_EQ(prefixer.buffered_bytes(), 0u);
}

TEST(OutputPrefixer, PartialLine_IsHeldUntilNewline) {
  CaptureFd out;
  OutputPrefixer prefixer("[rank 0] ", out.fd());
  prefixer.Append("hel");
  EXPECT_EQ(out.Contents(), "");
  prefixer.Append("lo\nwor");
  EXPECT_EQ(out.Contents(), "[rank 0] hello\n");
  prefixer.Append("ld\n");
  EXPECT_EQ(out.Contents(), "[rank 0] hello\n[rank 0] world\n");
}

TEST(OutputPrefixer, Finish_FlushesPartialLineWithNewline) {
  CaptureFd out;
  OutputPrefixer prefixer("[rank 1] ", out.fd());
  prefixer.Append("a\nno newline");
  prefixer.Finish();
  EXPECT_EQ(out.Contents(), "[rank 1] a\n[rank 1] no newline\n");
  prefixer.Finish();  // nothing buffered: writes nothing
  EXPECT_EQ(out.Contents(), "[rank 1] a\n[rank 1] no newline\n");
}

TEST(OutputPrefixer, OverlongLine_IsCutAtCap) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  CaptureFd out;
  OutputPrefixer prefixer("> ", out.fd());
  // Arrives in pieces, never with a newline: buffered bytes stay capped.
  std::string chunk(cap / 2 + 1, 'x');
  prefixer.Append(chunk);
  prefixer.Append(chunk);
  EXPECT_LE(prefixer.buffered_bytes(), cap);
  prefixer.Append("y\n");
  EXPECT_EQ(out.Contents(), "> " + std::string(cap, 'x') + "\n> " +
                                std::string(2 * chunk.size() - cap, 'x') + "y\n");
}

TEST(OutputPrefixer, LineOfExactlyCap_IsNotSplit) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  CaptureFd out;
  OutputPrefixer prefixer("> ", out.fd());
  prefixer.Append(std::string(cap, 'z'));
  prefixer.Append("\nnext\n");
  EXPECT_EQ(out.Contents(), "> " + std::string(cap, 'z') + "\n> next\n");
}

TEST(OutputPrefixer, HugeLineInOneAppend_IsCutIntoCapSizedLines) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  CaptureFd out;
  OutputPrefixer prefixer("", out.fd());
  prefixer.Append(std::string(2 * cap + 5, 'q') + "\n");
  EXPECT_EQ(out.Contents(), std::string(cap, 'q') + "\n" + std::string(cap, 'q') + "\n" +
                                std::string(5, 'q') + "\n");
}

TEST(WriteFully, BrokenPipe_ReturnsFalseInsteadOfDying) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  // SIGPIPE is ignored by PrepareProcessForSupervision in the agent; here we
  // ignore it for this check only if nobody did.
  struct sigaction old_action, ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_action);
  EXPECT_FALSE(WriteFully(fds[1], "data"));
  sigaction(SIGPIPE, &old_action, nullptr);
  close(fds[1]);
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

#include "launcher/output_prefixer.h"

#include <string>

#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

namespace trainlet {
namespace launcher {
namespace {

using testing::CaptureFd;

// Captures what an OutputWriter writes; Contents() waits until it is written.
class Sink {
 public:
  Sink() : writer_(capture_.fd(), OutputWriter::Options()) {}
  OutputWriter* writer() { return &writer_; }
  std::string Contents() {
    EXPECT_TRUE(writer_.Flush(absl::Seconds(10)));
    return capture_.Contents();
  }

 private:
  CaptureFd capture_;
  OutputWriter writer_;
};

TEST(OutputPrefixer, CompleteLines_ArePrefixed) {
  Sink out;
  OutputPrefixer prefixer("[rank 3] ", out.writer());
  prefixer.Append("hello\nworld\n\n");
  EXPECT_EQ(out.Contents(), "[rank 3] hello\n[rank 3] world\n[rank 3] \n");
  EXPECT_EQ(prefixer.buffered_bytes(), 0u);
}

TEST(OutputPrefixer, PartialLine_IsHeldUntilNewline) {
  Sink out;
  OutputPrefixer prefixer("[rank 0] ", out.writer());
  prefixer.Append("hel");
  EXPECT_EQ(out.Contents(), "");
  prefixer.Append("lo\nwor");
  EXPECT_EQ(out.Contents(), "[rank 0] hello\n");
  prefixer.Append("ld\n");
  EXPECT_EQ(out.Contents(), "[rank 0] hello\n[rank 0] world\n");
}

TEST(OutputPrefixer, Finish_FlushesPartialLineWithNewline) {
  Sink out;
  OutputPrefixer prefixer("[rank 1] ", out.writer());
  prefixer.Append("a\nno newline");
  prefixer.Finish();
  EXPECT_EQ(out.Contents(), "[rank 1] a\n[rank 1] no newline\n");
  prefixer.Finish();  // nothing buffered: writes nothing
  EXPECT_EQ(out.Contents(), "[rank 1] a\n[rank 1] no newline\n");
}

TEST(OutputPrefixer, OverlongLine_IsCutAtCap) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  Sink out;
  OutputPrefixer prefixer("> ", out.writer());
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
  Sink out;
  OutputPrefixer prefixer("> ", out.writer());
  prefixer.Append(std::string(cap, 'z'));
  prefixer.Append("\nnext\n");
  EXPECT_EQ(out.Contents(), "> " + std::string(cap, 'z') + "\n> next\n");
}

TEST(OutputPrefixer, HugeLineInOneAppend_IsCutIntoCapSizedLines) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  Sink out;
  OutputPrefixer prefixer(">", out.writer());
  prefixer.Append(std::string(2 * cap + 5, 'q') + "\n");
  EXPECT_EQ(out.Contents(), ">" + std::string(cap, 'q') + "\n>" + std::string(cap, 'q') + "\n>" +
                                std::string(5, 'q') + "\n");
}

// OutputMode::kRelay: no prefix, and the bytes as they came.
TEST(OutputPrefixer, Unchanged_HoldsAPartialLineUntilFlush_AndAddsNothing) {
  Sink out;
  OutputPrefixer relay("", out.writer());
  relay.Append("a\r b\n\nc");
  EXPECT_EQ(out.Contents(), "a\r b\n\n");  // whole lines at once
  EXPECT_EQ(relay.buffered_bytes(), 1u);
  relay.Append("\r 50%");
  relay.Flush();  // the pipe is empty: the redrawn bar goes out as it is
  EXPECT_EQ(out.Contents(), "a\r b\n\nc\r 50%");
  EXPECT_EQ(relay.buffered_bytes(), 0u);
  relay.Append("\r100%\nend");
  relay.Finish();  // the end: no newline added
  EXPECT_EQ(out.Contents(), "a\r b\n\nc\r 50%\r100%\nend");
  relay.Finish();
  relay.Flush();
  EXPECT_EQ(out.Contents(), "a\r b\n\nc\r 50%\r100%\nend");
}

TEST(OutputPrefixer, Unchanged_LongLinesPassWhole_APartialOneIsBoundedWithoutANewline) {
  const size_t cap = OutputPrefixer::kMaxLineBytes;
  Sink out;
  OutputPrefixer relay("", out.writer());
  const std::string whole = std::string(2 * cap + 5, 'q') + "\n";
  relay.Append(whole);
  EXPECT_EQ(out.Contents(), whole);
  // Never a newline: held up to the bound, then handed on as it is.
  std::string chunk(cap / 2 + 1, 'x');
  relay.Append(chunk);
  relay.Append(chunk);
  EXPECT_LE(relay.buffered_bytes(), cap);
  relay.Append("y\n");
  EXPECT_EQ(out.Contents(), whole + chunk + chunk + "y\n");
}

// With a prefix every line written ends in one: Flush() holds the partial.
TEST(OutputPrefixer, Prefixed_FlushKeepsThePartialLine) {
  Sink out;
  OutputPrefixer prefixer("[rank 2] ", out.writer());
  prefixer.Append("a\nb");
  prefixer.Flush();
  EXPECT_EQ(out.Contents(), "[rank 2] a\n");
  prefixer.Append("c\n");
  EXPECT_EQ(out.Contents(), "[rank 2] a\n[rank 2] bc\n");
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

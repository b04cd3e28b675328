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
  OutputPrefixer prefixer("", out.writer());
  prefixer.Append(std::string(2 * cap + 5, 'q') + "\n");
  EXPECT_EQ(out.Contents(), std::string(cap, 'q') + "\n" + std::string(cap, 'q') + "\n" +
                                std::string(5, 'q') + "\n");
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

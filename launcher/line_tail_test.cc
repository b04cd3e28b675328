#include "launcher/line_tail.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::launcher {
namespace {

using ::testing::ElementsAre;

TEST(LineTail, KeepsWholeLinesAcrossReads_AndPartialsPerStream) {
  LineTail tail;
  tail.Append(0, "one\ntw");
  tail.Append(1, "err");
  tail.Append(0, "o\nthr");
  EXPECT_THAT(tail.Lines(), ElementsAre("one", "two", "thr", "err"));
  tail.Append(1, " line\n");
  EXPECT_THAT(tail.Lines(), ElementsAre("one", "two", "err line", "thr"));
}

TEST(LineTail, IsBoundedInLinesAndBytes) {
  LineTail tail;
  for (size_t i = 0; i < LineTail::kMaxLines + 10; ++i) {
    tail.Append(0, std::to_string(i) + "\n");
  }
  std::vector<std::string> lines = tail.Lines();
  ASSERT_EQ(lines.size(), LineTail::kMaxLines);
  EXPECT_EQ(lines.front(), "10");
  EXPECT_EQ(lines.back(), std::to_string(LineTail::kMaxLines + 9));

  LineTail long_line;
  long_line.Append(0, std::string(LineTail::kMaxLineBytes * 3, 'x'));
  long_line.Append(0, std::string(100, 'y') + "\nnext\n");
  lines = long_line.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(LineTail::kMaxLineBytes, 'x') + "...");
  EXPECT_EQ(lines[1], "next");
}

}  // namespace
}  // namespace trainlet::launcher

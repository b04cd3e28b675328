#include "common/code_pages.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace trainlet {
namespace {

// This process's file-backed resident set (RssFile, kB).
long RssFileKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

int Fibonacci(int n) { return n < 2 ? n : Fibonacci(n - 1) + Fibonacci(n - 2); }

TEST(DropCodePages, UnmapsTheTextAndCodeStillRuns) {
  ASSERT_EQ(Fibonacci(10), 55);  // the test's own text is resident
  const long before = RssFileKb();
  ASSERT_GT(before, 0);
  ASSERT_TRUE(DropCodePages().ok());
  const long after = RssFileKb();
  // The test binary's text pages went (the shared libraries' stayed); the
  // ones this code runs come back at once.
  EXPECT_LT(after, before);
  EXPECT_EQ(Fibonacci(12), 144);
  EXPECT_TRUE(DropCodePages().ok());  // again: harmless
}

}  // namespace
}  // namespace trainlet

#include "common/natural_order.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet {
namespace {

TEST(NaturalLess, DigitRunsCompareAsNumbers) {
  std::vector<std::string> names = {"job-node-0-10", "job-node-0-2", "job-node-0-1",
                                    "job-node-0-0"};
  std::sort(names.begin(), names.end(), NaturalLess);
  EXPECT_THAT(names, ::testing::ElementsAre("job-node-0-0", "job-node-0-1", "job-node-0-2",
                                            "job-node-0-10"));
}

TEST(NaturalLess, IsAStrictOrder) {
  EXPECT_FALSE(NaturalLess("a1", "a1"));
  EXPECT_TRUE(NaturalLess("a1", "a01") != NaturalLess("a01", "a1"));
  EXPECT_TRUE(NaturalLess("a", "a0"));
  EXPECT_FALSE(NaturalLess("a0", "a"));
  EXPECT_TRUE(NaturalLess("a9", "b1"));
}

}  // namespace
}  // namespace trainlet

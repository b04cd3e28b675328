#include "rendezvous/rank_assignment.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {
using ::testing::ElementsAre;

TEST(AssignRanks, Static_HintsHonoured) {
  EXPECT_THAT(AssignRanks({{"c", 2}, {"a", 0}, {"b", 1}}, true), ElementsAre(2, 0, 1));
}

TEST(AssignRanks, Static_UnhintedFillGapsInNaturalOrder) {
  EXPECT_THAT(AssignRanks({{"n-10", -1}, {"n-2", -1}, {"x", 0}, {"n-3", 3}}, true),
              ElementsAre(2, 1, 0, 3));
}

TEST(AssignRanks, NoHints_NaturalOrderOfNodeIds) {
  EXPECT_THAT(AssignRanks({{"job-0-10"}, {"job-0-9"}, {"job-0-0"}}, false), ElementsAre(2, 1, 0));
}

TEST(AssignRanks, Elastic_SurvivorsKeepRelativeOrderNewcomersLast) {
  // Previous ranks 0, 2, 3 survive (1 was lost); a newcomer with hint 1 joins.
  EXPECT_THAT(AssignRanks({{"d", 3, 3}, {"new", 1, -1}, {"a", 0, 0}, {"c", 2, 2}}, false),
              ElementsAre(2, 3, 0, 1));
}

}  // namespace
}  // namespace trainlet::rendezvous

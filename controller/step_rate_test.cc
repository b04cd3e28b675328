#include "controller/step_rate.h"

#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

TEST(StepRateTracker, FirstLineIsUnknownThenStepsOverTime) {
  StepRateTracker t;
  EXPECT_EQ(t.Update("n", 100, 10'000), -1);
  EXPECT_DOUBLE_EQ(t.Update("n", 150, 20'000), 5.0);
  // The same line again (no new progress): the last rate stays.
  EXPECT_DOUBLE_EQ(t.Update("n", 150, 20'000), 5.0);
  EXPECT_DOUBLE_EQ(t.Update("n", 170, 30'000), 2.0);
}

TEST(StepRateTracker, StepBack_StartsOver) {
  StepRateTracker t;
  t.Update("n", 100, 10'000);
  t.Update("n", 200, 20'000);
  EXPECT_EQ(t.Update("n", 50, 30'000), -1);
  EXPECT_DOUBLE_EQ(t.Update("n", 60, 40'000), 1.0);
}

TEST(StepRateTracker, NodesAreApartAndBounded) {
  StepRateTracker t(2);
  t.Update("a", 0, 0);
  t.Update("b", 0, 0);
  EXPECT_DOUBLE_EQ(t.Update("a", 10, 1000), 10.0);
  t.Update("c", 0, 0);  // drops b, the least recently updated.
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Update("b", 5, 2000), -1);  // b starts over (and drops a or c).
  t.Forget("b");
  EXPECT_EQ(t.size(), 1u);
}

TEST(StepRateTracker, NoStep_IsUnknown) {
  StepRateTracker t;
  t.Update("n", 10, 0);
  EXPECT_EQ(t.Update("n", -1, 1000), -1);
}

}  // namespace
}  // namespace trainlet::controller

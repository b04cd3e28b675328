#include "common/descriptors.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet {
namespace {

using ::testing::HasSubstr;

TEST(Descriptors, NeedsGrowWithNodesAndWorkers) {
  EXPECT_EQ(DescriptorsForCoordinator(2), kBaseDescriptors + 2);
  EXPECT_EQ(DescriptorsForAgent(8, 0), kBaseDescriptors + 8 * kDescriptorsPerWorker);
  EXPECT_EQ(DescriptorsForAgent(1, 1000), kBaseDescriptors + kDescriptorsPerWorker + 1000);
}

// Each case runs in a forked child (a death test), so lowering the limit
// cannot starve the test binary itself.
void RaiseThenRestore() {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 64) _exit(0);  // nothing to test under such a hard limit.
  rl.rlim_cur = 40;
  setrlimit(RLIMIT_NOFILE, &rl);
  const int raised = RaiseDescriptorLimit();
  getrlimit(RLIMIT_NOFILE, &rl);
  const bool ok =
      raised > 40 && static_cast<rlim_t>(raised) == rl.rlim_cur && OriginalDescriptorLimit() == 40;
  RestoreDescriptorLimitInChild();
  getrlimit(RLIMIT_NOFILE, &rl);
  _exit(ok && rl.rlim_cur == 40 ? 0 : 1);
}

TEST(DescriptorsDeathTest, RaisesTheSoftLimitToTheHardOneAndRestoresItForChildren) {
  EXPECT_EXIT(RaiseThenRestore(), ::testing::ExitedWithCode(0), "");
}

void CheckUnderHardLimit12() {
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = 12;
  setrlimit(RLIMIT_NOFILE, &rl);
  absl::Status s = CheckDescriptorBudget(34, "32 for itself, 1 per node");
  const std::string m(s.message());
  const bool ok = absl::IsResourceExhausted(s) && m.find("limit is 12") != m.npos &&
                  m.find("34 are needed (32 for itself, 1 per node)") != m.npos &&
                  m.find("ulimit -n 34") != m.npos;
  if (!ok) fprintf(stderr, "unexpected: %s\n", s.ToString().c_str());
  _exit(ok ? 0 : 1);
}

TEST(DescriptorsDeathTest, TooLowHardLimitIsAClearError) {
  EXPECT_EXIT(CheckUnderHardLimit12(), ::testing::ExitedWithCode(0), "");
}

TEST(Descriptors, EnoughIsOk) { EXPECT_TRUE(CheckDescriptorBudget(8).ok()); }

}  // namespace
}  // namespace trainlet

#include "preflight/host_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {
namespace host_checks_test {

using ::testing::HasSubstr;

TEST(CheckShmSize, SmallShmFailsWithTheFix) {
  v1::NodeProbe probe;
  probe.set_shm_bytes(64u << 20);  // Docker's default.
  const v1::CheckResult r = CheckShmSize(probe, {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("/dev/shm is 64 MiB, under 1 GiB"));
  EXPECT_THAT(r.reason(), HasSubstr("medium: Memory"));
  EXPECT_EQ(r.value(), 64u << 20);
  EXPECT_EQ(r.threshold(), 1u << 30);
}

TEST(CheckShmSize, LargeEnoughPassesAndUnknownIsSkipped) {
  v1::NodeProbe probe;
  probe.set_shm_bytes(8ull << 30);
  EXPECT_EQ(CheckShmSize(probe, {}).outcome(), v1::CheckResult::PASS);
  probe.set_shm_bytes(0);
  EXPECT_EQ(CheckShmSize(probe, {}).outcome(), v1::CheckResult::SKIPPED);
}

v1::NodeProbe RdmaNode(int64_t memlock) {
  v1::NodeProbe probe;
  probe.set_memlock_bytes(memlock);
  v1::Nic* nic = probe.add_nics();
  nic->set_name("mlx5_0");
  nic->set_kind(v1::Nic::INFINIBAND);
  return probe;
}

TEST(CheckMemlock, LimitedOnAnRdmaNodeFails) {
  const v1::CheckResult r = CheckMemlock(RdmaNode(8 << 20), {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("memlock (RLIMIT_MEMLOCK) is 8 MiB, under unlimited"));
}

TEST(CheckMemlock, UnlimitedOrAboveTheThresholdPasses) {
  EXPECT_EQ(CheckMemlock(RdmaNode(-1), {}).outcome(), v1::CheckResult::PASS);
  HostThresholds t;
  t.min_memlock_bytes = 1 << 20;
  EXPECT_EQ(CheckMemlock(RdmaNode(8 << 20), t).outcome(), v1::CheckResult::PASS);
  t.min_memlock_bytes = 16 << 20;
  EXPECT_EQ(CheckMemlock(RdmaNode(8 << 20), t).outcome(), v1::CheckResult::FAIL);
}

TEST(CheckMemlock, WithoutRdmaALimitPasses) {
  v1::NodeProbe probe = RdmaNode(64 << 10);
  probe.mutable_nics(0)->set_kind(v1::Nic::NET);
  const v1::CheckResult r = CheckMemlock(probe, {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::PASS);
  EXPECT_THAT(r.reason(), HasSubstr("no InfiniBand/RoCE device needs it"));
}

TEST(ReadHostLimits, ReadsThisHostThroughTheProbe) {
  const v1::NodeProbe probe = ReadHostLimits("/dev/shm");
  EXPECT_NE(probe.memlock_bytes(), 0);  // a limit or -1, as getrlimit says.
  EXPECT_FALSE(probe.hostname().empty());
  EXPECT_EQ(ReadHostLimits("/nonexistent/shm").shm_bytes(), 0u);
}

}  // namespace host_checks_test
}  // namespace trainlet::preflight

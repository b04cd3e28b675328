#include "progress/cpu_sample.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

TEST(CpuSample, ParsesSchedstat) {
  std::optional<ProcessCpu> p = ParseSchedstat("114148 2575173 2\n", 42);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->pid, 42);
  EXPECT_EQ(p->ran, absl::Nanoseconds(114148));
  EXPECT_EQ(p->waited, absl::Nanoseconds(2575173));
  for (const char* bad : {"", "12", "a b c", "-1 2 3", "1 -2 3", "99999999999999999999999 1 1"}) {
    EXPECT_FALSE(ParseSchedstat(bad, 1).has_value()) << bad;
  }
}

TEST(CpuSample, ParsesCpuStatV1AndV2) {
  std::optional<CgroupCpu> v1 = ParseCpuStat(
      "nr_periods 10\nnr_throttled 4\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n");
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->throttled, absl::Milliseconds(2500));
  EXPECT_EQ(v1->periods, 10);
  EXPECT_EQ(v1->throttled_periods, 4);
  std::optional<CgroupCpu> v2 = ParseCpuStat(
      "usage_usec 100\nuser_usec 50\nsystem_usec 50\nnr_periods 3\nnr_throttled 1\n"
      "throttled_usec 7000\n");
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->throttled, absl::Milliseconds(7));
  // No quota accounting (v2 without the cpu controller): unknown.
  EXPECT_FALSE(ParseCpuStat("usage_usec 100\nuser_usec 50\n").has_value());
  EXPECT_FALSE(ParseCpuStat("garbage").has_value());
}

void WriteFixture(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A fixture tree: proc/self/cgroup naming the pod's cgroup, its cpu.stat
// under v1's cpu controller or v2's unified tree.
TEST(CpuSample, FindsThePodsCpuStatInV1AndV2Layouts) {
  const std::string root = ::testing::TempDir() + "/cpu_sample_find";
  for (const char* d : {"", "/proc", "/proc/self", "/cg", "/cg/cpu,cpuacct", "/cg/cpu,cpuacct/pod",
                        "/cg/kubepods", "/cg/kubepods/pod1"}) {
    mkdir((root + d).c_str(), 0755);
  }
  CpuSampleSources src{root + "/proc", root + "/cg"};
  WriteFixture(root + "/proc/self/cgroup", "5:cpu,cpuacct:/pod\n4:memory:/pod\n");
  WriteFixture(root + "/cg/cpu,cpuacct/pod/cpu.stat",
               "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n");
  EXPECT_EQ(FindCpuStat(src), root + "/cg/cpu,cpuacct/pod/cpu.stat");
  WriteFixture(root + "/proc/self/cgroup", "0::/kubepods/pod1\n");
  WriteFixture(root + "/cg/kubepods/pod1/cpu.stat", "usage_usec 1\nthrottled_usec 5\n");
  EXPECT_EQ(FindCpuStat(src), root + "/cg/kubepods/pod1/cpu.stat");
  WriteFixture(root + "/proc/self/cgroup", "garbage\n");
  EXPECT_EQ(FindCpuStat(src), "");
}

// A container on cgroup v1 without a cgroup namespace: /proc/PID/cgroup
// names the host's path, absent in the container, whose own cgroup is
// mounted at the root of the hierarchy.
TEST(CpuSample, V1WithoutACgroupNamespace_TheMountsRoot) {
  const std::string root = ::testing::TempDir() + "/cpu_sample_find_root";
  for (const char* d : {"", "/proc", "/proc/self", "/cg", "/cg/cpu"}) {
    mkdir((root + d).c_str(), 0755);
  }
  CpuSampleSources src{root + "/proc", root + "/cg"};
  WriteFixture(root + "/proc/self/cgroup", "5:cpu,cpuacct:/kubepods/burstable/pod9/abc\n");
  WriteFixture(root + "/cg/cpu/cpu.stat", "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n");
  EXPECT_EQ(FindCpuStat(src), root + "/cg/cpu/cpu.stat");
}

TEST(CpuSample, ComparesTwoSamples) {
  CpuSample a, b;
  a.at = absl::UnixEpoch();
  b.at = a.at + absl::Seconds(2);
  a.processes = {{10, absl::Seconds(1), absl::Seconds(0)},
                 {11, absl::Seconds(5), absl::Seconds(1)}};
  b.processes = {{10, absl::Seconds(2), absl::Seconds(1)},
                 {11, absl::Seconds(4), absl::Seconds(1)},   // went back: a reused pid
                 {12, absl::Seconds(1), absl::Seconds(1)}};  // new: no interval
  a.cgroup = CgroupCpu{absl::Seconds(1), 0, 0};
  b.cgroup = CgroupCpu{absl::Seconds(2), 0, 0};
  CpuShares s = Compare(a, b);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_DOUBLE_EQ(s.processes[0].ran, 0.5);
  EXPECT_DOUBLE_EQ(s.processes[0].waited, 0.5);
  EXPECT_DOUBLE_EQ(s.max_waited(), 0.5);
  ASSERT_TRUE(s.throttled.has_value());
  EXPECT_DOUBLE_EQ(*s.throttled, 0.5);
  EXPECT_TRUE(Compare(b, a).processes.empty()) << "no interval backwards";
}

// The real /proc: a busy thread of this process shows CPU time ran.
TEST(CpuSample, ReadsThisProcessFromTheRealProc) {
  CpuSampleSources src;
  const CpuSample a = TakeCpuSample(src, FindCpuStat(src), {getpid(), -1, 0}, absl::Now());
  ASSERT_EQ(a.processes.size(), 1u);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  const CpuSample b = TakeCpuSample(src, FindCpuStat(src), {getpid()}, absl::Now());
  const CpuShares s = Compare(a, b);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_GT(s.processes[0].ran, 0.0);
}

}  // namespace
}  // namespace trainlet::agent

#include "preflight/node_checks.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "preflight/testing/fake_resolver.h"

namespace trainlet::preflight {
namespace node_checks_test {

using ::testing::ElementsAre;
using testing::FakeResolver;
using ::testing::HasSubstr;
using trainlet::testing::TempRoot;

std::map<std::string, v1::CheckResult> ByName(const std::vector<v1::CheckResult>& results) {
  std::map<std::string, v1::CheckResult> out;
  for (const v1::CheckResult& r : results) out[r.check()] = r;
  return out;
}

TEST(NodeChecker, RunsEveryCheckInOrderAndTheReportIsValid) {
  TempRoot root;
  auto resolver = std::make_shared<FakeResolver>();
  resolver->Add("head-0", {"10.0.0.1"});
  NodeCheckConfig config;
  config.path = root.path();
  config.path_thresholds.min_free_bytes = 1;
  NodeChecker checker(config, "pod-0", resolver);
  NodeCheckInputs in;
  in.host.set_shm_bytes(64u << 20);
  in.host.set_memlock_bytes(-1);
  in.names = {"head-0", "pod-9"};
  const std::vector<v1::CheckResult> results = checker.Run(in);
  std::vector<std::string> names;
  for (const v1::CheckResult& r : results) {
    names.push_back(r.check());
    EXPECT_GE(r.micros(), 0);
  }
  EXPECT_THAT(names, ElementsAre(kCheckGpuEcc, kCheckGpuRowRemap, kCheckGpuRecoveryAction,
                                 kCheckGpuRetiredPages, kCheckGpuForeignMemory, kCheckShmSize,
                                 kCheckMemlock, kCheckClockOffset, kCheckDns, kCheckPathFreeSpace,
                                 kCheckPathRoundTrip));
  std::map<std::string, v1::CheckResult> by = ByName(results);
  EXPECT_EQ(by[kCheckGpuEcc].outcome(), v1::CheckResult::SKIPPED);  // no GPUs here.
  EXPECT_EQ(by[kCheckShmSize].outcome(), v1::CheckResult::FAIL);
  EXPECT_EQ(by[kCheckMemlock].outcome(), v1::CheckResult::PASS);
  EXPECT_EQ(by[kCheckDns].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckDns].reason(), HasSubstr("pod-9"));
  EXPECT_EQ(by[kCheckPathRoundTrip].outcome(), v1::CheckResult::PASS);
  EXPECT_EQ(by[kCheckClockOffset].outcome(), v1::CheckResult::SKIPPED);

  v1::LinkResult link;
  link.set_from_node("pod-0");
  link.set_to_node("pod-1");
  link.set_error("connect to 10.0.0.2:1: Connection refused");
  const v1::PreflightReport report = MakeReport(
      "pod-0", 42, 3, results, {link}, absl::FromUnixSeconds(1'800'000'000), absl::Milliseconds(4));
  EXPECT_TRUE(ValidateReport(report).ok()) << ValidateReport(report);
  EXPECT_EQ(report.incarnation(), 42u);
  EXPECT_EQ(report.duration_micros(), 4000);
  const std::string line = SummaryLine(report);
  EXPECT_THAT(line, HasSubstr("preflight round 3: 3 passed, 2 failed, 6 skipped in 4ms"));
  EXPECT_THAT(line, HasSubstr("1 links measured, 1 failed"));
  EXPECT_THAT(line, HasSubstr("FAILED shm_size: /dev/shm is 64 MiB"));
}

TEST(NodeChecker, AHangingResolverDoesNotHoldTheOtherChecks) {
  auto resolver = std::make_shared<FakeResolver>();
  resolver->Hang("head-0");
  NodeCheckConfig config;
  config.io_timeout = absl::Milliseconds(100);
  NodeChecker checker(config, "pod-0", resolver);
  NodeCheckInputs in;
  in.names = {"head-0"};
  std::map<std::string, v1::CheckResult> by = ByName(checker.Run(in));
  EXPECT_EQ(by[kCheckDns].outcome(), v1::CheckResult::FAIL);
  EXPECT_EQ(by[kCheckShmSize].outcome(), v1::CheckResult::SKIPPED);
  resolver->Release();
}

TEST(MakeReport, CutsToTheCaps) {
  std::vector<v1::CheckResult> results(kMaxResults + 3, Skipped(kCheckDns, "no names to resolve"));
  std::vector<v1::LinkResult> links(kMaxLinks + 1);
  for (v1::LinkResult& l : links) {
    l.set_from_node("a");
    l.set_to_node("b");
  }
  const v1::PreflightReport r =
      MakeReport("a", 1, 1, results, links, absl::Now(), absl::Seconds(1));
  EXPECT_EQ(r.results_size(), kMaxResults);
  EXPECT_EQ(r.links_size(), kMaxLinks);
  EXPECT_TRUE(ValidateReport(r).ok());
}

}  // namespace node_checks_test
}  // namespace trainlet::preflight

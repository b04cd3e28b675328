#include "preflight/gpu_checks.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "topology/nvml.h"

namespace trainlet::preflight {
namespace gpu_checks_test {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

v1::NodeProbe ProbeWithGpus(int n) {
  v1::NodeProbe probe;
  probe.mutable_nvml()->set_status(v1::Source::OK);
  for (int i = 0; i < n; ++i) {
    v1::Gpu* g = probe.add_gpus();
    g->set_index(i);
    g->set_pci_bus_id("0000:1" + std::to_string(i) + ":00.0");
    g->set_visible(true);
    v1::GpuHealth* h = g->mutable_health();
    h->set_ecc_known(true);
    h->set_remap_known(true);
    h->set_recovery_action_known(true);
  }
  return probe;
}

TEST(GpuChecks, HealthyGpusPass) {
  const GpuInputs in = GpuInputsFromProbe(ProbeWithGpus(2));
  for (const v1::CheckResult& r :
       {CheckGpuEcc(in), CheckGpuRowRemap(in), CheckGpuRecoveryAction(in)}) {
    EXPECT_EQ(r.outcome(), v1::CheckResult::PASS) << r.check() << ": " << r.reason();
    EXPECT_THAT(r.reason(), HasSubstr("2 GPUs healthy"));
  }
}

TEST(GpuChecks, UncorrectableEccFailsNamingTheGpu) {
  v1::NodeProbe probe = ProbeWithGpus(2);
  probe.mutable_gpus(1)->mutable_health()->set_ecc_dbe_volatile(3);
  probe.mutable_gpus(0)->mutable_health()->set_ecc_sbe_volatile(100);  // correctable: fine.
  const v1::CheckResult r = CheckGpuEcc(GpuInputsFromProbe(probe));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), AllOf(HasSubstr("GPU 1 (0000:11:00.0)"), HasSubstr("3 uncorrectable"),
                                Not(HasSubstr("GPU 0"))));
  EXPECT_EQ(r.value(), 3);
  EXPECT_EQ(r.unit(), "count");
}

TEST(GpuChecks, PendingRowRemapFails) {
  v1::NodeProbe probe = ProbeWithGpus(1);
  probe.mutable_gpus(0)->mutable_health()->set_remap_pending(true);
  const v1::CheckResult r = CheckGpuRowRemap(GpuInputsFromProbe(probe));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("remap is pending"));
}

TEST(GpuChecks, RowRemapFailureFails) {
  v1::NodeProbe probe = ProbeWithGpus(1);
  probe.mutable_gpus(0)->mutable_health()->set_remap_failure(true);
  const v1::CheckResult r = CheckGpuRowRemap(GpuInputsFromProbe(probe));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("remap failed"));
}

TEST(GpuChecks, RecoveryActionFailsWithItsName) {
  v1::NodeProbe probe = ProbeWithGpus(1);
  probe.mutable_gpus(0)->mutable_health()->set_recovery_action(2);
  const v1::CheckResult r = CheckGpuRecoveryAction(GpuInputsFromProbe(probe));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("recovery action 2 (node reboot)"));
  probe.mutable_gpus(0)->mutable_health()->set_recovery_action(99);
  EXPECT_THAT(CheckGpuRecoveryAction(GpuInputsFromProbe(probe)).reason(),
              HasSubstr("99 (unknown)"));
}

TEST(GpuChecks, UnknownCountersAreSkippedNotFailed) {
  v1::NodeProbe probe = ProbeWithGpus(1);
  probe.mutable_gpus(0)->mutable_health()->Clear();  // NVML could not say anything.
  const GpuInputs in = GpuInputsFromProbe(probe);
  for (const v1::CheckResult& r : CheckGpus(in, {})) {
    EXPECT_EQ(r.outcome(), v1::CheckResult::SKIPPED) << r.check();
    EXPECT_THAT(r.reason(), HasSubstr("NVML cannot say"));
  }
}

TEST(GpuChecks, SomeGpusUnknownStillJudgesTheOthers) {
  v1::NodeProbe probe = ProbeWithGpus(2);
  probe.mutable_gpus(0)->mutable_health()->set_ecc_known(false);
  probe.mutable_gpus(1)->mutable_health()->set_ecc_dbe_volatile(1);
  const v1::CheckResult r = CheckGpuEcc(GpuInputsFromProbe(probe));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("(1 GPUs could not say)"));
}

TEST(GpuChecks, WithoutNvmlEveryGpuCheckIsSkippedWithTheReason) {
  v1::NodeProbe probe = ProbeWithGpus(1);
  probe.mutable_nvml()->set_status(v1::Source::ABSENT);
  probe.mutable_nvml()->set_reason("NVML unavailable: static build");
  for (const v1::CheckResult& r : CheckGpus(GpuInputsFromProbe(probe), {})) {
    EXPECT_EQ(r.outcome(), v1::CheckResult::SKIPPED) << r.check();
    EXPECT_THAT(r.reason(), HasSubstr("static build"));
  }
}

TEST(GpuChecks, NoGpusSkipsEveryCheck) {
  v1::NodeProbe probe;
  probe.mutable_nvml()->set_status(v1::Source::ABSENT);
  const std::vector<v1::CheckResult> results = CheckGpus(GpuInputsFromProbe(probe), {});
  ASSERT_EQ(results.size(), 5u);
  for (const v1::CheckResult& r : results) {
    EXPECT_EQ(r.outcome(), v1::CheckResult::SKIPPED);
    EXPECT_EQ(r.reason(), "no GPUs on this node");
  }
}

TEST(GpuChecks, GpusOutsideThisPodAreNotJudged) {
  v1::NodeProbe probe = ProbeWithGpus(2);
  probe.mutable_gpus(1)->set_visible(false);
  probe.mutable_gpus(1)->mutable_health()->set_ecc_dbe_volatile(7);  // another pod's problem.
  EXPECT_EQ(CheckGpuEcc(GpuInputsFromProbe(probe)).outcome(), v1::CheckResult::PASS);
}

TEST(GpuChecks, PendingRetirementFailsAndTheCountHasAThreshold) {
  GpuInputs in;
  in.nvml_ok = true;
  GpuFacts g;
  g.index = 0;
  g.retired_pages = 12;
  g.retirement_pending = false;
  in.gpus.push_back(g);
  EXPECT_EQ(CheckGpuRetiredPages(in, {}).outcome(), v1::CheckResult::PASS);
  GpuThresholds t;
  t.max_retired_pages = 10;
  const v1::CheckResult over = CheckGpuRetiredPages(in, t);
  EXPECT_EQ(over.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(over.reason(), HasSubstr("12 retired pages, over 10"));
  in.gpus[0].retirement_pending = true;
  const v1::CheckResult pending = CheckGpuRetiredPages(in, {});
  EXPECT_EQ(pending.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(pending.reason(), HasSubstr("pending retirement"));
  EXPECT_EQ(pending.value(), 12);
}

TEST(GpuChecks, MemoryOfOtherProcessesFailsButOursDoesNot) {
  GpuInputs in;
  in.nvml_ok = true;
  GpuFacts g;
  g.index = 3;
  g.processes = std::vector<GpuProcess>{{100, uint64_t{500} << 20}, {200, uint64_t{1} << 30}};
  in.gpus.push_back(g);
  const v1::CheckResult r = CheckGpuForeignMemory(in, {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(),
              AllOf(HasSubstr("GPU 3"), HasSubstr("1.5 GiB"), HasSubstr("pid 100, 200")));
  GpuThresholds t;
  t.is_ours = [](uint32_t pid) { return pid == 100 || pid == 200; };
  EXPECT_EQ(CheckGpuForeignMemory(in, t).outcome(), v1::CheckResult::PASS);
  in.gpus[0].processes->clear();  // NVML says: nobody.
  EXPECT_EQ(CheckGpuForeignMemory(in, {}).outcome(), v1::CheckResult::PASS);
}

TEST(GpuChecks, AForeignProcessWhoseMemoryIsUnknownFails) {
  GpuInputs in;
  in.nvml_ok = true;
  GpuFacts g;
  g.index = 0;
  g.processes = std::vector<GpuProcess>{{300, std::nullopt}};
  in.gpus.push_back(g);
  const v1::CheckResult r = CheckGpuForeignMemory(in, {});
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("NVML cannot say how much"));
}

TEST(GpuChecks, RetiredPagesAndProcessesComeFromTheProbe) {
  v1::NodeProbe probe = ProbeWithGpus(2);
  v1::GpuHealth* h0 = probe.mutable_gpus(0)->mutable_health();
  h0->set_retired_pages_known(true);
  h0->set_retired_pages_sbe(3);
  h0->set_retired_pages_dbe(2);
  h0->set_retired_pages_pending_known(true);
  h0->set_retired_pages_pending(true);
  v1::GpuHealth* h1 = probe.mutable_gpus(1)->mutable_health();
  h1->set_processes_known(true);
  h1->set_process_count(1);
  v1::GpuProcess* p = h1->add_processes();
  p->set_pid(4242);
  p->set_used_memory_bytes(int64_t{2} << 30);
  const GpuInputs in = GpuInputsFromProbe(probe);
  const v1::CheckResult retired = CheckGpuRetiredPages(in, {});
  EXPECT_EQ(retired.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(retired.reason(),
              AllOf(HasSubstr("GPU 0"), HasSubstr("pending retirement (5 retired)")));
  const v1::CheckResult foreign = CheckGpuForeignMemory(in, {});
  EXPECT_EQ(foreign.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(foreign.reason(),
              AllOf(HasSubstr("GPU 1"), HasSubstr("2 GiB"), HasSubstr("pid 4242")));
  EXPECT_EQ(foreign.value(), static_cast<double>(int64_t{2} << 30));
}

TEST(GpuChecks, ProbeWithoutRetiredPagesOrProcessesSkipsThoseTwo) {
  const std::vector<v1::CheckResult> r = CheckGpus(GpuInputsFromProbe(ProbeWithGpus(1)), {});
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[3].check(), kCheckGpuRetiredPages);
  EXPECT_EQ(r[3].outcome(), v1::CheckResult::SKIPPED);
  EXPECT_EQ(r[4].check(), kCheckGpuForeignMemory);
  EXPECT_EQ(r[4].outcome(), v1::CheckResult::SKIPPED);
}

#ifdef FAKE_NVML_PATH
// The NVML reader the probe uses (topology/nvml.cc), against the fake
// libnvidia-ml.so.1 with a fixture of two H100s: GPU 0 with 2 uncorrectable
// ECC errors, a pending row remap, recovery action 1, pages pending
// retirement and another process's 1 GiB; GPU 1 healthy.
TEST(GpuChecksWithFakeNvml, PendingRemapAndUncorrectableEccFailOnlyThatGpu) {
  setenv("FAKE_NVML_FIXTURE", TRAINLET_PREFLIGHT_TESTDATA "/nvml_bad_gpu.json", 1);
  topology::NvmlOptions options;
  options.library = FAKE_NVML_PATH;
  v1::NodeProbe probe;
  std::vector<v1::Gpu> gpus;
  topology::ReadNvml(options, &probe, &gpus);
  ASSERT_EQ(probe.nvml().status(), v1::Source::OK) << probe.nvml().reason();
  ASSERT_EQ(gpus.size(), 2u);
  for (v1::Gpu& g : gpus) {
    g.set_visible(true);  // what the probe's merge decides; here, all are this pod's.
    *probe.add_gpus() = g;
  }
  const GpuInputs in = GpuInputsFromProbe(probe);
  const v1::CheckResult ecc = CheckGpuEcc(in);
  EXPECT_EQ(ecc.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(ecc.reason(),
              AllOf(HasSubstr("GPU 0"), HasSubstr("2 uncorrectable"), Not(HasSubstr("GPU 1"))));
  const v1::CheckResult remap = CheckGpuRowRemap(in);
  EXPECT_EQ(remap.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(remap.reason(),
              AllOf(HasSubstr("GPU 0"), HasSubstr("pending"), Not(HasSubstr("GPU 1"))));
  const v1::CheckResult action = CheckGpuRecoveryAction(in);
  EXPECT_EQ(action.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(action.reason(), HasSubstr("GPU reset"));
  const v1::CheckResult retired = CheckGpuRetiredPages(in, {});
  EXPECT_EQ(retired.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(retired.reason(),
              AllOf(HasSubstr("GPU 0"), HasSubstr("pending retirement (3 retired)"),
                    Not(HasSubstr("GPU 1"))));
  const v1::CheckResult foreign = CheckGpuForeignMemory(in, {});
  EXPECT_EQ(foreign.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(foreign.reason(), AllOf(HasSubstr("GPU 0"), HasSubstr("1 GiB"), HasSubstr("pid 4242"),
                                      Not(HasSubstr("GPU 1"))));
}
#endif

}  // namespace gpu_checks_test
}  // namespace trainlet::preflight

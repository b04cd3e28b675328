#include "preflight/gpu_loopback.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {
namespace {

using ::testing::HasSubstr;

std::map<std::string, v1::CheckResult> ByName(const std::vector<v1::CheckResult>& results) {
  std::map<std::string, v1::CheckResult> by;
  for (const v1::CheckResult& r : results) by[r.check()] = r;
  return by;
}

// The runner with a fake "python": sh -c SCRIPT, to which the real
// arguments (-c PROGRAM ...) are positional parameters it ignores.
std::vector<v1::CheckResult> RunFake(const std::string& script, absl::Duration timeout,
                                     double min_busbw = 0) {
  GpuLoopbackOptions o;
  o.python = {"/bin/sh", "-c", script, "fake-python"};
  o.env = {"PATH=/usr/bin:/bin"};
  o.timeout = timeout;
  o.min_busbw_gbps = min_busbw;
  return RunGpuLoopback(o);
}

constexpr char kFourGpus[] =
    R"({"status": "ok", "torch": "2.3.0", "gpus": [)"
    R"({"index": 0, "name": "H100", "mem_gbps": 2900}, {"index": 1, "name": "H100", "mem_gbps": 2950},)"
    R"({"index": 2, "name": "H100", "mem_gbps": 700}, {"index": 3, "name": "H100", "mem_gbps": 2800}],)"
    R"("nccl": {"ranks": 4, "bytes": 268435456, "algbw_gbps": 100}})";

TEST(AllReduceBusBandwidthTest, IsNcclTestsFactor) {
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(100, 2), 100);  // 2 * 1/2
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(100, 4), 150);  // 2 * 3/4
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(100, 8), 175);  // 2 * 7/8
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(100, 1), 0);
}

TEST(ParseGpuLoopbackOutputTest, SlowGpuFailsAgainstTheMedian) {
  GpuLoopbackOptions o;
  o.min_busbw_gbps = 100;
  auto results = ParseGpuLoopbackOutput(absl::StrCat("NCCL INFO noise\n", kFourGpus, "\n"), o);
  ASSERT_TRUE(results.ok()) << results.status();
  auto by = ByName(*results);
  const v1::CheckResult& mem = by[kCheckGpuMemoryBandwidth];
  EXPECT_EQ(mem.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(mem.reason(), HasSubstr("GPU 2 (H100) 700.00 GB/s"));
  EXPECT_THAT(mem.reason(), HasSubstr("median"));
  EXPECT_DOUBLE_EQ(mem.value(), 700e9);
  EXPECT_DOUBLE_EQ(mem.threshold(), 2850e9 * 0.5);  // median of 700, 2800, 2900, 2950
  EXPECT_EQ(mem.unit(), kUnitBytesPerSecond);
  const v1::CheckResult& nccl = by[kCheckGpuNcclBusbw];
  EXPECT_EQ(nccl.outcome(), v1::CheckResult::PASS) << nccl.reason();
  EXPECT_DOUBLE_EQ(nccl.value(), 150e9);
  EXPECT_TRUE(ValidateReport([&] {
                v1::PreflightReport r;
                r.set_node_id("n");
                for (const auto& x : *results) *r.add_results() = x;
                return r;
              }())
                  .ok());
}

TEST(ParseGpuLoopbackOutputTest, BusbwBelowTheFlagFails) {
  GpuLoopbackOptions o;
  o.min_busbw_gbps = 200;
  auto results = ParseGpuLoopbackOutput(kFourGpus, o);
  ASSERT_TRUE(results.ok()) << results.status();
  const v1::CheckResult nccl = ByName(*results)[kCheckGpuNcclBusbw];
  EXPECT_EQ(nccl.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(nccl.reason(), HasSubstr("busbw 150.00 GB/s"));
  EXPECT_THAT(nccl.reason(), HasSubstr("--preflight-min-gpu-busbw 200.00 GB/s"));
  EXPECT_DOUBLE_EQ(nccl.threshold(), 200e9);
}

TEST(ParseGpuLoopbackOutputTest, HealthyGpusPass) {
  auto results = ParseGpuLoopbackOutput(
      R"({"status": "ok", "gpus": [{"index": 0, "name": "A", "mem_gbps": 1000}],)"
      R"( "nccl": {"skipped": "one GPU"}})",
      GpuLoopbackOptions{});
  ASSERT_TRUE(results.ok()) << results.status();
  auto by = ByName(*results);
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::PASS);
  EXPECT_EQ(by[kCheckGpuNcclBusbw].outcome(), v1::CheckResult::SKIPPED);
  EXPECT_EQ(by[kCheckGpuNcclBusbw].reason(), "one GPU");
}

TEST(ParseGpuLoopbackOutputTest, NcclErrorFails) {
  auto results = ParseGpuLoopbackOutput(
      R"({"status": "ok", "gpus": [{"index": 0, "name": "A", "mem_gbps": 1000}],)"
      R"( "nccl": {"error": "rank 1 exited 1: NCCL error"}})",
      GpuLoopbackOptions{});
  ASSERT_TRUE(results.ok()) << results.status();
  const v1::CheckResult nccl = ByName(*results)[kCheckGpuNcclBusbw];
  EXPECT_EQ(nccl.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(nccl.reason(), HasSubstr("rank 1 exited 1: NCCL error"));
}

TEST(ParseGpuLoopbackOutputTest, BadOutputIsRejectedNamingTheField) {
  const GpuLoopbackOptions o;
  EXPECT_THAT(ParseGpuLoopbackOutput("", o).status().message(), HasSubstr("no line"));
  EXPECT_THAT(ParseGpuLoopbackOutput("Segmentation fault", o).status().message(),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseGpuLoopbackOutput(R"({"status": "maybe"})", o).status().message(),
              HasSubstr("unknown \"status\""));
  EXPECT_THAT(ParseGpuLoopbackOutput(R"({"status": "ok", "gpus": []})", o).status().message(),
              HasSubstr("\"gpus\""));
  EXPECT_THAT(ParseGpuLoopbackOutput(R"({"status": "ok", "gpus": [{"name": "A", "mem_gbps": -1}],)"
                                     R"( "nccl": {}})",
                                     o)
                  .status()
                  .message(),
              HasSubstr("\"mem_gbps\""));
  EXPECT_THAT(
      ParseGpuLoopbackOutput(R"({"status": "ok", "gpus": [{"name": "A", "mem_gbps": 1}]})", o)
          .status()
          .message(),
      HasSubstr("\"nccl\""));
  EXPECT_THAT(ParseGpuLoopbackOutput(R"({"status": "ok", "gpus": [{"name": "A", "mem_gbps": 1}],)"
                                     R"( "nccl": {"ranks": 1000, "bytes": 1, "algbw_gbps": 1}})",
                                     o)
                  .status()
                  .message(),
              HasSubstr("\"ranks\""));
  EXPECT_THAT(ParseGpuLoopbackOutput(std::string(kMaxGpuLoopbackOutputBytes + 1, 'x'), o)
                  .status()
                  .message(),
              HasSubstr("more than"));
}

TEST(RunGpuLoopbackTest, CannedSlowGpuFails) {
  auto by = ByName(RunFake(absl::StrCat("echo '", kFourGpus, "'"), absl::Seconds(30)));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("GPU 2"));
}

TEST(RunGpuLoopbackTest, GarbageFailsWithTheReason) {
  auto by = ByName(RunFake("echo 'Traceback (most recent call last): oops'", absl::Seconds(30)));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("not a JSON object: Traceback"));
  EXPECT_EQ(by[kCheckGpuNcclBusbw].outcome(), v1::CheckResult::FAIL);
}

TEST(RunGpuLoopbackTest, CrashNamesTheSignal) {
  auto by = ByName(RunFake("echo dying >&2; kill -SEGV $$", absl::Seconds(30)));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("died of signal 11"));
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("its stderr ends: dying"));
}

TEST(RunGpuLoopbackTest, NonZeroExitNamesTheStatus) {
  auto by = ByName(RunFake("echo 'CUDA error: no kernel image' >&2; exit 3", absl::Seconds(30)));
  EXPECT_EQ(by[kCheckGpuNcclBusbw].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuNcclBusbw].reason(), HasSubstr("exited with status 3"));
  EXPECT_THAT(by[kCheckGpuNcclBusbw].reason(), HasSubstr("no kernel image"));
}

TEST(RunGpuLoopbackTest, OversizeOutputIsKilled) {
  auto by = ByName(
      RunFake("while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done", absl::Seconds(60)));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("printed more than"));
}

TEST(RunGpuLoopbackTest, MissingInterpreterIsSkipped) {
  GpuLoopbackOptions o;
  o.python = {"/nonexistent/python3"};
  auto by = ByName(RunGpuLoopback(o));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::SKIPPED);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("cannot run /nonexistent/python3"));
}

// A hang is killed at the timeout, with what it started in its group (the
// NCCL workers, here a sleep in the background).
TEST(RunGpuLoopbackTest, HangIsKilledAtTheTimeoutWithItsGroup) {
  const std::string pid_file =
      absl::StrCat(::testing::TempDir(), "/gpu_loopback_hang_", getpid(), ".pid");
  const auto start = std::chrono::steady_clock::now();
  auto by =
      ByName(RunFake(absl::StrCat("sleep 300 & echo $! > ", pid_file, "; wait"), absl::Seconds(1)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(by[kCheckGpuMemoryBandwidth].reason(), HasSubstr("did not finish within 1s"));
  EXPECT_LT(took, std::chrono::seconds(60));  // not the sleep's 300 s
  pid_t sleeper = 0;
  std::ifstream(pid_file) >> sleeper;
  unlink(pid_file.c_str());
  ASSERT_GT(sleeper, 0);
  // The background sleep was in the group: killed (then reaped by init).
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    std::ifstream stat(absl::StrCat("/proc/", sleeper, "/stat"));
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the hang's background process " << sleeper << " survived";
  if (!gone) kill(sleeper, SIGKILL);
}

// The real program, on this machine's Python: without CUDA (or torch) both
// checks are SKIPPED with the reason, never failed.
TEST(GpuLoopbackProgramTest, WithoutCudaIsSkipped) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  GpuLoopbackOptions o;
  o.python = {"/usr/bin/python3"};
  o.env = {"PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES="};
  o.timeout = absl::Seconds(120);  // an `import torch` on a loaded machine
  auto by = ByName(RunGpuLoopback(o));
  ASSERT_EQ(by.size(), 2u);
  for (const auto& [name, r] : by) {
    EXPECT_EQ(r.outcome(), v1::CheckResult::SKIPPED) << name << ": " << r.reason();
    EXPECT_THAT(r.reason(), ::testing::AnyOf(HasSubstr("torch.cuda.is_available() is False"),
                                             HasSubstr("torch is not importable")));
  }
}

TEST(GpuLoopbackProgramTest, WithoutTorchIsSkipped) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  GpuLoopbackOptions o;
  o.python = {"/usr/bin/python3", "-S", "-I"};  // no site-packages: no torch
  o.env = {"PATH=/usr/bin:/bin"};
  auto by = ByName(RunGpuLoopback(o));
  EXPECT_EQ(by[kCheckGpuNcclBusbw].outcome(), v1::CheckResult::SKIPPED);
  EXPECT_THAT(by[kCheckGpuNcclBusbw].reason(), HasSubstr("torch is not importable"));
}

// The program's GPU half on a stand-in torch (testdata/fake_torch): four
// GPUs, GPU 2's copies 4x slower, the all-reduce by one real process a rank.
std::vector<v1::CheckResult> RunOnFakeTorch(std::vector<std::string> env) {
  GpuLoopbackOptions o;
  o.python = {"/usr/bin/python3"};
  o.env = std::move(env);
  o.env.push_back("PATH=/usr/bin:/bin");
  o.env.push_back(absl::StrCat("PYTHONPATH=", TRAINLET_PREFLIGHT_TESTDATA, "/fake_torch"));
  o.timeout = absl::Seconds(120);
  return RunGpuLoopback(o);
}

TEST(GpuLoopbackProgramTest, FakeTorch_SlowGpuFails_BusbwFromTheWorkers) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  auto by = ByName(RunOnFakeTorch({"FAKE_TORCH_SLOW_GPU=2"}));
  const v1::CheckResult& mem = by[kCheckGpuMemoryBandwidth];
  EXPECT_EQ(mem.outcome(), v1::CheckResult::FAIL) << mem.reason();
  EXPECT_THAT(mem.reason(), HasSubstr("GPU 2 (Fake GPU) 6.71 GB/s"));  // 2 x 256 MiB x 5 / 0.4 s
  const v1::CheckResult& nccl = by[kCheckGpuNcclBusbw];
  EXPECT_EQ(nccl.outcome(), v1::CheckResult::PASS) << nccl.reason();
  EXPECT_THAT(nccl.reason(), HasSubstr("all-reduce of 256 MiB among 4 GPUs"));
  EXPECT_GT(nccl.value(), 0);
}

TEST(GpuLoopbackProgramTest, FakeTorch_AFailingRankFailsTheAllReduce) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  auto by = ByName(RunOnFakeTorch({"FAKE_TORCH_FAIL_RANK=1"}));
  EXPECT_EQ(by[kCheckGpuMemoryBandwidth].outcome(), v1::CheckResult::PASS);
  const v1::CheckResult& nccl = by[kCheckGpuNcclBusbw];
  EXPECT_EQ(nccl.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(nccl.reason(), HasSubstr("rank 1 exited 1: NCCL error: fake failure on rank 1"));
}

}  // namespace
}  // namespace trainlet::preflight

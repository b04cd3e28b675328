#include "topology/nvml.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::topology {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;

const char* const kH100BusIds[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                   "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
constexpr uint64_t k80GiB = 80ull << 30;

std::string Testdata(const std::string& name) {
  return std::string(TOPOLOGY_TESTDATA) + "/" + name;
}

// Points the fake shim at a fixture (read at its next nvmlInit).
void UseFixture(const std::string& path) { setenv("FAKE_NVML_FIXTURE", path.c_str(), 1); }

// A fixture written by the test, removed at the end of it.
class TempFixture {
 public:
  explicit TempFixture(const std::string& json) {
    path_ = ::testing::TempDir() + "/nvml_fixture_" + std::to_string(getpid()) + "_" +
            std::to_string(counter_++) + ".json";
    std::ofstream(path_) << json;
  }
  ~TempFixture() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static int counter_;
  std::string path_;
};
int TempFixture::counter_ = 0;

struct Result {
  v1::NodeProbe probe;
  std::vector<v1::Gpu> gpus;
};

Result Read(const std::string& library, const std::string& fixture, NvmlOptions options = {}) {
  UseFixture(fixture);
  options.library = library;
  Result r;
  ReadNvml(options, &r.probe, &r.gpus);
  return r;
}

std::vector<std::string> Warnings(const Result& r) {
  return {r.probe.warnings().begin(), r.probe.warnings().end()};
}

TEST(ReadNvml, H100Node_EveryFieldFromTheShim) {
  NvmlOptions options;
  options.cpumap_cpus = 96;
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_h100x8.json"), options);
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_EQ(r.probe.nvml().version(), "550.54.15");
  EXPECT_EQ(r.probe.cuda_driver_version(), "12040");
  EXPECT_THAT(Warnings(r), IsEmpty());
  ASSERT_EQ(r.gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const v1::Gpu& g = r.gpus[i];
    EXPECT_EQ(g.index(), i);
    EXPECT_EQ(g.uuid(), "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i));
    EXPECT_EQ(g.name(), "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.pci_bus_id(), kH100BusIds[i]);
    EXPECT_EQ(g.memory_bytes(), k80GiB);
    EXPECT_EQ(g.sm(), 90);
    EXPECT_EQ(g.vendor_id(), "0x10de");
    EXPECT_EQ(g.device_id(), "0x2330");
    EXPECT_EQ(g.link_speed(), "32.0 GT/s PCIe");
    EXPECT_EQ(g.link_width(), 16);
    EXPECT_EQ(g.cpu_affinity(),
              i < 4 ? "00000000,0000ffff,ffffffff" : "ffffffff,ffff0000,00000000");
    EXPECT_EQ(g.minor_number(), i);
    EXPECT_EQ(g.numa_node(), -1);  // sysfs's to fill
    EXPECT_EQ(g.source(), "nvml");
    ASSERT_EQ(g.nvlinks_size(), 1);
    EXPECT_EQ(g.nvlinks(0).target_bus_id(), "fffffff:ffff:ff");
    EXPECT_EQ(g.nvlinks(0).count(), 18);
    EXPECT_EQ(g.nvlinks(0).target_class(), "0x068000");
    const v1::GpuHealth& h = g.health();
    EXPECT_TRUE(h.ecc_known());
    EXPECT_TRUE(h.ecc_enabled());
    EXPECT_EQ(h.ecc_sbe_volatile(), i == 5 ? 3u : 0u);
    EXPECT_EQ(h.ecc_dbe_volatile(), 0u);
    EXPECT_TRUE(h.remap_known());
    EXPECT_EQ(h.remapped_rows_correctable(), i == 5 ? 1u : 0u);
    EXPECT_EQ(h.remapped_rows_uncorrectable(), 0u);
    EXPECT_FALSE(h.remap_pending());
    EXPECT_FALSE(h.remap_failure());
    EXPECT_TRUE(h.recovery_action_known());
    EXPECT_EQ(h.recovery_action(), i == 5 ? 1u : 0u);
  }
}

TEST(ReadNvml, H100Node_ProcessesAndMemoryUsed) {
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_h100x8.json"));
  ASSERT_EQ(r.gpus.size(), 8u);
  for (const v1::Gpu& g : r.gpus) {
    EXPECT_TRUE(g.health().processes_known());
    EXPECT_EQ(g.health().process_count(), 0u);
    EXPECT_TRUE(g.health().memory_used_known());
    EXPECT_EQ(g.health().memory_used_bytes(), 553648128u);
    // Ampere and later remap rows instead: no page retirement.
    EXPECT_FALSE(g.health().retired_pages_known());
    EXPECT_FALSE(g.health().retired_pages_pending_known());
  }
}

TEST(ReadNvml, UnhealthyNode_EveryHealthFact) {
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_unhealthy.json"));
  ASSERT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_THAT(Warnings(r), IsEmpty());
  ASSERT_EQ(r.gpus.size(), 4u);
  constexpr uint64_t kGiB = 1ull << 30;

  const v1::GpuHealth& ok = r.gpus[0].health();
  EXPECT_EQ(ok.ecc_dbe_volatile(), 0u);
  EXPECT_FALSE(ok.remap_pending());
  EXPECT_EQ(ok.recovery_action(), 0u);
  ASSERT_TRUE(ok.processes_known());
  EXPECT_EQ(ok.process_count(), 1u);
  ASSERT_EQ(ok.processes_size(), 1);
  EXPECT_EQ(ok.processes(0).pid(), 1001u);
  EXPECT_EQ(ok.processes(0).used_memory_bytes(), static_cast<int64_t>(2 * kGiB));
  EXPECT_EQ(ok.memory_used_bytes(), 2 * kGiB + 553648128u);

  const v1::GpuHealth& remap = r.gpus[1].health();
  EXPECT_TRUE(remap.ecc_known());
  EXPECT_EQ(remap.ecc_dbe_volatile(), 1u);  // an uncorrectable ECC error
  EXPECT_TRUE(remap.remap_known());
  EXPECT_EQ(remap.remapped_rows_uncorrectable(), 2u);
  EXPECT_TRUE(remap.remap_pending());
  EXPECT_FALSE(remap.remap_failure());
  EXPECT_TRUE(remap.recovery_action_known());
  EXPECT_EQ(remap.recovery_action(), 1u);  // GPU reset
  EXPECT_TRUE(remap.processes_known());
  EXPECT_EQ(remap.processes_size(), 0);

  const v1::Gpu& v100 = r.gpus[2];
  EXPECT_EQ(v100.sm(), 70);
  const v1::GpuHealth& retired = v100.health();
  EXPECT_EQ(retired.ecc_sbe_volatile(), 12u);
  EXPECT_FALSE(retired.remap_known()) << "no row remapping before Ampere";
  EXPECT_FALSE(retired.recovery_action_known());
  ASSERT_TRUE(retired.retired_pages_known());
  EXPECT_EQ(retired.retired_pages_sbe(), 3u);
  EXPECT_EQ(retired.retired_pages_dbe(), 1u);
  ASSERT_TRUE(retired.retired_pages_pending_known());
  EXPECT_TRUE(retired.retired_pages_pending());

  const v1::GpuHealth& foreign = r.gpus[3].health();
  ASSERT_TRUE(foreign.processes_known());
  EXPECT_EQ(foreign.process_count(), 2u);
  ASSERT_EQ(foreign.processes_size(), 2);
  EXPECT_EQ(foreign.processes(0).pid(), 4242u);
  EXPECT_EQ(foreign.processes(0).used_memory_bytes(), static_cast<int64_t>(20 * kGiB));
  EXPECT_EQ(foreign.processes(1).pid(), 4243u);
  EXPECT_EQ(foreign.processes(1).used_memory_bytes(), -1) << "NVML_VALUE_NOT_AVAILABLE";
  EXPECT_EQ(foreign.memory_used_bytes(), 20 * kGiB + 553648128u);
}

TEST(ReadNvml, LegacyDriver_ProcessesIn16ByteEntries) {
  // Only the unversioned call: 16-byte nvmlProcessInfo_v1_t entries, so the
  // second process is at offset 16, not 24.
  Result r = Read(FAKE_NVML_LEGACY_PATH, Testdata("nvml_unhealthy.json"));
  ASSERT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  ASSERT_EQ(r.gpus.size(), 4u);
  const v1::GpuHealth& foreign = r.gpus[3].health();
  ASSERT_EQ(foreign.processes_size(), 2);
  EXPECT_EQ(foreign.processes(0).pid(), 4242u);
  EXPECT_EQ(foreign.processes(1).pid(), 4243u);
  EXPECT_EQ(foreign.processes(1).used_memory_bytes(), -1);
  EXPECT_TRUE(r.gpus[2].health().retired_pages_known());
}

TEST(ReadNvml, ManyProcesses_CountedAndCapped) {
  std::string processes;
  for (int i = 0; i < 300; ++i) {
    processes += (i ? ", " : "") + std::string(R"({"pid": )") + std::to_string(5000 + i) +
                 R"(, "usedGpuMemory": 1048576})";
  }
  TempFixture fixture(R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "busId": "0000:18:00.0",
      "cc": [9, 0], "processes": [)" +
                      processes + "]}]}");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  // More than the 256 asked for: their number, not who they are.
  EXPECT_TRUE(r.gpus[0].health().processes_known());
  EXPECT_EQ(r.gpus[0].health().process_count(), 300u);
  EXPECT_EQ(r.gpus[0].health().processes_size(), 0);

  processes.clear();
  for (int i = 0; i < 100; ++i) {
    processes += (i ? ", " : "") + std::string(R"({"pid": )") + std::to_string(5000 + i) + "}";
  }
  TempFixture hundred(R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "busId": "0000:18:00.0",
      "cc": [9, 0], "processes": [)" +
                      processes + "]}]}");
  r = Read(FAKE_NVML_PATH, hundred.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].health().process_count(), 100u);
  EXPECT_EQ(r.gpus[0].health().processes_size(), 64) << "the first 64 kept";
  EXPECT_EQ(r.gpus[0].health().processes(63).pid(), 5063u);
}

TEST(ReadNvml, HealthCallsFailing_AreUnknownAndWarned) {
  TempFixture fixture(R"({"devices": [{"name": "Tesla V100-SXM2-32GB", "busId": "0000:18:00.0",
      "cc": [7, 0], "retiredPages": {"sbe": 1, "dbe": 0, "pending": false},
      "processes": [{"pid": 7, "usedGpuMemory": 1}]}],
      "errors": [{"fn": "nvmlDeviceGetComputeRunningProcesses", "rc": 4},
                 {"fn": "nvmlDeviceGetRetiredPages", "rc": 999}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_FALSE(r.gpus[0].health().processes_known());
  EXPECT_FALSE(r.gpus[0].health().retired_pages_known());
  EXPECT_TRUE(r.gpus[0].health().retired_pages_pending_known());
  EXPECT_THAT(Warnings(r),
              Contains(HasSubstr("nvmlDeviceGetComputeRunningProcesses_v3: NO_PERMISSION (4)")));
  EXPECT_THAT(Warnings(r), Contains(HasSubstr("nvmlDeviceGetRetiredPages: UNKNOWN (999)")));
}

TEST(ReadNvml, CpuAffinityWithoutCpuCount_UsesJustEnoughGroups) {
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_h100x8.json"));
  ASSERT_EQ(r.gpus.size(), 8u);
  EXPECT_EQ(r.gpus[0].cpu_affinity(), "0000ffff,ffffffff");
  EXPECT_EQ(r.gpus[7].cpu_affinity(), "ffffffff,ffff0000,00000000");
}

TEST(ReadNvml, HealthOff_LeavesHealthUnknown) {
  NvmlOptions options;
  options.health = false;
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_h100x8.json"), options);
  ASSERT_EQ(r.gpus.size(), 8u);
  EXPECT_FALSE(r.gpus[5].health().ecc_known());
  EXPECT_FALSE(r.gpus[5].health().remap_known());
  EXPECT_FALSE(r.gpus[5].health().recovery_action_known());
  EXPECT_FALSE(r.gpus[5].health().processes_known());
  EXPECT_FALSE(r.gpus[5].health().memory_used_known());
  EXPECT_EQ(r.gpus[5].nvlinks(0).count(), 18);
}

TEST(ReadNvml, OneGpuVm_NoNvLinksAndNoRecoveryField) {
  NvmlOptions options;
  options.cpumap_cpus = 4;
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_vm_1gpu.json"), options);
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_EQ(r.probe.nvml().version(), "535.183.01");
  EXPECT_EQ(r.probe.cuda_driver_version(), "12020");
  EXPECT_THAT(Warnings(r), IsEmpty());
  ASSERT_EQ(r.gpus.size(), 1u);
  const v1::Gpu& g = r.gpus[0];
  EXPECT_EQ(g.index(), 0);
  EXPECT_EQ(g.uuid(), "GPU-3f2a9c1e-7b4d-4e8a-9c61-5d0e8b2f4a17");
  EXPECT_EQ(g.name(), "NVIDIA A10G");
  EXPECT_EQ(g.pci_bus_id(), "0000:00:1e.0");
  EXPECT_EQ(g.memory_bytes(), 24146608128u);
  EXPECT_EQ(g.sm(), 86);
  EXPECT_EQ(g.device_id(), "0x2237");
  EXPECT_EQ(g.link_speed(), "2.5 GT/s PCIe");
  EXPECT_EQ(g.link_width(), 16);
  EXPECT_EQ(g.cpu_affinity(), "f");
  EXPECT_EQ(g.minor_number(), 0);
  EXPECT_EQ(g.nvlinks_size(), 0);
  EXPECT_TRUE(g.health().ecc_known());
  EXPECT_TRUE(g.health().remap_known());
  // The driver has no field 230: NOT_SUPPORTED per value, so unknown.
  EXPECT_FALSE(g.health().recovery_action_known());
}

TEST(ReadNvml, InjectedErrors_UnknownWarnedOrSkipped) {
  Result r = Read(FAKE_NVML_PATH, Testdata("nvml_errors.json"));
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_THAT(r.probe.nvml().reason(), HasSubstr("2 of 4 devices"));
  // Devices 1 (no handle: GPU_IS_LOST) and 3 (GPU_IS_LOST from the PCI info) are skipped.
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].index(), 0);
  EXPECT_EQ(r.gpus[1].index(), 2);
  std::vector<std::string> w = Warnings(r);
  EXPECT_THAT(w, Contains(AllOf(HasSubstr("device 1 skipped"),
                                HasSubstr("nvmlDeviceGetHandleByIndex_v2: GPU_IS_LOST (15)"))));
  EXPECT_THAT(w, Contains(AllOf(HasSubstr("device 3 skipped"),
                                HasSubstr("nvmlDeviceGetPciInfo_v3: GPU_IS_LOST (15)"))));
  // NOT_SUPPORTED is unknown, not a warning.
  EXPECT_THAT(w, Not(Contains(HasSubstr("NOT_SUPPORTED"))));
  EXPECT_THAT(w, Not(Contains(HasSubstr("device 0"))));

  const v1::Gpu& g0 = r.gpus[0];
  EXPECT_EQ(g0.pci_bus_id(), "0000:07:00.0");
  EXPECT_EQ(g0.memory_bytes(), k80GiB);
  EXPECT_FALSE(g0.health().ecc_known());
  EXPECT_FALSE(g0.health().remap_known());
  EXPECT_FALSE(g0.health().recovery_action_known());
  ASSERT_EQ(g0.nvlinks_size(), 1);
  EXPECT_EQ(g0.nvlinks(0).target_bus_id(), "0000:08:00.0");
  EXPECT_EQ(g0.nvlinks(0).count(), 12);
  EXPECT_EQ(g0.nvlinks(0).target_class(), "");  // visible: sysfs gives the class

  const v1::Gpu& g2 = r.gpus[1];
  EXPECT_EQ(g2.pci_bus_id(), "0000:47:00.0");
  EXPECT_EQ(g2.memory_bytes(), 0u);
  EXPECT_EQ(g2.cpu_affinity(), "");
  EXPECT_EQ(g2.uuid(), "GPU-11111111-2222-3333-4444-000000000002");
  EXPECT_THAT(w, Contains(AllOf(HasSubstr("device 2 (0000:47:00.0)"),
                                HasSubstr("nvmlDeviceGetMemoryInfo: NO_PERMISSION (4)"))));
  EXPECT_THAT(w, Contains(HasSubstr("nvmlDeviceGetCpuAffinity: UNKNOWN (999)")));
  EXPECT_THAT(w, Contains(AllOf(HasSubstr("NVLink 11"),
                                HasSubstr("nvmlDeviceGetNvLinkRemotePciInfo_v2: UNKNOWN (999)"))));
  ASSERT_EQ(g2.nvlinks_size(), 2);
  EXPECT_EQ(g2.nvlinks(0).target_bus_id(), "0000:08:00.0");
  EXPECT_EQ(g2.nvlinks(0).count(), 6);
  EXPECT_EQ(g2.nvlinks(1).target_bus_id(), "0000:09:00.0");
  EXPECT_EQ(g2.nvlinks(1).count(), 5);  // link 11 failed
  EXPECT_TRUE(g2.health().remap_known());
  EXPECT_TRUE(g2.health().remap_pending());
}

TEST(ReadNvml, MissingLibrary_IsAbsentWithDlerror) {
  Result r = Read("libtrainlet-test-no-such-nvml.so.1", Testdata("nvml_h100x8.json"));
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ABSENT);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("dlopen libtrainlet-test-no-such-nvml.so.1: "),
                    HasSubstr("cannot open shared object file")));
  EXPECT_TRUE(r.gpus.empty());
}

TEST(ReadNvml, EmptyLibrary_IsSkipped) {
  Result r = Read("", Testdata("nvml_h100x8.json"));
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::SKIPPED);
  EXPECT_TRUE(r.gpus.empty());
}

TEST(ReadNvml, InitFailure_IsErrorNamingTheCode) {
  TempFixture fixture(R"({"devices": [], "errors": [{"fn": "nvmlInit", "rc": 9}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("nvmlInit_v2 failed: DRIVER_NOT_LOADED (9): Driver Not Loaded"),
                    HasSubstr("kernel driver")));
  EXPECT_TRUE(r.gpus.empty());
}

TEST(ReadNvml, DeviceCountFailure_IsError) {
  TempFixture fixture(R"({"errors": [{"fn": "nvmlDeviceGetCount", "rc": 999}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(), HasSubstr("nvmlDeviceGetCount_v2 failed: UNKNOWN (999)"));
  // nvmlShutdown was called: the next read initialises afresh from a new fixture.
  Result again = Read(FAKE_NVML_PATH, Testdata("nvml_vm_1gpu.json"));
  EXPECT_EQ(again.probe.nvml().status(), v1::Source::OK) << again.probe.nvml().reason();
  EXPECT_EQ(again.gpus.size(), 1u);
}

TEST(ReadNvml, NoDevices_IsOkAndEmpty) {
  TempFixture fixture(R"({"driverVersion": "550.54.15", "devices": []})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_EQ(r.probe.cuda_driver_version(), "");  // NOT_SUPPORTED: unknown
}

TEST(ReadNvml, PciInfoWrittenPastItsStruct_IsAnAbiError) {
  Result r = Read(FAKE_NVML_OVERFLOW_PATH, Testdata("nvml_h100x8.json"));
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("nvmlDeviceGetPciInfo_v3 wrote outside the 68 bytes"),
                    HasSubstr("no NVML data is used")));
  EXPECT_TRUE(r.gpus.empty());
}

TEST(ReadNvml, LegacyDriver_FallsBackToUnversionedSymbols) {
  Result r = Read(FAKE_NVML_LEGACY_PATH, Testdata("nvml_h100x8.json"));
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_EQ(r.probe.cuda_driver_version(), "12040");
  EXPECT_THAT(Warnings(r), IsEmpty());
  ASSERT_EQ(r.gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    // From the legacy 52-byte layout's bus id.
    EXPECT_EQ(r.gpus[i].pci_bus_id(), kH100BusIds[i]);
    EXPECT_EQ(r.gpus[i].device_id(), "0x2330");
    // No field 165: the link state comes from nvmlDeviceGetNvLinkState.
    ASSERT_EQ(r.gpus[i].nvlinks_size(), 1);
    EXPECT_EQ(r.gpus[i].nvlinks(0).target_bus_id(), "fffffff:ffff:ff");
    EXPECT_EQ(r.gpus[i].nvlinks(0).count(), 18);
    // Missing symbols: unknown, as NCCL treats them.
    EXPECT_FALSE(r.gpus[i].health().remap_known());
    EXPECT_FALSE(r.gpus[i].health().recovery_action_known());
    EXPECT_TRUE(r.gpus[i].health().ecc_known());
  }
}

// A GPU's clock fields; reasons < 0: not known.
void ExpectClocks(const v1::Gpu& g, uint32_t mhz, uint32_t max_mhz, int64_t reasons) {
  EXPECT_EQ(g.sm_clock_mhz(), mhz);
  EXPECT_EQ(g.sm_clock_max_mhz(), max_mhz);
  EXPECT_EQ(g.clock_reasons_known(), reasons >= 0);
  if (reasons >= 0) {
    EXPECT_EQ(g.clock_reasons(), static_cast<uint64_t>(reasons));
  }
}

TEST(ReadNvml, Clocks_CurrentMaxAndReasons) {
  // Two GPUs: one at full clock, one held down by a hardware slowdown.
  for (const char* library : {FAKE_NVML_PATH, FAKE_NVML_LEGACY_PATH}) {
    SCOPED_TRACE(library);
    Result r = Read(library, Testdata("nvml_clocks.json"));
    EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
    EXPECT_THAT(Warnings(r), IsEmpty());
    ASSERT_EQ(r.gpus.size(), 2u);
    ExpectClocks(r.gpus[0], 1980, 1980, 0);
    // HW slowdown (0x8) and HW thermal slowdown (0x40); the legacy driver
    // answers through nvmlDeviceGetCurrentClocksThrottleReasons.
    ExpectClocks(r.gpus[1], 990, 1980, 0x48);
  }
}

TEST(ReadNvml, ClocksNotSupportedOrFailing_AreUnknown) {
  // No clock sections: NOT_SUPPORTED, silently unknown; a failing call is
  // unknown with a warning; a clock past 100,000 MHz is unknown.
  TempFixture fixture(R"({"devices": [
      {"uuid": "GPU-a", "name": "x", "busId": "0000:18:00.0"},
      {"uuid": "GPU-b", "name": "x", "busId": "0000:2a:00.0", "smClock": 4000000000,
       "smClockMax": 1980, "clockReasons": 8}],
      "errors": [{"fn": "nvmlDeviceGetCurrentClocksEventReasons", "device": 1, "rc": 999}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  ASSERT_EQ(r.gpus.size(), 2u);
  ExpectClocks(r.gpus[0], 0, 0, -1);
  ExpectClocks(r.gpus[1], 0, 1980, -1);
  EXPECT_THAT(Warnings(r), ElementsAre(AllOf(HasSubstr("nvmlDeviceGetCurrentClocksEventReasons"),
                                             HasSubstr("UNKNOWN (999)"))));
}

TEST(ReadNvml, FabricClique_AsTheGpuOperatorSpellsIt_OnlyOnceRegistered) {
  // GPU 0 registered; GPU 1 still registering (state 2); GPU 2 registered
  // with an error; GPU 3 has no fabric (NOT_SUPPORTED, silently).
  TempFixture fixture(R"({"devices": [
      {"uuid": "GPU-a", "name": "x", "busId": "0000:18:00.0",
       "fabric": {"clusterUuid": "0123456789abcdef0123456789abcdef", "cliqueId": 7}},
      {"uuid": "GPU-b", "name": "x", "busId": "0000:2a:00.0",
       "fabric": {"clusterUuid": "0123456789abcdef0123456789abcdef", "cliqueId": 7, "state": 2}},
      {"uuid": "GPU-c", "name": "x", "busId": "0000:3a:00.0",
       "fabric": {"clusterUuid": "0123456789abcdef0123456789abcdef", "cliqueId": 7,
                  "status": 999}},
      {"uuid": "GPU-d", "name": "x", "busId": "0000:5d:00.0"}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  EXPECT_THAT(Warnings(r), IsEmpty());
  ASSERT_EQ(r.gpus.size(), 4u);
  EXPECT_EQ(r.gpus[0].nvlink_clique(), "01234567-89ab-cdef-0123-456789abcdef.7");
  EXPECT_EQ(r.gpus[1].nvlink_clique(), "");
  EXPECT_EQ(r.gpus[2].nvlink_clique(), "");
  EXPECT_EQ(r.gpus[3].nvlink_clique(), "");
}

TEST(ReadNvml, UnterminatedUuid_IsRejected) {
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-x", "uuidUnterminated": true,
      "name": "NVIDIA H100 80GB HBM3", "busId": "0000:18:00.0", "cc": [9, 0]}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].uuid(), "");
  EXPECT_EQ(r.gpus[0].name(), "NVIDIA H100 80GB HBM3");
  EXPECT_THAT(Warnings(r),
              Contains(HasSubstr("UUID rejected: not NUL-terminated within its 80-byte buffer")));
}

TEST(ReadNvml, NonPrintableName_IsRejected) {
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "name": "H100\u001b[2J",
      "busId": "0000:18:00.0"}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].uuid(), "GPU-1");
  EXPECT_EQ(r.gpus[0].name(), "");
  EXPECT_THAT(Warnings(r), Contains(HasSubstr("name rejected: non-printable byte 0x1b")));
}

TEST(ReadNvml, UnparsableBusId_FallsBackToTheLegacyField) {
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "busId": "0000:3b:00.0",
      "rawBusId": "not a bus id"}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].pci_bus_id(), "0000:3b:00.0");
  EXPECT_THAT(Warnings(r), IsEmpty());
}

TEST(ReadNvml, NeitherBusIdUsable_IsWarnedAndLeftEmpty) {
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "busId": "0000:3b:00.0",
      "rawBusId": "0000000000000000000000000000000000000000", "rawBusIdLegacy": "zz"}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].pci_bus_id(), "");
  EXPECT_EQ(r.gpus[0].uuid(), "GPU-1");
  EXPECT_THAT(Warnings(r), Contains(AllOf(HasSubstr("busId not NUL-terminated"),
                                          HasSubstr("busIdLegacy 'zz' is not"))));
}

TEST(ReadNvml, NvSwitchSentinelInTheLegacyField_IsTheNvSwitch) {
  // What NCCL reads: only the legacy string says "FFFFFFF:FFFF:FF".
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "busId": "0000:18:00.0", "cc": [9, 0],
      "nvlinks": [{"links": [0, 1], "remoteBusId": "0000:00:00.0", "rawBusId": "",
                   "rawBusIdLegacy": "FFFFFFF:FFFF:FF"},
                  {"links": [2], "remoteBusId": "0000:2a:00.0"}]}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  ASSERT_EQ(r.gpus[0].nvlinks_size(), 2);
  EXPECT_EQ(r.gpus[0].nvlinks(0).target_bus_id(), "fffffff:ffff:ff");
  EXPECT_EQ(r.gpus[0].nvlinks(0).target_class(), "0x068000");
  EXPECT_EQ(r.gpus[0].nvlinks(0).count(), 2);
  EXPECT_EQ(r.gpus[0].nvlinks(1).target_bus_id(), "0000:2a:00.0");
  EXPECT_EQ(r.gpus[0].nvlinks(1).count(), 1);
}

TEST(ReadNvml, NvLinks_OnlyP2pCapableActiveLinksCount) {
  // sm 90: the state comes from field 165; where that field fails (link 3)
  // nvmlDeviceGetNvLinkState answers.
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "busId": "0000:18:00.0", "cc": [9, 0],
      "nvlinks": [{"links": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
                   "remoteBusId": "fffffff:ffff:ff"},
                  {"links": [14, 15], "active": false, "remoteBusId": "fffffff:ffff:ff"},
                  {"links": [16, 17], "p2p": false, "remoteBusId": "fffffff:ffff:ff"}]}],
      "errors": [{"fn": "field:165", "link": 3, "rc": 3},
                 {"fn": "nvmlDeviceGetNvLinkState", "link": 4, "rc": 3}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  ASSERT_EQ(r.gpus[0].nvlinks_size(), 1);
  // 0-13 active and P2P; link 4's nvmlDeviceGetNvLinkState error is never
  // asked (its field 165 answers).
  EXPECT_EQ(r.gpus[0].nvlinks(0).count(), 14);
  EXPECT_THAT(Warnings(r), IsEmpty());
}

TEST(ReadNvml, NvLinksBelowSm90_UseNvLinkState) {
  TempFixture fixture(R"({"devices": [{"uuid": "GPU-1", "busId": "0000:07:00.0", "cc": [8, 0],
      "nvlinks": [{"links": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
                   "remoteBusId": "0000:08:00.0"},
                  {"links": [12, 13], "remoteBusId": "0000:08:00.0"}]}],
      "errors": [{"fn": "nvmlDeviceGetNvLinkState", "link": 4, "rc": 3}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  ASSERT_EQ(r.gpus.size(), 1u);
  ASSERT_EQ(r.gpus[0].nvlinks_size(), 1);
  // sm 80: NCCL probes links 0-11 only; link 4's state is unknown.
  EXPECT_EQ(r.gpus[0].nvlinks(0).count(), 11);
}

TEST(ReadNvml, ManyErrors_WarningsAreCapped) {
  TempFixture fixture(R"({"devices": [
      {"uuid": "GPU-0", "busId": "0000:18:00.0", "cc": [9, 0]},
      {"uuid": "GPU-1", "busId": "0000:2a:00.0", "cc": [9, 0]},
      {"uuid": "GPU-2", "busId": "0000:3a:00.0", "cc": [9, 0]}],
      "errors": [{"fn": "nvmlDeviceGetNvLinkCapability", "rc": 999}]})");
  Result r = Read(FAKE_NVML_PATH, fixture.path());
  EXPECT_EQ(r.gpus.size(), 3u);
  // 3 x 18 links = 54 warnings: 32 shown and a count of the rest.
  ASSERT_EQ(r.probe.warnings_size(), 33);
  EXPECT_THAT(r.probe.warnings(32), HasSubstr("22 more NVML warnings not shown"));
}

TEST(ReadNvml, ConcurrentReads_AreSerialised) {
  UseFixture(Testdata("nvml_h100x8.json"));
  std::vector<Result> results(4);
  std::vector<std::thread> threads;
  for (Result& r : results) {
    threads.emplace_back([&r] {
      NvmlOptions options;
      options.library = FAKE_NVML_PATH;
      ReadNvml(options, &r.probe, &r.gpus);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Result& r : results) {
    EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
    EXPECT_EQ(r.gpus.size(), 8u);
  }
}

TEST(CpuMaskToCpumap, MatchesSysfsCpumap) {
  const uint64_t none[2] = {0, 0};
  EXPECT_EQ(CpuMaskToCpumap(none, 2, 64), "");
  const uint64_t eight[1] = {0xff};
  EXPECT_EQ(CpuMaskToCpumap(eight, 1, 8), "ff");
  EXPECT_EQ(CpuMaskToCpumap(eight, 1, 0), "000000ff");
  EXPECT_EQ(CpuMaskToCpumap(eight, 1, 40), "00,000000ff");
  const uint64_t high[2] = {0, 0x1};
  EXPECT_EQ(CpuMaskToCpumap(high, 2, 128), "00000000,00000001,00000000,00000000");
  EXPECT_EQ(CpuMaskToCpumap(high, 2, 0), "00000001,00000000,00000000");
  const uint64_t all[1] = {~0ull};
  EXPECT_EQ(CpuMaskToCpumap(all, 1, 64), "ffffffff,ffffffff");
  EXPECT_EQ(CpuMaskToCpumap(all, 1, 36), "f,ffffffff");  // bits past `cpus` dropped
}

TEST(NcclVersionString, BothEncodings) {
  EXPECT_EQ(NcclVersionString(22809), "2.28.9");
  EXPECT_EQ(NcclVersionString(21903), "2.19.3");
  EXPECT_EQ(NcclVersionString(20900), "2.9.0");
  EXPECT_EQ(NcclVersionString(2708), "2.7.8");
  EXPECT_EQ(NcclVersionString(0), "");
}

TEST(NvmlReturnName, KnownAndUnknown) {
  EXPECT_EQ(NvmlReturnName(9), "DRIVER_NOT_LOADED");
  EXPECT_EQ(NvmlReturnName(15), "GPU_IS_LOST");
  EXPECT_EQ(NvmlReturnName(999), "UNKNOWN");
  EXPECT_EQ(NvmlReturnName(77), "UNKNOWN_ERROR_77");
}

// The file behind a loaded library (its real path).
std::string LoadedPath(void* handle) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return "";
  char resolved[PATH_MAX];
  return realpath(map->l_name, resolved) != nullptr ? resolved : "";
}

TEST(ReadNcclVersion, RealLibnccl) {
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) GTEST_SKIP() << "no libnccl.so.2 on this machine: " << dlerror();
  v1::Source source;
  ReadNcclVersion("libnccl.so.2", &source);
  EXPECT_EQ(source.status(), v1::Source::OK) << source.reason();
  EXPECT_THAT(source.version(), MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
  // Installed libraries are named for their version (libnccl.so.2.28.9):
  // when this one is, the two must agree.
  std::string path = LoadedPath(handle);
  std::string::size_type at = path.rfind("libnccl.so.");
  std::string from_name = at == std::string::npos ? "" : path.substr(at + strlen("libnccl.so."));
  if (std::count(from_name.begin(), from_name.end(), '.') == 2) {
    EXPECT_EQ(source.version(), from_name) << path;
  }
  std::printf("libnccl.so.2: %s (%s)\n", source.version().c_str(), path.c_str());
}

TEST(ReadNcclVersion, MissingLibrary_IsAbsent) {
  v1::Source source;
  ReadNcclVersion("/nonexistent/libnccl.so.2", &source);
  EXPECT_EQ(source.status(), v1::Source::ABSENT);
  EXPECT_THAT(source.reason(), AllOf(HasSubstr("dlopen /nonexistent/libnccl.so.2: "),
                                     HasSubstr("No such file or directory")));
  EXPECT_EQ(source.version(), "");
}

TEST(ReadNcclVersion, LibraryWithoutNcclGetVersion_IsError) {
  v1::Source source;
  ReadNcclVersion(FAKE_NVML_PATH, &source);
  EXPECT_EQ(source.status(), v1::Source::ERROR);
  EXPECT_THAT(source.reason(), HasSubstr("has no ncclGetVersion"));
}

TEST(ReadNcclVersion, EmptyLibrary_IsSkipped) {
  v1::Source source;
  ReadNcclVersion("", &source);
  EXPECT_EQ(source.status(), v1::Source::SKIPPED);
}

}  // namespace
}  // namespace trainlet::topology

#include "topology/driver_procfs.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/testing/sysfs_builder.h"

namespace trainlet::topology {
namespace {

using ::testing::HasSubstr;
using testing::ScopedTempDir;
using testing::SysfsBuilder;

// The information file of a 550 driver, as the kernel module prints it.
constexpr char kH100[] =
    "Model: \t\t NVIDIA H100 80GB HBM3\n"
    "IRQ:   \t\t 251\n"
    "GPU UUID: \t GPU-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c6\n"
    "Video BIOS: \t 96.00.74.00.01\n"
    "Bus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\n"
    "DMA Mask: \t 0xfffffffffffff\n"
    "Bus Location: \t 0000:18:00.0\n"
    "Device Minor: \t 3\n"
    "GPU Firmware: \t 550.54.15\n"
    "GPU Excluded:\t No\n";

TEST(ParseGpuInformation, ADriversFile) {
  absl::StatusOr<DriverGpuInfo> info = ParseGpuInformation(kH100);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(info->uuid, "GPU-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c6");
  EXPECT_EQ(info->bus_id, "0000:18:00.0");
  EXPECT_EQ(info->minor, 3);
  EXPECT_FALSE(info->excluded);
}

TEST(ParseGpuInformation, ExcludedGpu) {
  std::string text = kH100;
  text.replace(text.find("GPU Excluded:\t No"), 17, "GPU Excluded:\t Yes");
  absl::StatusOr<DriverGpuInfo> info = ParseGpuInformation(text);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->excluded);
}

TEST(ParseGpuInformation, TruncatedBeforeTheMinorIsAnError) {
  std::string text(kH100);
  text.resize(text.find("Device Minor"));
  absl::StatusOr<DriverGpuInfo> info = ParseGpuInformation(text);
  EXPECT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("Device Minor"));
  // Cut inside the number's line: still a number, the part before the cut.
  text = kH100;
  text.resize(text.find("Bus Location") + 10);
  EXPECT_FALSE(ParseGpuInformation(text).ok());
}

TEST(ParseGpuInformation, MissingKeys) {
  EXPECT_THAT(ParseGpuInformation("Model: \t\t X\nDevice Minor: \t 0\n").status().message(),
              HasSubstr("Bus Location"));
  EXPECT_THAT(ParseGpuInformation("Bus Location: \t 0000:18:00.0\n").status().message(),
              HasSubstr("Device Minor"));
  // Only the two that place the GPU are needed: no UUID, no model.
  absl::StatusOr<DriverGpuInfo> info =
      ParseGpuInformation("Bus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->uuid, "");
  EXPECT_EQ(info->model, "");
  EXPECT_FALSE(info->excluded);
}

TEST(ParseGpuInformation, GarbageIsRejectedOrLeftOut) {
  EXPECT_FALSE(ParseGpuInformation("").ok());
  EXPECT_FALSE(ParseGpuInformation(std::string("\0\xff\xfe:\n\n::::", 10)).ok());
  EXPECT_FALSE(ParseGpuInformation("Bus Location: \t 18:00\nDevice Minor: \t 0\n").ok());
  EXPECT_FALSE(ParseGpuInformation("Bus Location: \t 0000:18:00.0\nDevice Minor: \t -1\n").ok());
  EXPECT_FALSE(
      ParseGpuInformation("Bus Location: \t 0000:18:00.0\nDevice Minor: \t 99999999999\n").ok());
  EXPECT_FALSE(ParseGpuInformation("Bus Location: \t 0000:18:00.0\nDevice Minor: \t 3x\n").ok());
  // A UUID the driver does not know yet, and a model with control bytes,
  // are left empty; the GPU still counts.
  // The driver prints question marks for the hex digits before it knows the UUID.
  const std::string unknown_uuid = "GPU-" + std::string(8, '?') + "-" + std::string(4, '?') + "-" +
                                   std::string(4, '?') + "-" + std::string(4, '?') + "-" +
                                   std::string(12, '?');
  absl::StatusOr<DriverGpuInfo> info =
      ParseGpuInformation("Model: \t\t bad\x1b[31m\nGPU UUID: \t " + unknown_uuid +
                          "\nBus Location: \t 0000:3B:00.0\nDevice Minor: \t 7\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "");
  EXPECT_EQ(info->uuid, "");
  EXPECT_EQ(info->bus_id, "0000:3b:00.0");  // Lowercase, as sysfs names it.
}

TEST(ParseGpuInformation, HugeValuesAreBounded) {
  std::string text = "Model: \t\t " + std::string(100000, 'A') + "\nGPU UUID: \t GPU-" +
                     std::string(5000, 'f') +
                     "\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n";
  absl::StatusOr<DriverGpuInfo> info = ParseGpuInformation(text);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "");
  EXPECT_EQ(info->uuid, "");
}

TEST(IsGpuUuid, Format) {
  EXPECT_TRUE(IsGpuUuid("GPU-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c6"));
  EXPECT_TRUE(IsGpuUuid("GPU-8F6C2A4E-1B2C-3D4E-5F60-718293A4B5C6"));
  EXPECT_FALSE(IsGpuUuid("MIG-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c6"));
  EXPECT_FALSE(IsGpuUuid("GPU-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c"));
  EXPECT_FALSE(IsGpuUuid("GPU-8f6c2a4e-1b2c-3d4e-5f60-718293a4b5c6-0"));
  EXPECT_FALSE(IsGpuUuid("GPU-8f6c2a4e1b2c3d4e5f60718293a4b5c6"));
  EXPECT_FALSE(IsGpuUuid("GPU-8f6c2a4g-1b2c-3d4e-5f60-718293a4b5c6"));
  EXPECT_FALSE(IsGpuUuid(""));
}

TEST(ParseDriverVersion, ProprietaryAndOpenModules) {
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue "
                               "Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0\n"),
            "550.54.15");
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                               "570.86.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu "
                               "Jan 23 22:50:36 UTC 2025\n"),
            "570.86.15");
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.104.05  "
                               "Sat Aug 19 01:13:17 UTC 2023\n"),
            "535.104.05");
  EXPECT_EQ(ParseDriverVersion(""), std::nullopt);
  EXPECT_EQ(ParseDriverVersion("GCC version: 12.2\n"), std::nullopt);
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  x.y\n"),
            std::nullopt);
  EXPECT_EQ(ParseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  " +
                               std::string(40, '1') + "." + "1\n"),
            std::nullopt);
}

class ReadDriverProcfsTest : public ::testing::Test {
 protected:
  ReadDriverProcfsTest() : b_(dir_.path()) {}
  DriverProcfsScan Read() { return ReadDriverProcfs(RootFs(b_.proc()), b_.dev(), &source_); }

  ScopedTempDir dir_;
  SysfsBuilder b_;
  v1::Source source_;
};

TEST_F(ReadDriverProcfsTest, NoDriverIsAbsent) {
  DriverProcfsScan scan = Read();
  EXPECT_EQ(source_.status(), v1::Source::ABSENT);
  EXPECT_THAT(source_.reason(), HasSubstr("no /proc/driver/nvidia/gpus"));
  EXPECT_TRUE(scan.gpus.empty());
}

TEST_F(ReadDriverProcfsTest, GpusInBusOrderOnlyWithTheirDeviceNodes) {
  b_.AddContainerGpu("0000:9a:00.0", 1, "GPU-00000000-0000-0000-0000-000000000001");
  b_.AddContainerGpu("0000:18:00.0", 0, "GPU-00000000-0000-0000-0000-000000000000");
  b_.AddContainerGpu("0000:2a:00.0", 2, "GPU-00000000-0000-0000-0000-000000000002");
  b_.AddContainerGpu("0000:3a:00.0", 3, "", /*excluded=*/true);
  ASSERT_EQ(unlink((b_.dev() + "/nvidia2").c_str()), 0);  // Not this container's.
  b_.AddDriverVersion("550.54.15");
  DriverProcfsScan scan = Read();
  EXPECT_EQ(source_.status(), v1::Source::OK);
  EXPECT_EQ(source_.version(), "550.54.15");
  ASSERT_EQ(scan.gpus.size(), 2u);
  EXPECT_EQ(scan.gpus[0].pci_bus_id(), "0000:18:00.0");
  EXPECT_EQ(scan.gpus[0].index(), 0);
  EXPECT_EQ(scan.gpus[0].minor_number(), 0);
  EXPECT_EQ(scan.gpus[1].pci_bus_id(), "0000:9a:00.0");
  EXPECT_EQ(scan.gpus[1].index(), 1);
  EXPECT_EQ(scan.gpus[1].uuid(), "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(scan.gpus[1].source(), "procfs");
  EXPECT_TRUE(scan.gpus[1].visible());
  EXPECT_EQ(scan.skipped, 2);
  ASSERT_EQ(scan.warnings.size(), 1u);
  EXPECT_THAT(scan.warnings[0], HasSubstr("GPU 0000:3a:00.0 is excluded by the NVIDIA driver"));
}

TEST_F(ReadDriverProcfsTest, BadEntriesAreWarningsWithEscapedNames) {
  b_.AddContainerGpu("0000:18:00.0", 0);
  // A folder that is not a bus id, one whose file names another GPU, one
  // with garbage, one without its file.
  b_.Write("/proc/driver/nvidia/gpus/evil\x1b[2J/information", "Device Minor: 0\n");
  b_.Write("/proc/driver/nvidia/gpus/0000:2a:00.0/information",
           "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n");
  b_.Write("/proc/driver/nvidia/gpus/0000:3a:00.0/information", std::string(8192, '\xff'));
  b_.Mkdir("/proc/driver/nvidia/gpus/0000:5d:00.0");
  b_.Write("/proc/driver/nvidia/version", "garbage\n");
  DriverProcfsScan scan = Read();
  EXPECT_EQ(source_.status(), v1::Source::OK);
  EXPECT_EQ(source_.version(), "");
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_EQ(scan.gpus[0].pci_bus_id(), "0000:18:00.0");
  EXPECT_EQ(scan.skipped, 3);
  ASSERT_EQ(scan.warnings.size(), 4u);
  std::string all;
  for (const std::string& w : scan.warnings) {
    all += w + "\n";
    for (char c : w) EXPECT_FALSE(c == '\x1b' || static_cast<unsigned char>(c) >= 0x7f) << w;
  }
  EXPECT_THAT(all, HasSubstr("names another bus location (0000:18:00.0)"));
  EXPECT_THAT(all, HasSubstr("0000:3a:00.0/information: no \"Bus Location:\" line"));
  EXPECT_THAT(all, HasSubstr("0000:5d:00.0/information cannot be read"));
  EXPECT_THAT(all, HasSubstr("not a PCI bus id"));
}

}  // namespace
}  // namespace trainlet::topology

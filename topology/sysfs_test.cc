#include "topology/sysfs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/testing/test_util.h"

namespace trainlet::topology {
namespace {

using testing::BuildCloudVm;
using testing::BuildCpuOnly;
using testing::BuildDgxH100;
using testing::DgxGpuBusIds;
using testing::DgxOptions;
using ::testing::ElementsAre;
using testing::FixtureTree;
using ::testing::HasSubstr;

TEST(NormalizeBusId, AcceptsSysfsAndNvmlSpellings) {
  EXPECT_EQ(NormalizeBusId("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizeBusId("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizeBusId("3b:1f.7"), "0000:3b:1f.7");
  EXPECT_EQ(NormalizeBusId(" 0001:00:04.0\n"), "0001:00:04.0");
  for (const char* bad : {"", "pci0000:00", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8",
                          "0000:3g:00.0", "000000000:3b:00.0", "0000:3b:00.0.1"}) {
    EXPECT_EQ(NormalizeBusId(bad), std::nullopt) << bad;
  }
}

TEST(IsBusId, OnlyLowercaseSysfsForm) {
  EXPECT_TRUE(IsBusId("0000:3b:00.0"));
  EXPECT_FALSE(IsBusId("0000:3B:00.0"));
  EXPECT_FALSE(IsBusId("pci0000:3b"));
  EXPECT_FALSE(IsBusId("virtio2"));
  EXPECT_FALSE(IsBusId("00000000:3b:00.0"));
}

TEST(ParseLinkSpeed, BothKernelSpellingsAndTheKnownGenerations) {
  EXPECT_EQ(ParseLinkSpeed("16.0 GT/s PCIe"), 16.0);
  EXPECT_EQ(ParseLinkSpeed("16 GT/s"), 16.0);  // Kernels <= 5.6.
  EXPECT_EQ(ParseLinkSpeed("2.5 GT/s PCIe"), 2.5);
  EXPECT_EQ(ParseLinkSpeed("64.0 GT/s PCIe\n"), 64.0);
  for (const char* bad : {"", "Unknown", "Unknown speed", "12 GT/s", "16.0 GB/s", "16.0 GT/s x"}) {
    EXPECT_EQ(ParseLinkSpeed(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(FormatLinkSpeed(8), "8.0 GT/s PCIe");
  EXPECT_EQ(FormatLinkSpeed(2.5), "2.5 GT/s PCIe");
  EXPECT_EQ(FormatLinkSpeed(7), "");
}

TEST(SysfsParsers, StatesRatesAndCpuSets) {
  EXPECT_EQ(StripStateNumber("4: ACTIVE"), "ACTIVE");
  EXPECT_EQ(StripStateNumber("5: LinkUp\n"), "LinkUp");
  EXPECT_EQ(StripStateNumber("ACTIVE"), "ACTIVE");
  EXPECT_EQ(ParseIbRateMbps("400 Gb/sec (4X NDR)"), 400000);
  EXPECT_EQ(ParseIbRateMbps("2.5 Gb/sec (1X SDR)"), 2500);
  EXPECT_EQ(ParseIbRateMbps("fast"), 0);
  EXPECT_TRUE(IsCpumap("ffffffff,00000000"));
  EXPECT_TRUE(IsCpumap("f"));
  EXPECT_FALSE(IsCpumap("0-23"));
  EXPECT_FALSE(IsCpumap(""));
  EXPECT_FALSE(IsCpumap("ffffffff,,0"));
  EXPECT_TRUE(IsCpulist("0-23,48-71"));
  EXPECT_TRUE(IsCpulist("5"));
  EXPECT_FALSE(IsCpulist("0-3-5"));
  EXPECT_FALSE(IsCpulist("ff"));
  EXPECT_EQ(NcclArch("aarch64"), "arm64");
  EXPECT_EQ(NcclArch("ppc64le"), "ppc64");
  EXPECT_EQ(NcclArch("x86_64"), "x86_64");
}

TEST(CpuMap, MatchesTheKernelsFormat) {
  EXPECT_EQ(testing::CpuMap(0, 55, 112), "0000,00000000,00ffffff,ffffffff");
  EXPECT_EQ(testing::CpuMap(56, 111, 112), "ffff,ffffffff,ff000000,00000000");
  EXPECT_EQ(testing::CpuMap(0, 7, 8), "ff");
  EXPECT_EQ(testing::CpuMap(0, 31, 64), "00000000,ffffffff");
}

TEST(RootFs, ResolvesRelativeAndAbsoluteLinksInsideTheRoot) {
  testing::ScopedTempDir dir;
  testing::SysfsBuilder b(dir.path());
  b.Write("/sys/devices/pci0000:00/0000:00:03.0/class", "0x020000\n");
  b.Symlink("/sys/bus/pci/devices/0000:00:03.0", "/sys/devices/pci0000:00/0000:00:03.0");
  RootFs fs(b.sys() + "/");
  EXPECT_EQ(fs.RealPath("/bus/pci/devices/0000:00:03.0"), "/devices/pci0000:00/0000:00:03.0");
  EXPECT_EQ(fs.Read("/bus/pci/devices/0000:00:03.0/class"), "0x020000");
  // An absolute target is taken inside the root; ".." stops at the root.
  ASSERT_EQ(symlink("/devices/pci0000:00", (b.sys() + "/abs").c_str()), 0);
  EXPECT_EQ(fs.RealPath("/abs/0000:00:03.0"), "/devices/pci0000:00/0000:00:03.0");
  ASSERT_EQ(symlink("../../../../../../devices", (b.sys() + "/up").c_str()), 0);
  EXPECT_EQ(fs.RealPath("/up/pci0000:00"), "/devices/pci0000:00");
  EXPECT_EQ(fs.RealPath("/bus/pci/devices/0000:00:04.0"), std::nullopt);
  ASSERT_EQ(symlink("loop", (b.sys() + "/loop").c_str()), 0);
  EXPECT_EQ(fs.RealPath("/loop"), std::nullopt);
  EXPECT_THAT(fs.List("/bus/pci/devices"), ElementsAre("0000:00:03.0"));
  EXPECT_TRUE(fs.List("/nope").empty());
}

TEST(RootFs, ReadsAreBounded) {
  testing::ScopedTempDir dir;
  testing::SysfsBuilder b(dir.path());
  b.Write("/sys/big", std::string(100000, 'x'));
  RootFs fs(b.sys());
  EXPECT_EQ(fs.Read("/big", 10)->size(), 10u);
  EXPECT_EQ(fs.Read("/big")->size(), 4096u);
  EXPECT_EQ(fs.Read("/missing"), std::nullopt);
  // A FIFO (no writer) reads as empty instead of blocking the probe.
  ASSERT_EQ(mkfifo((b.sys() + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(fs.Read("/fifo"), "");
}

TEST(ScanSysfs, DgxGpusWithPathLinkAndNuma) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  SysfsScan scan = ScanSysfs(RootFs(tree.builder().sys()), RootFs(tree.builder().proc()));
  ASSERT_EQ(scan.gpus.size(), 8u);  // The NVSwitches (0x068000) are not GPUs.
  for (size_t i = 0; i < 8; ++i) {
    const v1::Gpu& g = scan.gpus[i];
    EXPECT_EQ(g.index(), static_cast<int>(i));
    EXPECT_EQ(g.pci_bus_id(), DgxGpuBusIds()[i]);
    EXPECT_EQ(g.numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(g.pci_class(), "0x030200");
    EXPECT_EQ(g.link_speed(), "32.0 GT/s PCIe");
    EXPECT_EQ(g.link_width(), 16);
    EXPECT_EQ(g.pci_path_size(), 3);
    EXPECT_TRUE(g.visible());  // No /proc/driver/nvidia/gpus: every one.
    EXPECT_EQ(g.source(), "sysfs");
  }
  EXPECT_THAT(scan.gpus[0].pci_path(), ElementsAre("0000:15:01.0", "0000:16:00.0", "0000:17:00.0"));
  EXPECT_EQ(scan.gpus[0].root_complex(), "pci0000:15");
  EXPECT_EQ(scan.gpus[0].cpu_affinity(), "0000,00000000,00ffffff,ffffffff");
  EXPECT_EQ(scan.gpus[7].cpu_affinity(), "ffff,ffffffff,ff000000,00000000");
  ASSERT_EQ(scan.nics.size(), 10u);  // mlx5_0..8, eth0.
  EXPECT_EQ(scan.nics[0].name(), "mlx5_0");
  EXPECT_EQ(scan.nics[0].pci_bus_id(), "0000:19:00.0");
  EXPECT_EQ(scan.nics[0].speed_mbps(), 400000);
  EXPECT_EQ(scan.nics[0].ports(0).state(), "ACTIVE");
  EXPECT_EQ(scan.nics[8].name(), "mlx5_8");
  EXPECT_THAT(scan.nics[8].netdevs(), ElementsAre("ens9f0np0"));
  EXPECT_EQ(scan.nics[8].ports(0).link_layer(), "Ethernet");
  EXPECT_EQ(scan.nics[9].name(), "eth0");
  EXPECT_EQ(scan.nics[9].pci_bus_id(), "");  // A veth.
  EXPECT_EQ(scan.nics[9].speed_mbps(), 10000);
  ASSERT_EQ(scan.numa_nodes.size(), 2u);
  EXPECT_EQ(scan.numa_nodes[1].cpulist(), "56-111");
  EXPECT_TRUE(scan.warnings.empty());
}

TEST(ScanSysfs, LinkIsTheSmallerOfDeviceAndUpstreamPort) {
  FixtureTree tree;
  testing::SysfsBuilder& b = tree.builder();
  b.AddPci({"/devices/pci0000:00/0000:00:01.0", "0x060400", "0x8086", "0x1234", 0, "8.0 GT/s PCIe",
            8, 8});
  b.AddPci({"/devices/pci0000:00/0000:00:01.0/0000:01:00.0", "0x030200", "0x10de", "0x2330", 0,
            "16 GT/s", 16, 16});
  SysfsScan scan = ScanSysfs(RootFs(b.sys()), RootFs(b.proc()));
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_EQ(scan.gpus[0].link_speed(), "8.0 GT/s PCIe");
  EXPECT_EQ(scan.gpus[0].link_width(), 8);
  EXPECT_THAT(scan.gpus[0].pci_path(), ElementsAre("0000:00:01.0"));
}

TEST(ScanSysfs, OtherAcceleratorsByClass) {
  FixtureTree tree;
  testing::SysfsBuilder& b = tree.builder();
  b.AddPci({"/devices/pci0000:00/0000:00:05.0", "0x120000", "0x1da3", "0x1020", 0, "", 0, 0});
  b.AddPci({"/devices/pci0000:00/0000:00:06.0", "0x030200", "0x1002", "0x740f", 0, "", 0, 0});
  b.AddPci({"/devices/pci0000:00/0000:00:07.0", "0x030000", "0x1a03", "0x2000", 0, "", 0, 0});
  SysfsScan scan = ScanSysfs(RootFs(b.sys()), RootFs(b.proc()));
  ASSERT_EQ(scan.gpus.size(), 2u);  // Not the BMC's VGA (0x0300, not NVIDIA).
  EXPECT_EQ(scan.gpus[0].pci_class(), "0x120000");
  EXPECT_EQ(scan.gpus[1].vendor_id(), "0x1002");
  EXPECT_FALSE(scan.gpus[0].visible());  // Only NVIDIA GPUs can be CUDA's.
}

TEST(ScanSysfs, ContainerViewAndDegradedLinkAndDownPort) {
  FixtureTree tree;
  DgxOptions options;
  options.degraded_gpu = 7;
  options.down_nic = 3;
  options.container_gpus = {"0000:9a:00.0", "0000:ab:00.0"};
  BuildDgxH100(tree.builder(), options);
  SysfsScan scan = ScanSysfs(RootFs(tree.builder().sys()), RootFs(tree.builder().proc()));
  EXPECT_TRUE(scan.container_view);
  EXPECT_EQ(scan.hidden_by_container, 6);
  ASSERT_EQ(scan.gpus.size(), 8u);
  EXPECT_FALSE(scan.gpus[0].visible());
  EXPECT_TRUE(scan.gpus[4].visible());
  EXPECT_EQ(scan.gpus[4].minor_number(), 4);  // The fixture's minors are NVML indices.
  EXPECT_EQ(scan.gpus[5].minor_number(), 5);
  ASSERT_EQ(scan.warnings.size(), 2u);
  EXPECT_THAT(scan.warnings[0], HasSubstr("GPU 0000:db:00.0 runs its PCIe link at x8 of x16"));
  EXPECT_THAT(scan.warnings[1], HasSubstr("InfiniBand mlx5_3 port 1 is DOWN (Disabled)"));
}

TEST(ScanSysfs, CloudVmVirtioAndCpuOnly) {
  FixtureTree vm;
  BuildCloudVm(vm.builder());
  SysfsScan scan = ScanSysfs(RootFs(vm.builder().sys()), RootFs(vm.builder().proc()));
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_EQ(scan.gpus[0].numa_node(), -1);
  EXPECT_EQ(scan.gpus[0].link_speed(), "");
  EXPECT_EQ(scan.gpus[0].link_width(), 0);
  EXPECT_EQ(scan.gpus[0].root_complex(), "pci0000:00");
  EXPECT_TRUE(scan.gpus[0].pci_path().empty());
  ASSERT_EQ(scan.nics.size(), 1u);
  EXPECT_EQ(scan.nics[0].pci_bus_id(), "");  // virtio2 is not a PCI function.
  EXPECT_EQ(scan.nics[0].speed_mbps(), 0);   // -1: unknown.

  FixtureTree cpu;
  BuildCpuOnly(cpu.builder());
  scan = ScanSysfs(RootFs(cpu.builder().sys()), RootFs(cpu.builder().proc()));
  EXPECT_TRUE(scan.gpus.empty());
  ASSERT_EQ(scan.nics.size(), 1u);
  EXPECT_EQ(scan.nics[0].pci_bus_id(), "0000:00:03.0");
  EXPECT_EQ(scan.nics[0].numa_node(), 0);
  EXPECT_EQ(scan.nics[0].speed_mbps(), 1000);
}

TEST(ScanSysfs, HostileValuesAreDroppedOrEscaped) {
  FixtureTree tree;
  testing::SysfsBuilder& b = tree.builder();
  const std::string gpu = "/devices/pci0000:00/0000:00:04.0";
  b.AddPci({gpu, "0x030200", "0x10de", "0x2330", 0, "", 0, 0});
  b.Write("/sys" + gpu + "/device", "0x2330\" evil=\"1\n");
  b.Write("/sys" + gpu + "/max_link_speed", "32.0 GT/s PCIe\"/><x\n");
  b.AddNuma(0, "0-3", "not,a<map");
  b.AddInfiniband("mlx5_0", gpu, {{1, "4: ACTIVE\x1b[31m", "5: LinkUp", "x", "InfiniBand"}});
  SysfsScan scan = ScanSysfs(RootFs(b.sys()), RootFs(b.proc()));
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_EQ(scan.gpus[0].device_id(), "");
  EXPECT_EQ(scan.gpus[0].link_speed(), "");
  EXPECT_EQ(scan.numa_nodes[0].cpumap(), "");
  EXPECT_EQ(scan.nics[0].ports(0).state(), "ACTIVE\\x1b[31m");
}

TEST(ReadHostFacts, FromTheProcTree) {
  FixtureTree tree;
  BuildDgxH100(tree.builder());
  v1::NodeProbe probe;
  ReadHostFacts(RootFs(tree.builder().proc()), tree.Options().shm_path, &probe);
  EXPECT_EQ(probe.boot_id(), "3f2504e0-4f89-41d3-9a0c-0305e82c3301");
  EXPECT_EQ(probe.ipc_namespace(), "ipc:[4026531839]");
  EXPECT_EQ(probe.cpu_vendor(), "GenuineIntel");
  EXPECT_EQ(probe.cpu_family(), 6);
  EXPECT_EQ(probe.cpu_model(), 143);
  EXPECT_GT(probe.shm_bytes(), 0u);
  EXPECT_NE(probe.memlock_bytes(), 0);
  EXPECT_FALSE(probe.cpu_arch().empty());
  EXPECT_FALSE(probe.hostname().empty());
}

}  // namespace
}  // namespace trainlet::topology

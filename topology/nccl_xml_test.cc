#include "topology/nccl_xml.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/probe.h"
#include "topology/testing/fake_read_nvml.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/testing/test_util.h"

namespace trainlet::topology {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace nccl_xml_test {

using testing::ExpectGolden;
using testing::FixtureTree;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Stable;

// The reference's minimal example (gpu-topology.md §1.5), which NCCL 2.30.7's
// parser accepts.
constexpr char kExample[] = R"(<system version="1">
  <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:15:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:19:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0" guid="0xb83fd20300a1b2c3" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
)";

std::string Lint(const std::string& text) {
  absl::Status st = LintNcclXml(text);
  return st.ok() ? "OK" : std::string(st.message());
}

TEST(LintNcclXml, AcceptsTheReferenceExampleAndComments) {
  EXPECT_EQ(Lint(kExample), "OK");
  EXPECT_EQ(
      Lint("<!-- made by hand -->\n<system version='1'><!-- x --><cpu numaid=\"-1\"/></system>"),
      "OK");
  EXPECT_EQ(Lint("<system version=\"1\"></system>\r\n"), "OK");
}

TEST(LintNcclXml, RejectsADeclaration) {
  EXPECT_THAT(Lint(absl::StrCat("<?xml version=\"1.0\"?>\n", kExample)), HasSubstr("declaration"));
}

TEST(LintNcclXml, RejectsTabs) {
  EXPECT_THAT(Lint(absl::StrReplaceAll(kExample, {{"  <cpu", "\t<cpu"}})),
              HasSubstr("line 2: a tab"));
}

TEST(LintNcclXml, RejectsANewlineInsideATag) {
  EXPECT_THAT(Lint("<system version=\"1\">\n<cpu\n numaid=\"0\"/></system>"),
              HasSubstr("line 2: a newline inside a tag"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\n\"/></system>"), HasSubstr("newline"));
}

TEST(LintNcclXml, RejectsUnquotedValuesAndBadSpacing) {
  EXPECT_THAT(Lint("<system version=1></system>"), HasSubstr("unquoted"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\" /></system>"),
              HasSubstr("space before"));
  EXPECT_THAT(Lint("<system  version=\"1\"></system>"), HasSubstr("two spaces"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"arch=\"x\"/></system>"),
              HasSubstr("expected ' '"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid/></system>"), HasSubstr("no =value"));
}

TEST(LintNcclXml, RejectsMoreThanSixteenAttributes) {
  std::string attrs;
  for (int i = 0; i < 15; ++i) absl::StrAppend(&attrs, " x_", i, "=\"", i, "\"");
  EXPECT_EQ(Lint(absl::StrCat("<system version=\"1\"><cpu numaid=\"0\"", attrs, "/></system>")),
            "OK");
  EXPECT_THAT(Lint(absl::StrCat("<system version=\"1\"><cpu numaid=\"0\"", attrs,
                                " x_15=\"1\"/></system>")),
              HasSubstr("more than 16 attributes"));
}

TEST(LintNcclXml, RejectsLongNamesAndValues) {
  EXPECT_EQ(
      Lint(absl::StrCat("<system version=\"1\" name=\"", std::string(255, 'n'), "\"></system>")),
      "OK");
  EXPECT_THAT(
      Lint(absl::StrCat("<system version=\"1\" name=\"", std::string(256, 'n'), "\"></system>")),
      HasSubstr("over 255"));
  EXPECT_THAT(
      Lint(absl::StrCat("<system version=\"1\" ", std::string(256, 'a'), "=\"1\"></system>")),
      HasSubstr("over 255"));
}

TEST(LintNcclXml, RejectsTooManyChildrenAndNodes) {
  auto cpus = [](int n) {
    std::string out = "<system version=\"1\">\n";
    for (int i = 0; i < n; ++i) absl::StrAppend(&out, "<cpu numaid=\"", i, "\"/>\n");
    return out + "</system>\n";
  };
  EXPECT_EQ(Lint(cpus(255)), "OK");  // 256 elements with <system>.
  EXPECT_THAT(Lint(cpus(256)), HasSubstr("more than 256 elements"));
  // 641 children imply more than 256 elements, so the element limit is the
  // one such a file reports.
  EXPECT_THAT(Lint(cpus(700)), HasSubstr("more than 256 elements"));
}

TEST(LintNcclXml, RejectsBadBusIds) {
  for (const char* bad :
       {"0000:18:00.0 ", "0000:1A:00.0", "00000000:18:00.0", "18:00.0", "0000:18:00.10"}) {
    std::string text = absl::StrCat("<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"", bad,
                                    "\"/></cpu></system>");
    EXPECT_THAT(Lint(text), Not("OK")) << bad;
  }
  EXPECT_THAT(
      Lint("<system version=\"1\"><cpu numaid=\"0\"><pci class=\"0x060400\"/></cpu></system>"),
      HasSubstr("busid"));
  EXPECT_THAT(Lint(absl::StrReplaceAll(kExample, {{"fffffff:ffff:ff", "0000:AB:00.0"}})),
              HasSubstr("nvlink target"));
  EXPECT_THAT(Lint(absl::StrReplaceAll(kExample, {{"class=\"0x060400\"", "class=\"0x60400\""}})),
              HasSubstr("class"));
}

TEST(LintNcclXml, RequiresVersionOne) {
  EXPECT_THAT(Lint("<system version=\"2\"></system>"), HasSubstr("version=\"1\""));
  EXPECT_THAT(Lint("<system></system>"), HasSubstr("version=\"1\""));
}

TEST(LintNcclXml, EnforcesTheElementTree) {
  EXPECT_THAT(Lint("<cpu numaid=\"0\"/>"), HasSubstr("root must be <system>"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"><gpu dev=\"0\"/></cpu></system>"),
              HasSubstr("<gpu> may not be inside <cpu>"));
  EXPECT_THAT(Lint("<system version=\"1\"><pci busid=\"0000:18:00.0\"/></system>"),
              HasSubstr("<pci> may not be inside <system>"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"><nic><pci "
                   "busid=\"0000:18:00.0\"/></nic></cpu></system>"),
              HasSubstr("<pci> may not be inside <nic>"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"><foo/></cpu></system>"),
              HasSubstr("<foo> may not be inside <cpu>"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"></pci></system>"),
              HasSubstr("close tag does not match"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\">text</cpu></system>"),
              HasSubstr("text between elements"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"/>"), HasSubstr("never closed"));
  EXPECT_THAT(Lint("<system version=\"1\"></system><system version=\"1\"></system>"),
              HasSubstr("after </system>"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\"><nic><net/></nic></cpu></system>"),
              HasSubstr("<net> needs a name"));
}

TEST(LintNcclXml, CpuAttributes) {
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"0\" affinity=\"0-23\"/></system>"),
              HasSubstr("cpumap"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu numaid=\"zero\"/></system>"), HasSubstr("numaid"));
  EXPECT_THAT(Lint("<system version=\"1\"><cpu/></system>"), HasSubstr("numaid"));
}

v1::NodeProbe ProbeOf(void (*build)(testing::SysfsBuilder&), bool nvml) {
  FixtureTree tree;
  build(tree.builder());
  ProbeOptions options = tree.Options();
  if (nvml) options.read_nvml = testing::FakeH100Nvml(testing::DgxGpuBusIds());
  return Stable(ProbeNode(options));
}

void BuildDgx(testing::SysfsBuilder& b) { testing::BuildDgxH100(b); }

TEST(NcclTopologyXml, GoldenFilesPassTheLinter) {
  struct Case {
    const char* golden;
    v1::NodeProbe probe;
  } cases[] = {
      {"dgx_h100.xml", ProbeOf(BuildDgx, true)},
      {"cloud_vm.xml", ProbeOf(testing::BuildCloudVm, false)},
      {"cpu_only.xml", ProbeOf(testing::BuildCpuOnly, false)},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> xml = NcclTopologyXml(c.probe);
    ASSERT_TRUE(xml.ok()) << c.golden << ": " << xml.status();
    EXPECT_TRUE(LintNcclXml(*xml).ok()) << c.golden;
    EXPECT_THAT(*xml, Not(HasSubstr("<?xml")));
    ExpectGolden(c.golden, *xml);
  }
}

TEST(NcclTopologyXml, SwitchesAsNcclBuildsThem) {
  std::string xml = *NcclTopologyXml(ProbeOf(BuildDgx, true));
  // The GPU and its NIC under their switch's upstream port; neither the root
  // port nor the downstream ports appear.
  EXPECT_THAT(xml,
              HasSubstr("<pci busid=\"0000:16:00.0\" class=\"0x060400\">\n"
                        "      <pci busid=\"0000:18:00.0\" class=\"0x030200\" vendor=\"0x10de\" "
                        "device=\"0x2330\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/>\n"
                        "      <pci busid=\"0000:19:00.0\" class=\"0x020700\"/>\n"));
  EXPECT_THAT(xml, Not(HasSubstr("0000:15:01.0")));
  EXPECT_THAT(xml, Not(HasSubstr("0000:17:00.0")));
  EXPECT_THAT(xml, Not(HasSubstr("<gpu")));
  EXPECT_THAT(xml, Not(HasSubstr("<nic")));
  // The storage NIC sits directly on a root port: right under its CPU.
  EXPECT_THAT(xml, HasSubstr("    <pci busid=\"0000:c1:00.0\" class=\"0x020000\"/>"));
}

TEST(NcclTopologyXml, InvalidValuesAreLeftOut) {
  v1::NodeProbe probe;
  probe.set_cpu_arch("x86_64");
  probe.set_cpu_vendor("Genuine\"Intel");
  v1::NumaNode* node = probe.add_numa_nodes();
  node->set_id(0);
  node->set_cpumap("0-3");
  v1::Gpu* gpu = probe.add_gpus();
  gpu->set_pci_bus_id("0000:18:00.0");
  gpu->set_root_complex("pci0000:15");
  gpu->set_numa_node(0);
  gpu->set_pci_class("0x030200\" x=\"");
  gpu->set_link_speed("99 GT/s");
  v1::Gpu* unplaced = probe.add_gpus();  // NVML only: no PCI path.
  unplaced->set_pci_bus_id("0000:2a:00.0");
  absl::StatusOr<std::string> xml = NcclTopologyXml(probe);
  ASSERT_TRUE(xml.ok()) << xml.status();
  EXPECT_EQ(*xml,
            "<system version=\"1\">\n"
            "  <cpu numaid=\"0\" arch=\"x86_64\">\n"
            "    <pci busid=\"0000:18:00.0\"/>\n"
            "  </cpu>\n"
            "</system>\n");
}

TEST(NcclTopologyXml, MoreDevicesThanNcclsParserTakesIsAnError) {
  v1::NodeProbe probe;
  for (int i = 0; i < 300; ++i) {
    v1::Gpu* gpu = probe.add_gpus();
    gpu->set_pci_bus_id(absl::StrFormat("0000:%02x:%02x.0", i / 32, i % 32));
    gpu->set_root_complex("pci0000:00");
    gpu->set_numa_node(0);
  }
  absl::StatusOr<std::string> xml = NcclTopologyXml(probe);
  ASSERT_FALSE(xml.ok());
  EXPECT_EQ(xml.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(xml.status().message(), HasSubstr("to a limit of 256"));
  EXPECT_THAT(xml.status().message(), HasSubstr("leave NCCL_TOPO_FILE unset"));
}

TEST(NcclTopologyXml, LeavesNcclRoomForItsOwnNodes) {
  // 220 elements pass the parser's 256 alone, but NCCL adds a <gpu>, its
  // NVLinks and a <nic><net> per NIC to the same arena.
  v1::NodeProbe probe;
  for (int i = 0; i < 218; ++i) {
    v1::Gpu* gpu = probe.add_gpus();
    gpu->set_pci_bus_id(absl::StrFormat("0000:%02x:%02x.0", i / 32, i % 32));
    gpu->set_root_complex("pci0000:00");
    gpu->set_numa_node(0);
  }
  for (int i = 0; i < 10; ++i) probe.add_nics()->set_name(absl::StrCat("veth", i));
  absl::StatusOr<std::string> xml = NcclTopologyXml(probe);
  ASSERT_FALSE(xml.ok());
  EXPECT_THAT(xml.status().message(), HasSubstr("NCCL adds 40 of its own"));
  probe.clear_nics();
  probe.mutable_gpus()->DeleteSubrange(200, 18);
  EXPECT_TRUE(NcclTopologyXml(probe).ok());
}

}  // namespace nccl_xml_test
}  // namespace
}  // namespace trainlet::topology

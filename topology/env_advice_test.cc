#include "topology/env_advice.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/probe.h"
#include "topology/testing/fake_read_nvml.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/testing/test_util.h"

namespace trainlet::topology {
namespace {

using ::testing::ElementsAre;
using testing::ExpectGolden;
using testing::FixtureTree;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Stable;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A fixture's probe with fixed pod limits and eth0 carrying 10.0.0.5.
v1::NodeProbe ProbeOf(void (*build)(testing::SysfsBuilder&), bool nvml, uint64_t shm,
                      int64_t memlock) {
  FixtureTree tree;
  build(tree.builder());
  ProbeOptions options = tree.Options();
  if (nvml) options.read_nvml = testing::FakeH100Nvml(testing::DgxGpuBusIds());
  v1::NodeProbe probe = Stable(ProbeNode(options));
  probe.set_shm_bytes(shm);
  probe.set_memlock_bytes(memlock);
  for (v1::Nic& nic : *probe.mutable_nics()) {
    if (nic.name() == "eth0") nic.add_addrs("10.0.0.5");
  }
  return probe;
}

void BuildDgx(testing::SysfsBuilder& b) { testing::BuildDgxH100(b); }

std::string Value(const EnvAdvice& advice, const std::string& name) {
  for (const EnvVar& v : advice.vars) {
    if (v.name == name) return v.value;
  }
  return "<unset>";
}

TEST(AdviseEnv, GoldenFiles) {
  EnvContext context;
  context.advertise_addr = "10.0.0.5";
  ExpectGolden("dgx_h100.env",
               FormatEnvAdvice(AdviseEnv(ProbeOf(BuildDgx, true, 64 * kMiB, 8 * kMiB), context)));
  ExpectGolden(
      "cloud_vm.env",
      FormatEnvAdvice(AdviseEnv(ProbeOf(testing::BuildCloudVm, false, 4096 * kMiB, -1), context)));
  ExpectGolden(
      "cpu_only.env",
      FormatEnvAdvice(AdviseEnv(ProbeOf(testing::BuildCpuOnly, false, 2048 * kMiB, -1), context)));
}

TEST(AdviseEnv, DgxVariables) {
  EnvContext context;
  context.advertise_addr = "10.0.0.5";
  EnvAdvice advice = AdviseEnv(ProbeOf(BuildDgx, true, 4096 * kMiB, -1), context);
  EXPECT_EQ(Value(advice, "NCCL_SOCKET_IFNAME"), "=eth0");
  // The InfiniBand rails, not the RoCE storage NIC mlx5_8.
  EXPECT_EQ(Value(advice, "NCCL_IB_HCA"),
            "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
  EXPECT_EQ(Value(advice, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  EXPECT_EQ(Value(advice, "NCCL_HOSTID"), "<unset>");
  EXPECT_THAT(advice.warnings, IsEmpty());
}

TEST(AdviseEnv, ADownPortIsLeftOut) {
  FixtureTree tree;
  testing::DgxOptions dgx;
  dgx.down_nic = 2;
  testing::BuildDgxH100(tree.builder(), dgx);
  EnvAdvice advice = AdviseEnv(ProbeNode(tree.Options()), {});
  EXPECT_EQ(Value(advice, "NCCL_IB_HCA"),
            "=mlx5_0:1,mlx5_1:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
}

TEST(AdviseEnv, RoceOnlyNodeUsesItsEthernetPorts) {
  v1::NodeProbe probe;
  for (const char* name : {"mlx5_0", "mlx5_1"}) {
    v1::Nic* nic = probe.add_nics();
    nic->set_name(name);
    nic->set_kind(v1::Nic::INFINIBAND);
    v1::IbPort* port = nic->add_ports();
    port->set_port(1);
    port->set_state("ACTIVE");
    port->set_link_layer("Ethernet");
  }
  probe.add_gpus()->set_visible(true);
  EXPECT_EQ(Value(AdviseEnv(probe, {}), "NCCL_IB_HCA"), "=mlx5_0:1,mlx5_1:1");
}

TEST(AdviseEnv, NoGpuVisibleNoNcclAdviceButThePodLimits) {
  // A CPU job (gloo) on a node with InfiniBand, sharing its machine with
  // another pod of the job: nothing it runs reads NCCL's variables.
  EnvContext context;
  context.advertise_addr = "10.0.0.5";
  context.nccl_hostid = "node-a";
  v1::NodeProbe probe = ProbeOf(BuildDgx, true, 64 * kMiB, -1);
  for (v1::Gpu& gpu : *probe.mutable_gpus()) gpu.set_visible(false);
  EXPECT_FALSE(NcclAdviceApplies(probe));
  EnvAdvice advice = AdviseEnv(probe, context);
  EXPECT_THAT(advice.vars, IsEmpty());
  EXPECT_THAT(advice.notes, ElementsAre(HasSubstr("no GPU visible")));
  EXPECT_THAT(advice.warnings, ElementsAre(HasSubstr("/dev/shm is 64 MiB")));
  probe.mutable_gpus(0)->set_visible(true);
  EXPECT_TRUE(NcclAdviceApplies(probe));
  EXPECT_EQ(Value(AdviseEnv(probe, context), "NCCL_HOSTID"), "node-a");
}

TEST(JobSocketInterface, TheFirstNumericAddressOfTheJobTheSameOnEveryNode) {
  // Node 0 (MASTER_ADDR is its own address) and node 1 route to the same
  // address, so both say lo here; names are skipped, never resolved.
  EXPECT_EQ(JobSocketInterface({"127.0.0.1", "127.0.0.1", "127.0.0.1"}), "lo");
  EXPECT_EQ(JobSocketInterface({"job-node-0-0.job", "job-node-0-0.job", "127.0.0.1"}), "lo");
  EXPECT_EQ(JobSocketInterface({"job-node-0-0.job", "not an address"}), "");
  EXPECT_EQ(JobSocketInterface({}), "");
}

TEST(AdviseEnv, SocketInterfaceFromTheContextWins) {
  EnvContext context;
  context.advertise_addr = "10.0.0.5";
  context.socket_interface = "net1";
  EnvAdvice advice = AdviseEnv(ProbeOf(BuildDgx, true, 4096 * kMiB, -1), context);
  EXPECT_EQ(Value(advice, "NCCL_SOCKET_IFNAME"), "=net1");
  context.socket_interface = "";
  context.advertise_addr = "192.168.9.9";
  advice = AdviseEnv(ProbeOf(BuildDgx, true, 4096 * kMiB, -1), context);
  EXPECT_EQ(Value(advice, "NCCL_SOCKET_IFNAME"), "<unset>");
  EXPECT_THAT(advice.notes, ElementsAre(HasSubstr("no interface of this pod carries 192.168.9.9")));
}

TEST(AdviseEnv, NeverAVariableTheUserSet) {
  EnvContext context;
  context.advertise_addr = "10.0.0.5";
  context.nccl_hostid = "node-a";
  context.user_env = {{"NCCL_IB_HCA", "mlx5_0"}, {"NCCL_SOCKET_IFNAME", ""}};
  EnvAdvice advice = AdviseEnv(ProbeOf(BuildDgx, true, 4096 * kMiB, -1), context);
  EXPECT_EQ(Value(advice, "NCCL_IB_HCA"), "<unset>");
  EXPECT_EQ(Value(advice, "NCCL_SOCKET_IFNAME"), "<unset>");
  EXPECT_EQ(Value(advice, "NCCL_HOSTID"), "node-a");
  EXPECT_THAT(advice.notes,
              ::testing::Contains(HasSubstr("NCCL_IB_HCA left as the user set it (\"mlx5_0\")")));
  EXPECT_THAT(advice.notes, ::testing::Contains(HasSubstr("NCCL_SOCKET_IFNAME left as the user")));
  EXPECT_THAT(advice.notes, ::testing::Contains(HasSubstr("hostIPC")));
}

TEST(PodLimitWarnings, ShmAndMemlock) {
  v1::NodeProbe probe;
  probe.set_shm_bytes(64 * kMiB);
  probe.set_memlock_bytes(8 * kMiB);
  // No GPU and no RDMA device: memlock does not matter.
  EXPECT_THAT(PodLimitWarnings(probe), ElementsAre(HasSubstr("/dev/shm is 64 MiB")));
  probe.add_gpus();
  std::vector<std::string> w = PodLimitWarnings(probe);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], HasSubstr("emptyDir with medium: Memory at /dev/shm"));
  EXPECT_THAT(w[1], HasSubstr("memlock limit (RLIMIT_MEMLOCK) is 8 MiB"));
  EXPECT_THAT(w[1], HasSubstr("unlimited"));
  probe.set_shm_bytes(uint64_t{1} << 30);
  probe.set_memlock_bytes(-1);
  EXPECT_THAT(PodLimitWarnings(probe), IsEmpty());
  probe.set_shm_bytes(0);  // Unknown: no warning.
  EXPECT_THAT(PodLimitWarnings(probe), IsEmpty());
}

TEST(InterfaceRoutingTo, LoopbackAndNonsense) {
  EXPECT_EQ(InterfaceRoutingTo("127.0.0.1"), "lo");
  EXPECT_EQ(InterfaceRoutingTo("not-an-address"), "");
  EXPECT_EQ(InterfaceRoutingTo(""), "");
}

TEST(FormatEnvAdvice, ShellSafe) {
  EnvAdvice advice;
  advice.vars = {{"A", "it's"}, {"B", "$(rm -rf /)"}, {"bad name", "x"}, {"1X", "y"}};
  advice.warnings = {"line\nbreak"};
  advice.notes = {"a note"};
  EXPECT_EQ(FormatEnvAdvice(advice),
            "export A='it'\\''s'\n"
            "export B='$(rm -rf /)'\n"
            "# warning: line\\nbreak\n"
            "# note: a note\n");
}

TEST(NcclConfFileVars, TheUsersAndTheSystemsFilesCountAsSet) {
  testing::ScopedTempDir dir;
  auto write = [&](const std::string& path, const std::string& text) {
    const std::string full = dir.path() + path;
    ASSERT_EQ(system(("mkdir -p $(dirname " + full + ")").c_str()), 0);
    FILE* f = fopen(full.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(text.c_str(), f);
    fclose(f);
  };
  write("/home/u/.nccl.conf", "# mine\nNCCL_IB_HCA=mlx5_1\n  NCCL_DEBUG = WARN \nnot a line\n");
  write("/etc/nccl.conf", "NCCL_IB_HCA=mlx5_9\nNCCL_SOCKET_IFNAME=eth1\n");
  auto vars = NcclConfFileVars({{"HOME", "/home/u"}}, dir.path());
  EXPECT_EQ(vars["NCCL_IB_HCA"], "mlx5_1") << "the user's file wins, as in NCCL";
  EXPECT_EQ(vars["NCCL_DEBUG"], "WARN");
  EXPECT_EQ(vars["NCCL_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(vars.count("not a line"), 0u);
  // NCCL_CONF_FILE replaces ~/.nccl.conf.
  write("/other.conf", "NCCL_P2P_LEVEL=NVL\n");
  vars = NcclConfFileVars({{"HOME", "/home/u"}, {"NCCL_CONF_FILE", "/other.conf"}}, dir.path());
  EXPECT_EQ(vars.count("NCCL_DEBUG"), 0u);
  EXPECT_EQ(vars["NCCL_P2P_LEVEL"], "NVL");
  // Advice then leaves them alone.
  EnvContext context;
  context.user_env = vars;
  v1::NodeProbe probe;
  v1::Nic* nic = probe.add_nics();
  nic->set_name("eth0");
  nic->set_kind(v1::Nic::NET);
  context.socket_interface = "eth0";
  context.user_env["NCCL_SOCKET_IFNAME"] = "eth1";
  EnvAdvice advice = AdviseEnv(probe, context);
  for (const EnvVar& v : advice.vars) EXPECT_NE(v.name, "NCCL_SOCKET_IFNAME");
}

}  // namespace
}  // namespace trainlet::topology

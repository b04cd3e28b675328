#include "config/system_probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using FakeRoot = trainlet::testing::TempRoot;

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

TEST(FindFqdnInHosts, KubernetesHostsFile) {
  const char* hosts =
      "# Kubernetes-managed hosts file.\n"
      "127.0.0.1\tlocalhost\n"
      "::1\tlocalhost ip6-localhost ip6-loopback\n"
      "10.244.1.7\tt-node-0-1.t.default.svc.cluster.local\tt-node-0-1\n";
  EXPECT_EQ(FindFqdnInHosts(hosts, "t-node-0-1"), "t-node-0-1.t.default.svc.cluster.local");
  EXPECT_EQ(FindFqdnInHosts(hosts, "t-node-0-2"), "");
  EXPECT_EQ(FindFqdnInHosts(hosts, ""), "");
}

TEST(FindFqdnInHosts, IgnoresLinesNotListingTheHostnameAndComments) {
  EXPECT_EQ(FindFqdnInHosts("10.0.0.1 h.other.ns.svc.cluster.local\n", "h"), "");
  EXPECT_EQ(FindFqdnInHosts("# 10.0.0.1 h.sub.ns.svc h\n", "h"), "");
  EXPECT_EQ(FindFqdnInHosts("10.0.0.1 h # h.sub.ns.svc\n", "h"), "");
  EXPECT_EQ(FindFqdnInHosts("10.0.0.1 hx.sub.ns.svc hx h\n", "h"), "");
  EXPECT_EQ(FindFqdnInHosts("10.0.0.1 h h.sub.ns.svc.cluster.local.\n", "h"),
            "h.sub.ns.svc.cluster.local");
}

TEST(ParseCpuMax, Forms) {
  EXPECT_EQ(ParseCpuMax("150000 100000\n"), 2);
  EXPECT_EQ(ParseCpuMax("200000 100000"), 2);
  EXPECT_EQ(ParseCpuMax("9223372036854775807 91"), INT_MAX);  // no overflow rounding up
  EXPECT_EQ(ParseCpuMax("50000 100000"), 1);
  EXPECT_EQ(ParseCpuMax("max 100000"), std::nullopt);
  EXPECT_EQ(ParseCpuMax(""), std::nullopt);
  EXPECT_EQ(ParseCpuMax("garbage"), std::nullopt);
  EXPECT_EQ(ParseCpuMax("300000"), 3);
}

TEST(CgroupCpuLimit, RootCpuMax) {
  FakeRoot root;
  root.Write("sys/fs/cgroup/cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.path()), 2);
}

TEST(CgroupCpuLimit, TightestQuotaOnThePathFromOurCgroup) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  root.Write("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  root.Write("sys/fs/cgroup/kubepods/pod1/cpu.max", "300000 100000\n");
  root.Write("sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.path()), 3);
}

TEST(CgroupCpuLimit, UnlimitedOrMissing) {
  FakeRoot root;
  EXPECT_EQ(CgroupCpuLimit(root.path()), std::nullopt);
  root.Write("sys/fs/cgroup/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.path()), std::nullopt);
}

TEST(CountNvidiaDevices, CountsOnlyNumberedDevices) {
  FakeRoot root;
  for (const char* dev : {"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm",
                          "nvidia-caps", "nvidia"}) {
    root.Write(std::string("dev/") + dev, "");
  }
  EXPECT_EQ(CountNvidiaDevices(root.path()), 4);
  FakeRoot empty;
  EXPECT_EQ(CountNvidiaDevices(empty.path()), 0);
}

using Env = std::map<std::string, std::string>;
using ::testing::Contains;
using ::testing::HasSubstr;

int Visible(int devices, const Env& env) { return VisibleGpus(devices, env).count; }

TEST(VisibleGpus, NoVariablesMeansEveryDevice) {
  EXPECT_EQ(Visible(8, {}), 8);
  EXPECT_EQ(Visible(0, {}), 0);
  EXPECT_THAT(VisibleGpus(8, {}).note, HasSubstr("8 /dev/nvidia* devices"));
}

TEST(VisibleGpus, CudaVisibleDevicesOrdinals) {
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "0,1"}}), 2);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "3"}}), 1);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", " 2 , 5 ,7"}}), 3);
  // CUDA reads each entry like strtoul: "1gpu" is 1.
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "1gpu,2ampere"}}), 2);
  GpuVisibility v = VisibleGpus(8, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_THAT(v.note, HasSubstr("2 of 8 /dev/nvidia* devices"));
  EXPECT_THAT(v.note, HasSubstr("CUDA_VISIBLE_DEVICES=\"0,1\""));
}

TEST(VisibleGpus, CudaVisibleDevicesNone) {
  for (const char* none : {"", "-1", "none", "void", "NoDevFiles", " "}) {
    EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", none}}), 0) << "\"" << none << "\"";
  }
}

TEST(VisibleGpus, CudaVisibleDevicesStopsAtTheFirstInvalidEntry) {
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "0,1,-1,2"}}), 2);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "0,x,2"}}), 1);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "0,,2"}}), 1);
  // An ordinal beyond the devices there are ends the list too.
  EXPECT_EQ(Visible(2, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}), 2);
  EXPECT_EQ(Visible(2, {{"CUDA_VISIBLE_DEVICES", "1,5,0"}}), 1);
  EXPECT_EQ(Visible(0, {{"CUDA_VISIBLE_DEVICES", "0,1"}}), 0);
  // A repeated ordinal makes the whole list empty.
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "0,1,0"}}), 0);
}

TEST(VisibleGpus, CudaVisibleDevicesUuids) {
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb"}}), 2);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "GPU-aaaa,1,GPU-cccc"}}), 1);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-aaaa"}}), 0);
  EXPECT_EQ(Visible(8, {{"CUDA_VISIBLE_DEVICES", "MIG-1234"}}), 1);
  EXPECT_EQ(Visible(1, {{"CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b,GPU-c"}}), 1);
  EXPECT_EQ(Visible(0, {{"CUDA_VISIBLE_DEVICES", "GPU-a"}}), 0);
}

TEST(VisibleGpus, NvidiaVisibleDevices) {
  EXPECT_EQ(Visible(4, {{"NVIDIA_VISIBLE_DEVICES", "all"}}), 4);
  EXPECT_EQ(Visible(0, {{"NVIDIA_VISIBLE_DEVICES", "all"}}), 0);  // No GPU runtime.
  // The runtime's own settings leave the devices the container has: "void"
  // under CDI injection, a path with the device plugin's volume-mounts.
  for (const char* kept : {"", "none", "void", "/var/run/nvidia-container-devices"}) {
    EXPECT_EQ(Visible(4, {{"NVIDIA_VISIBLE_DEVICES", kept}}), 4) << kept;
  }
  EXPECT_EQ(Visible(8, {{"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"}}), 2);
  EXPECT_EQ(Visible(8, {{"NVIDIA_VISIBLE_DEVICES", "0,1,2"}}), 3);
  EXPECT_EQ(Visible(2, {{"NVIDIA_VISIBLE_DEVICES", "0,1,2"}}), 2);
  // Both: CUDA never reads NVIDIA_VISIBLE_DEVICES; its ordinals index every
  // device it can open.
  EXPECT_EQ(Visible(8, {{"NVIDIA_VISIBLE_DEVICES", "4,5"}, {"CUDA_VISIBLE_DEVICES", "0,1,2"}}), 3);
  EXPECT_EQ(Visible(8, {{"NVIDIA_VISIBLE_DEVICES", "void"}, {"CUDA_VISIBLE_DEVICES", "0"}}), 1);
  EXPECT_THAT(VisibleGpus(8, {{"NVIDIA_VISIBLE_DEVICES", "none"}}).note,
              HasSubstr("NVIDIA_VISIBLE_DEVICES=\"none\" ignored"));
}

TEST(VisibleGpus, NoteEscapesAndBoundsTheValue) {
  std::string note = VisibleGpus(8, {{"CUDA_VISIBLE_DEVICES", "0\n" + std::string(500, 'x')}}).note;
  EXPECT_THAT(note, HasSubstr("\\n"));
  EXPECT_LT(note.size(), 200u);
}

TEST(LocalInterfaceAddresses, IncludesLoopback) {
  EXPECT_THAT(LocalInterfaceAddresses(), Contains("127.0.0.1"));
}

TEST(ResolveHostBounded, LocalhostAndAnInvalidName) {
  std::optional<ResolvedHost> local = ResolveHostBounded("localhost", absl::Seconds(5));
  ASSERT_TRUE(local.has_value());
  EXPECT_THAT(local->addrs, Contains("127.0.0.1"));
  absl::Time start = absl::Now();
  EXPECT_EQ(ResolveHostBounded("no-such-host.invalid", absl::Seconds(2)), std::nullopt);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(ProbeSystem, ReadsEverythingUnderRoot) {
  FakeRoot root;
  std::string host = Hostname();
  ASSERT_FALSE(host.empty());
  root.Write("etc/hosts",
             "127.0.0.1 localhost\n10.1.2.3 " + host + ".sub.ns.svc.cluster.local " + host + "\n");
  for (int i = 0; i < 4; ++i) root.Write("dev/nvidia" + std::to_string(i), "");
  root.Write("dev/nvidiactl", "");
  root.Write("sys/fs/cgroup/cpu.max", "150000 100000\n");
  SystemInfo info = ProbeSystem({}, root.path());
  EXPECT_EQ(info.root, root.path());
  EXPECT_EQ(info.hostname, host);
  EXPECT_EQ(info.fqdn, host + ".sub.ns.svc.cluster.local");
  EXPECT_EQ(info.gpu_devices, 4);
  EXPECT_EQ(info.gpu_count, 4);
  EXPECT_EQ(info.cpu_count, std::min(2, AffinityCpuCount()));
  ASSERT_TRUE(info.local_addrs != nullptr);
  EXPECT_THAT(info.local_addrs(), Contains("127.0.0.1"));
  EXPECT_EQ(info.local_addrs(), info.local_addrs());  // cached
  EXPECT_TRUE(info.resolve != nullptr);

  root.Write("sys/fs/cgroup/cpu.max", "50000 100000\n");
  EXPECT_EQ(ProbeSystem({}, root.path()).cpu_count, 1);
  SystemInfo narrowed = ProbeSystem({{"CUDA_VISIBLE_DEVICES", "1,2"}}, root.path());
  EXPECT_EQ(narrowed.gpu_devices, 4);
  EXPECT_EQ(narrowed.gpu_count, 2);
  EXPECT_THAT(narrowed.gpu_note, HasSubstr("CUDA_VISIBLE_DEVICES"));
}

TEST(ProbeSystem, EmptyRoot) {
  FakeRoot root;
  SystemInfo info = ProbeSystem({}, root.path() + "/");
  EXPECT_EQ(info.fqdn, "");
  EXPECT_EQ(info.gpu_count, 0);
  EXPECT_EQ(info.cpu_count, AffinityCpuCount());
  EXPECT_GE(info.cpu_count, 1);
}

}  // namespace
}  // namespace trainlet::agent

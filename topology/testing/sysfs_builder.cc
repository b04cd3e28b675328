#include "topology/testing/sysfs_builder.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainlet::topology::testing {
namespace {

[[noreturn]] void Die(const std::string& what) {
  fprintf(stderr, "sysfs_builder: %s: %s\n", what.c_str(), strerror(errno));
  abort();
}

std::vector<std::string> Parts(const std::string& path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

std::string Dirname(const std::string& path) { return path.substr(0, path.rfind('/')); }
std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

}  // namespace

ScopedTempDir::ScopedTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/trainlet-topology-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) Die("mkdtemp " + templ);
  path_ = templ;
}

ScopedTempDir::~ScopedTempDir() { nftw(path_.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS); }

SysfsBuilder::SysfsBuilder(std::string root) : root_(std::move(root)) {
  Mkdir("/sys");
  Mkdir("/proc");
  Mkdir("/dev");
}

void SysfsBuilder::Mkdir(const std::string& path) {
  std::string p = root_;
  for (const std::string& part : Parts(path)) {
    p += "/" + part;
    if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) Die("mkdir " + p);
  }
}

void SysfsBuilder::Write(const std::string& path, const std::string& content) {
  Mkdir(Dirname(path));
  std::ofstream out(root_ + path, std::ios::binary | std::ios::trunc);
  out << content;
  if (!out) Die("write " + root_ + path);
}

void SysfsBuilder::Symlink(const std::string& link, const std::string& target) {
  Mkdir(Dirname(link));
  std::vector<std::string> from = Parts(Dirname(link));
  std::vector<std::string> to = Parts(target);
  size_t common = 0;
  while (common < from.size() && common < to.size() && from[common] == to[common]) ++common;
  std::vector<std::string> rel(from.size() - common, "..");
  rel.insert(rel.end(), to.begin() + common, to.end());
  std::string text = absl::StrJoin(rel, "/");
  unlink((root_ + link).c_str());
  if (symlink(text.c_str(), (root_ + link).c_str()) != 0) Die("symlink " + root_ + link);
}

void SysfsBuilder::AddPci(const PciFunction& f) {
  const std::string dir = "/sys" + f.path;
  Mkdir(dir);
  if (!f.pci_class.empty()) Write(dir + "/class", f.pci_class + "\n");
  if (!f.vendor.empty()) Write(dir + "/vendor", f.vendor + "\n");
  if (!f.device.empty()) Write(dir + "/device", f.device + "\n");
  Write(dir + "/numa_node", absl::StrCat(f.numa_node, "\n"));
  if (!f.max_link_speed.empty()) Write(dir + "/max_link_speed", f.max_link_speed + "\n");
  if (f.max_link_width > 0) Write(dir + "/max_link_width", absl::StrCat(f.max_link_width, "\n"));
  if (f.current_link_width > 0) {
    Write(dir + "/current_link_width", absl::StrCat(f.current_link_width, "\n"));
  }
  Mkdir("/sys/bus/pci/devices");
  Symlink(dir + "/subsystem", "/sys/bus/pci");
  Symlink("/sys/bus/pci/devices/" + Basename(f.path), dir);
}

void SysfsBuilder::AddInfiniband(const std::string& name, const std::string& device_path,
                                 const std::vector<IbPortSpec>& ports,
                                 const std::vector<std::string>& netdevs) {
  const std::string dir = "/sys" + device_path + "/infiniband/" + name;
  Mkdir(dir);
  Symlink(dir + "/device", "/sys" + device_path);
  for (const IbPortSpec& p : ports) {
    const std::string pdir = absl::StrCat(dir, "/ports/", p.port);
    Write(pdir + "/state", p.state + "\n");
    Write(pdir + "/phys_state", p.phys_state + "\n");
    Write(pdir + "/rate", p.rate + "\n");
    Write(pdir + "/link_layer", p.link_layer + "\n");
  }
  for (const std::string& netdev : netdevs) {
    Write("/sys" + device_path + "/net/" + netdev + "/operstate", "up\n");
  }
  Symlink("/sys/class/infiniband/" + name, dir);
}

void SysfsBuilder::AddNet(const std::string& name, const std::string& device_path,
                          const std::string& speed, const std::string& operstate) {
  const std::string parent = device_path.empty() ? "/sys/devices/virtual" : "/sys" + device_path;
  const std::string dir = parent + "/net/" + name;
  Write(dir + "/operstate", operstate + "\n");
  if (!speed.empty()) Write(dir + "/speed", speed + "\n");
  if (!device_path.empty()) Symlink(dir + "/device", "/sys" + device_path);
  Symlink("/sys/class/net/" + name, dir);
}

void SysfsBuilder::AddNuma(int id, const std::string& cpulist, const std::string& cpumap) {
  const std::string dir = absl::StrCat("/sys/devices/system/node/node", id);
  Write(dir + "/cpulist", cpulist + "\n");
  Write(dir + "/cpumap", cpumap + "\n");
}

void SysfsBuilder::AddHost(const std::string& boot_id, const std::string& vendor, int family,
                           int model) {
  Write("/proc/sys/kernel/random/boot_id", boot_id + "\n");
  Write("/proc/cpuinfo",
        absl::StrCat("processor\t: 0\nvendor_id\t: ", vendor, "\ncpu family\t: ", family,
                     "\nmodel\t\t: ", model, "\nmodel name\t: Test CPU\n\nprocessor\t: 1\n"));
  Mkdir("/proc/self/ns");
  unlink((root_ + "/proc/self/ns/ipc").c_str());
  if (symlink("ipc:[4026531839]", (root_ + "/proc/self/ns/ipc").c_str()) != 0) Die("symlink ipc");
}

void SysfsBuilder::AddContainerGpu(const std::string& bus_id, int minor, const std::string& uuid,
                                   bool excluded) {
  // The layout of the 5xx drivers' information file.
  Write("/proc/driver/nvidia/gpus/" + bus_id + "/information",
        absl::StrCat("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n",
                     uuid.empty() ? "" : absl::StrCat("GPU UUID: \t ", uuid, "\n"),
                     "Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                     "DMA Mask: \t 0xfffffffffffff\nBus Location: \t ",
                     bus_id, "\nDevice Minor: \t ", minor,
                     "\nGPU Firmware: \t 550.54.15\nGPU Excluded:\t ", excluded ? "Yes" : "No",
                     "\n"));
  Write(absl::StrCat("/dev/nvidia", minor), "");
}

void SysfsBuilder::AddDriverVersion(const std::string& version) {
  Write("/proc/driver/nvidia/version",
        absl::StrCat("NVRM version: NVIDIA UNIX x86_64 Kernel Module  ", version,
                     "  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 "
                     "(Debian 12.2.0-14)\n"));
}

std::string CpuMap(int first, int last, int total) {
  const int groups = (total + 31) / 32;
  std::vector<std::string> out;
  for (int g = groups - 1; g >= 0; --g) {
    uint32_t bits = 0;
    for (int b = 0; b < 32; ++b) {
      int cpu = g * 32 + b;
      if (cpu >= first && cpu <= last) bits |= 1u << b;
    }
    int width = 8;
    if (g == groups - 1 && total % 32 != 0) width = ((total % 32) + 3) / 4;
    out.push_back(absl::StrFormat("%0*x", width, bits));
  }
  return absl::StrJoin(out, ",");
}

const std::vector<std::string>& DgxGpuBusIds() {
  static const auto* ids =
      new std::vector<std::string>{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                   "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  return *ids;
}

void BuildDgxH100(SysfsBuilder& b, const DgxOptions& options) {
  constexpr char kGen5[] = "32.0 GT/s PCIe";
  for (int i = 0; i < 8; ++i) {
    const int bus = std::stoi(DgxGpuBusIds()[i].substr(5, 2), nullptr, 16);
    const int numa = i < 4 ? 0 : 1;
    auto bdf = [](int bus_number, int dev) {
      return absl::StrFormat("0000:%02x:%02x.0", bus_number, dev);
    };
    // Root complex pci0000:<bus-3>, root port, switch upstream port, two
    // downstream ports: one to the GPU, one to the NIC.
    const std::string rc = absl::StrFormat("/devices/pci0000:%02x", bus - 3);
    const std::string port = rc + "/" + bdf(bus - 3, 1);
    const std::string up = port + "/" + bdf(bus - 2, 0);
    const std::string down_gpu = up + "/" + bdf(bus - 1, 0);
    const std::string down_nic = up + "/" + bdf(bus - 1, 1);
    b.AddPci({port, "0x060400", "0x8086", "0x352a", numa, kGen5, 16, 16});
    b.AddPci({up, "0x060400", "0x1000", "0xc030", numa, kGen5, 16, 16});
    b.AddPci({down_gpu, "0x060400", "0x1000", "0xc030", numa, kGen5, 16, 16});
    b.AddPci({down_nic, "0x060400", "0x1000", "0xc030", numa, kGen5, 16, 16});
    const std::string gpu = down_gpu + "/" + DgxGpuBusIds()[i];
    b.AddPci(
        {gpu, "0x030200", "0x10de", "0x2330", numa, kGen5, 16, options.degraded_gpu == i ? 8 : 16});
    const std::string nic = down_nic + "/" + bdf(bus + 1, 0);
    b.AddPci({nic, "0x020700", "0x15b3", "0x1021", numa, kGen5, 16, 16});
    IbPortSpec ib;
    if (options.down_nic == i) {
      ib.state = "1: DOWN";
      ib.phys_state = "3: Disabled";
    }
    b.AddInfiniband(absl::StrCat("mlx5_", i), nic, {ib});
  }
  // NVSwitches: NVIDIA functions that are not GPUs (class 0x068000).
  for (int s = 0; s < 4; ++s) {
    const std::string port = absl::StrFormat("/devices/pci0000:00/0000:00:%02x.0", s + 1);
    b.AddPci({port, "0x060400", "0x8086", "0x352a", 0, kGen5, 16, 16});
    b.AddPci({absl::StrFormat("%s/0000:%02x:00.0", port, s + 5), "0x068000", "0x10de", "0x22a3", 0,
              "16.0 GT/s PCIe", 2, 2});
  }
  // An ISA bridge, to be ignored.
  b.AddPci({"/devices/pci0000:00/0000:00:1f.0", "0x060100", "0x8086", "0x1b81", 0, "", 0, 0});
  // Storage NIC: a ConnectX-6 Dx (RoCE) on NUMA 1, directly on a root port.
  const std::string storage = "/devices/pci0000:c0/0000:c0:01.0/0000:c1:00.0";
  b.AddPci({"/devices/pci0000:c0/0000:c0:01.0", "0x060400", "0x8086", "0x352a", 1, kGen5, 16, 16});
  b.AddPci({storage, "0x020000", "0x15b3", "0x101d", 1, "16.0 GT/s PCIe", 16, 16});
  IbPortSpec roce;
  roce.rate = "100 Gb/sec (2X HDR)";
  roce.link_layer = "Ethernet";
  b.AddInfiniband("mlx5_8", storage, {roce}, {"ens9f0np0"});
  b.AddNet("eth0", "", "10000");
  b.AddNuma(0, "0-55", CpuMap(0, 55, 112));
  b.AddNuma(1, "56-111", CpuMap(56, 111, 112));
  b.AddHost("3f2504e0-4f89-41d3-9a0c-0305e82c3301", "GenuineIntel", 6, 143);
  for (const std::string& bus_id : options.container_gpus) {
    const auto& all = DgxGpuBusIds();
    const int index = static_cast<int>(std::find(all.begin(), all.end(), bus_id) - all.begin());
    b.AddContainerGpu(bus_id, index, absl::StrFormat("GPU-00000000-0000-0000-0000-%012x", index));
  }
  if (!options.container_gpus.empty()) {
    b.AddDriverVersion("550.54.15");
  }
}

void BuildCloudVm(SysfsBuilder& b) {
  // An A10G (0x2237), as on AWS g5; the fake NVML's nvml_vm_1gpu.json has it.
  b.AddPci({"/devices/pci0000:00/0000:00:1e.0", "0x030200", "0x10de", "0x2237", -1, "", 0, 0});
  const std::string virtio_pci = "/devices/pci0000:00/0000:00:03.0";
  b.AddPci({virtio_pci, "0x020000", "0x1af4", "0x1000", -1, "", 0, 0});
  const std::string child = virtio_pci + "/virtio2";
  b.Mkdir("/sys/bus/virtio/devices");
  b.Symlink("/sys" + child + "/subsystem", "/sys/bus/virtio");
  b.AddNet("eth0", child, "-1");
  b.AddNuma(0, "0-3", CpuMap(0, 3, 4));
  b.AddHost("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", "AuthenticAMD", 23, 49);
}

void BuildCpuOnly(SysfsBuilder& b) {
  const std::string nic = "/devices/pci0000:00/0000:00:03.0";
  b.AddPci({nic, "0x020000", "0x8086", "0x10d3", 0, "2.5 GT/s", 1, 1});
  b.AddPci({"/devices/pci0000:00/0000:00:1f.2", "0x010601", "0x8086", "0x2922", 0, "", 0, 0});
  b.AddNet("eth0", nic, "1000");
  b.AddNuma(0, "0-3", CpuMap(0, 3, 4));
  b.AddHost("1b4e28ba-2fa1-11d2-883f-0016d3cca427", "GenuineIntel", 6, 85);
}

}  // namespace trainlet::topology::testing

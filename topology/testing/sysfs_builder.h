// Synthetic /sys and /proc trees for the probe's tests and benchmark, built
// the way real sysfs is laid out: devices under /devices/pci<dom>:<bus>/...,
// /bus/pci/devices, /class/infiniband and /class/net as RELATIVE symlinks into
// /devices, so the tree resolves under any root (as a copied real tree does).
// Plus the three fixtures the tests share: an 8-GPU 2-socket node
// (DGX H100-like), a 1-GPU cloud VM and a CPU-only node.
//
// Test-only; thread-compatible. Failures to create files abort (a broken
// fixture must not pass as an empty node).
#ifndef TRAINLET_TOPOLOGY_TESTING_SYSFS_BUILDER_H_
#define TRAINLET_TOPOLOGY_TESTING_SYSFS_BUILDER_H_

#include <string>
#include <vector>

namespace trainlet::topology::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed with its contents
// by the destructor.
class ScopedTempDir {
 public:
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sysfs-shaped attributes of one PCI function; "" / -1 / 0 leave a file out.
struct PciFunction {
  // Below /sys: "/devices/pci0000:15/0000:15:01.0/0000:16:00.0"; the last
  // component is the bus id.
  std::string path;
  std::string pci_class;  // "0x030200"
  std::string vendor;     // "0x10de"
  std::string device;     // "0x2330"
  int numa_node = -1;
  std::string max_link_speed;  // "32.0 GT/s PCIe"
  int max_link_width = 0;
  int current_link_width = 0;
};

struct IbPortSpec {
  int port = 1;
  std::string state = "4: ACTIVE";
  std::string phys_state = "5: LinkUp";
  std::string rate = "400 Gb/sec (4X NDR)";
  std::string link_layer = "InfiniBand";
};

// Builds below `root`: <root>/sys, <root>/proc and <root>/dev.
class SysfsBuilder {
 public:
  explicit SysfsBuilder(std::string root);

  std::string sys() const { return root_ + "/sys"; }
  std::string proc() const { return root_ + "/proc"; }
  std::string dev() const { return root_ + "/dev"; }

  // Paths are below root ("/sys/bus/pci"), parents created as needed.
  void Mkdir(const std::string& path);
  void Write(const std::string& path, const std::string& content);
  // A relative symlink at `link` pointing at `target` (both below root).
  void Symlink(const std::string& link, const std::string& target);

  // The function's attributes, its subsystem link and /sys/bus/pci/devices/<bdf>.
  void AddPci(const PciFunction& f);
  // /sys/class/infiniband/<name> -> <device_path>/infiniband/<name>, with
  // ports and device/net/<netdev> entries.
  void AddInfiniband(const std::string& name, const std::string& device_path,
                     const std::vector<IbPortSpec>& ports,
                     const std::vector<std::string>& netdevs = {});
  // /sys/class/net/<name> -> <parent>/net/<name>; a "device" link to
  // `device_path` unless empty (a veth: parent /devices/virtual).
  void AddNet(const std::string& name, const std::string& device_path, const std::string& speed,
              const std::string& operstate = "up");
  void AddNuma(int id, const std::string& cpulist, const std::string& cpumap);
  // /proc facts: boot_id, cpuinfo's first block, /proc/self/ns/ipc.
  void AddHost(const std::string& boot_id, const std::string& vendor, int family, int model);
  // /proc/driver/nvidia/gpus/<bus id>/information, as the container toolkit
  // leaves it for the allocated GPUs (with "GPU UUID" when `uuid` is not
  // empty), and the GPU's device node /dev/nvidia<minor>.
  void AddContainerGpu(const std::string& bus_id, int minor, const std::string& uuid = "",
                       bool excluded = false);
  // /proc/driver/nvidia/version for driver `version` ("550.54.15").
  void AddDriverVersion(const std::string& version);

 private:
  std::string root_;
};

// sysfs cpumap text for CPUs [first, last] of `total`: 32-bit hex groups,
// most significant first, the first group only as wide as needed.
std::string CpuMap(int first, int last, int total);

// ---- Fixtures. The bus ids match the fake NVML's JSON (topology/testing).

// The eight GPUs of the 8-GPU fixture, NVML index order (= bus order).
const std::vector<std::string>& DgxGpuBusIds();

struct DgxOptions {
  int degraded_gpu = -1;  // this GPU runs at x8 of x16.
  int down_nic = -1;      // mlx5_<n>'s port is DOWN.
  // When non-empty, /proc/driver/nvidia/gpus lists only these (a container),
  // with their /dev/nvidia<minor> (minor = NVML index) and UUIDs as
  // FakeH100Nvml names them, and /proc/driver/nvidia/version 550.54.15.
  std::vector<std::string> container_gpus;
};
// 8 H100 (0x10de:0x2330, class 0x030200) on 2 NUMA nodes of 56 CPUs each,
// one PCIe switch per GPU with one ConnectX-7 (mlx5_0..7, 0x15b3:0x1021,
// class 0x020700) beside it; four NVSwitches (class 0x068000, not GPUs); a
// storage NIC mlx5_8 (RoCE) on NUMA 1; eth0 a veth.
void BuildDgxH100(SysfsBuilder& b, const DgxOptions& options = {});
// One A10G at 0000:00:1e.0 (the bus id of the fake NVML's
// nvml_vm_1gpu.json) with numa_node -1 and no link attributes, virtio-net
// eth0 (its device resolves to the virtio2 child), one NUMA node of 4 CPUs,
// no /sys/class/infiniband.
void BuildCloudVm(SysfsBuilder& b);
// No GPU: a 1 GbE NIC, a SATA controller, one NUMA node of 4 CPUs.
void BuildCpuOnly(SysfsBuilder& b);

}  // namespace trainlet::topology::testing

#endif  // TRAINLET_TOPOLOGY_TESTING_SYSFS_BUILDER_H_

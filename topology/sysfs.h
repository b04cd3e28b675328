// The sysfs/procfs half of the node probe (probe.h): PCI GPUs and other
// accelerators with their NUMA node, PCIe link and path to the root complex;
// InfiniBand/RoCE devices and network interfaces; NUMA nodes; and the host
// facts NCCL cares about (boot_id, IPC namespace, /dev/shm, memlock, CPU
// vendor/family/model). Everything is read below a root prefix (the hwloc
// HWLOC_FSROOT idea), so tests point it at fixture trees shaped like /sys and
// /proc (testing/sysfs_builder.h); sysfs links are relative, so a copied tree
// resolves under any root.
//
// Every read is bounded (files are cut at a few KiB, directory listings at a
// few thousand entries) and every value that goes into the result is
// validated; what cannot be read is left at its "unknown" value. Nothing here
// fails.
//
// Pure reads, no state: safe from any thread.
#ifndef TRAINLET_TOPOLOGY_SYSFS_H_
#define TRAINLET_TOPOLOGY_SYSFS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// A directory tree read as if it were "/": RootFs("/sys").Read("/bus/...")
// reads /sys/bus/...; RootFs("/tmp/fixture/sys") reads the fixture.
class RootFs {
 public:
  explicit RootFs(std::string root);

  const std::string& root() const { return root_; }
  // root + path (path starts with '/').
  std::string Host(absl::string_view path) const;

  // The file's first `max` bytes with surrounding whitespace removed;
  // nullopt when it cannot be read (missing, EINVAL from a sysfs attribute).
  std::optional<std::string> Read(absl::string_view path, size_t max = 4096) const;
  // The path with every symlink resolved inside the root (an absolute link
  // target is taken relative to the root, ".." stops at the root), as a
  // root-relative absolute path ("/devices/pci0000:00/0000:00:03.0");
  // nullopt when a component is missing or links loop.
  std::optional<std::string> RealPath(absl::string_view path) const;
  // The target text of a symlink (not resolved); nullopt if not a link.
  std::optional<std::string> ReadLink(absl::string_view path) const;
  // The entry names of a directory, sorted, without "." and ".."; at most
  // `max` of them. Empty when it cannot be read.
  std::vector<std::string> List(absl::string_view dir, size_t max = 4096) const;
  bool Exists(absl::string_view path) const;

 private:
  std::string root_;  // without trailing '/'; "" for "/".
};

// Number of <dev_root>/nvidia[0-9]+ entries: the GPU device nodes a
// container has (nvidiactl, nvidia-uvm do not count).
int CountNvidiaDevices(const std::string& dev_root);

// ---- Parsers of sysfs values (exposed for tests).

// "0000:3B:00.0", "00000000:3b:00.0" (NVML's 8-digit domain), "3b:00.0" ->
// "0000:3b:00.0"; nullopt when it is not a PCI address.
std::optional<std::string> NormalizeBusId(absl::string_view text);
// True for "dddd:bb:dd.f" exactly as sysfs names devices (lowercase hex).
bool IsBusId(absl::string_view text);
// "16.0 GT/s PCIe", "16 GT/s" (kernels <= 5.6), "32.0 GT/s" -> GT/s; nullopt
// for anything else ("Unknown", "").
std::optional<double> ParseLinkSpeed(absl::string_view text);
// GT/s -> NCCL's spelling "16.0 GT/s PCIe"; "" for a speed not in PCIe's
// generations (2.5, 5, 8, 16, 32, 64).
std::string FormatLinkSpeed(double gts);
// "4: ACTIVE" -> "ACTIVE", "5: LinkUp" -> "LinkUp".
std::string StripStateNumber(absl::string_view text);
// "400 Gb/sec (4X NDR)" -> 400000 Mb/s; 0 when unknown.
int64_t ParseIbRateMbps(absl::string_view text);
// True for sysfs cpumap text: hex groups separated by commas.
bool IsCpumap(absl::string_view text);
// True for sysfs cpulist text: "0-23,48-71" (possibly empty).
bool IsCpulist(absl::string_view text);
// "aarch64" -> "arm64", "ppc64le" -> "ppc64", "x86_64" stays; the names NCCL
// writes in <cpu arch>.
std::string NcclArch(absl::string_view machine);

// ---- What one sysfs scan finds.

struct SysfsScan {
  // GPUs and accelerators in bus-id order, with source "sysfs", index = position,
  // name "0x10de:0x2330" (vendor:device), minor_number -1,
  // visible = whether the container's view has it (see container_view).
  std::vector<v1::Gpu> gpus;
  std::vector<v1::Nic> nics;  // infiniband devices by name, then net interfaces by name.
  std::vector<v1::NumaNode> numa_nodes;
  // /proc/driver/nvidia/gpus existed: the NVIDIA container toolkit's view
  // (only the allocated GPUs are there); `visible` follows it.
  bool container_view = false;
  int hidden_by_container = 0;  // NVIDIA GPUs sysfs has but that view lacks.
  // Lines for NodeProbe.warnings: GPU links narrower than their maximum, IB
  // ports not ACTIVE.
  std::vector<std::string> warnings;
  bool pci_found = false;  // <sysfs>/bus/pci/devices could be listed.
};

// Scans PCI devices, infiniband, net and NUMA under `sysfs` (a RootFs over
// what stands in for /sys) and the container's GPU view under `proc`.
SysfsScan ScanSysfs(const RootFs& sysfs, const RootFs& proc);

// Host facts into `probe`: hostname, boot_id, ipc_namespace (from `proc`),
// shm_bytes (statvfs of shm_path), memlock_bytes (getrlimit), cpu_arch (uname),
// cpu_vendor/family/model (<proc>/cpuinfo).
void ReadHostFacts(const RootFs& proc, const std::string& shm_path, v1::NodeProbe* probe);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_SYSFS_H_

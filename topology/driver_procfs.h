// The NVIDIA kernel driver's procfs as a GPU source that needs no shared
// library: /proc/driver/nvidia/gpus/<bus id>/information (model, UUID, bus
// location, device minor, whether the driver excluded the GPU) and
// /proc/driver/nvidia/version (the driver's version). A fully static trainlet
// cannot dlopen libnvidia-ml.so.1 (nvml.cc), so this is where its GPUs come
// from.
//
// Inside a container the NVIDIA container toolkit mounts a tmpfs over
// /proc/driver/nvidia and bind-mounts into it only the allocated GPUs'
// folders, so the list is the container's, as NVML's is. A GPU counts only
// when its /dev/nvidia<minor> node is there too (a pod without GPUs on a GPU
// node may see the host's procfs but has no device nodes, and CUDA cannot
// open a GPU without its node). What NVML alone has stays unknown here:
// memory, compute capability, NVLinks, health counters, the CUDA driver
// version.
//
// Every file is read bounded (4 KiB), every value validated (lengths,
// characters, UUID and bus-id formats); a bad file is a warning, never an
// error. Pure reads, no state: safe from any thread.
#ifndef TRAINLET_TOPOLOGY_DRIVER_PROCFS_H_
#define TRAINLET_TOPOLOGY_DRIVER_PROCFS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/sysfs.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// One information file, parsed and validated.
struct DriverGpuInfo {
  std::string model;      // "NVIDIA H100 80GB HBM3"; printable ASCII, <= 96 bytes; "" unknown.
  std::string uuid;       // "GPU-8f6c2a4e-..." (8-4-4-4-12 hex); "" unknown or not yet known.
  std::string bus_id;     // lowercase "0000:18:00.0" (Bus Location).
  int minor = -1;         // Device Minor: /dev/nvidia<minor>; 0..4095.
  bool excluded = false;  // "GPU Excluded: Yes" (NVreg_ExcludedGpus): unusable.
};

// Parses the text of /proc/driver/nvidia/gpus/<bus id>/information ("Key:
// \t value" lines, tabs and spaces). An error when Bus Location or Device
// Minor is missing or invalid; a bad Model or GPU UUID (the driver writes
// "GPU-????????-..." before the GPU is initialised) is left empty.
absl::StatusOr<DriverGpuInfo> ParseGpuInformation(absl::string_view text);

// True for "GPU-" + 8-4-4-4-12 hex digits (either case).
bool IsGpuUuid(absl::string_view text);

// The driver version in /proc/driver/nvidia/version's NVRM line ("NVRM
// version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..." or the
// open module's "... Open Kernel Module for x86_64  550.54.15  Release
// Build ..."): "550.54.15"; nullopt when there is none.
std::optional<std::string> ParseDriverVersion(absl::string_view text);

// What the driver's procfs says about this container's GPUs.
struct DriverProcfsScan {
  // The usable GPUs in PCI bus-id order (NVML's index order): index =
  // position, uuid, name = model, pci_bus_id, minor_number, visible,
  // visible_ordinal -1, numa_node -1, source "procfs".
  std::vector<v1::Gpu> gpus;
  // <proc>/driver/nvidia/gpus listed bus ids whose GPU is not here: excluded
  // by the driver, or no /dev/nvidia<minor>.
  int skipped = 0;
  std::vector<std::string> warnings;
};

// Reads <proc>/driver/nvidia/{gpus,version}, checking device nodes under
// `dev_root`, and sets `source`: OK (with version) when the gpus folder could
// be listed, even if empty of usable GPUs; ABSENT when there is no driver
// procfs (no NVIDIA driver, or a container without it).
DriverProcfsScan ReadDriverProcfs(const RootFs& proc, const std::string& dev_root,
                                  v1::Source* source);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_DRIVER_PROCFS_H_

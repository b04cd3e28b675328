// The node probe: what this node really has (GPUs, NICs, NUMA nodes, boot id,
// /dev/shm, memlock), from sysfs below a configurable root, NVML and NCCL
// (nvml.h), merged by PCI bus id into one v1::NodeProbe
// (proto/trainlet/v1/topology.proto). `trainlet probe` prints it; every agent
// runs it at start and puts its summary in the join.
//
// Every source is optional: a missing file, library or device is recorded in
// the result (Source, warnings), never an error. A CPU-only node probes
// cleanly.
//
// Pure function of the files and libraries it reads; safe from any thread.
#ifndef TRAINLET_TOPOLOGY_PROBE_H_
#define TRAINLET_TOPOLOGY_PROBE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "topology/nvml.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

struct ProbeOptions {
  std::string sysfs_root = "/sys";  // stands in for /sys (fixtures are trees shaped like it).
  std::string proc_root = "/proc";  // boot_id, ns/ipc, driver/nvidia/gpus, cpuinfo.
  std::string dev_root = "/dev";    // nvidia[0-9]+ device nodes.
  std::string shm_path = "/dev/shm";
  NvmlOptions nvml;                           // library "" skips NVML.
  std::string nccl_library = "libnccl.so.2";  // "" skips NCCL.
  // The agent's environment: NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES
  // narrow the visible set (indices and GPU-/MIG- UUIDs).
  std::map<std::string, std::string> env;
  // Seam for tests: reads NVML (default ReadNvml).
  std::function<void(const NvmlOptions&, v1::NodeProbe*, std::vector<v1::Gpu>*)> read_nvml;
};

v1::NodeProbe ProbeNode(const ProbeOptions& options);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_PROBE_H_

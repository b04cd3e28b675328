// Where each local worker runs: which GPU is its own, what CUDA_VISIBLE_DEVICES
// it gets, and (with --bind-numa) which CPUs and NUMA memory node it is bound
// to, from the node probe (topology/probe.h).
//
// GPUs are placed only when NVML answered the probe or, without NVML (a
// static build cannot load it), the NVIDIA driver's procfs did
// (topology/driver_procfs.h): both show the container's GPUs. sysfs alone
// shows the whole node's, not the container's.
// Worker l's GPU is the visible GPU with CUDA ordinal l % n (n visible GPUs),
// the ordinal being PCI bus order, which CUDA follows under
// CUDA_DEVICE_ORDER=PCI_BUS_ID. How a worker sees its GPU (--gpu-binding):
//   list    every worker sees every visible GPU, in PCI order, so that
//           `cuda:LOCAL_RANK` (torchrun's convention) is the worker's own GPU;
//           CUDA_VISIBLE_DEVICES is set only when the agent's environment has
//           none (to the ordinals 0..n-1), never changed otherwise.
//   single  each worker sees only its own GPU (as device 0), named as the
//           agent's CUDA_VISIBLE_DEVICES names it, else by UUID, else ordinal.
//   none    CUDA_VISIBLE_DEVICES is left as the agent's environment has it.
// With --bind-numa, worker l is bound to its GPU's NUMA node: its CPUs (that
// node's CPUs the agent may use) and its memory policy (preferred node).
// Without GPUs, workers are spread over the NUMA nodes in blocks.
//
// Pure function; thread-compatible.
#ifndef TRAINLET_AGENT_GPU_PLACEMENT_H_
#define TRAINLET_AGENT_GPU_PLACEMENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/options.h"
#include "trainlet/v1/rendezvous.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

struct WorkerPlacement {
  int gpu_ordinal = -1;  // the worker's own GPU (CUDA ordinal); -1: none.
  std::string gpu_bus_id;
  // Set in the worker's environment when has_value() (an empty value is never set).
  std::optional<std::string> cuda_visible_devices;
  std::vector<int> cpus;  // CPU affinity; empty: inherit the agent's.
  int numa_node = -1;     // preferred memory node; -1: none.
  std::string note;       // one line for the startup log; empty when nothing was placed.
};

struct PlacementInput {
  int local_world_size = 1;
  GpuBinding gpu_binding = GpuBinding::kList;
  bool bind_numa = false;
  std::vector<int> allowed_cpus;           // the agent's affinity mask (sched_getaffinity).
  std::map<std::string, std::string> env;  // the agent's environment.
};

// One entry per local rank 0..local_world_size-1.
std::vector<WorkerPlacement> PlanPlacement(const trainlet::v1::NodeProbe& probe,
                                           const PlacementInput& in);

// The join's summary of the probe (rendezvous.proto's Topology): visible GPU
// count and UUIDs (CUDA order), NCCL version, boot_id, IPC namespace, NUMA
// node count. Values the coordinator would refuse (too long, not printable)
// are left out rather than sent, so a strange machine never fails the join.
trainlet::v1::Topology JoinTopology(const trainlet::v1::NodeProbe& probe);

// Sets `name`=`value` in a sorted "K=V" environment: replaces an existing
// entry when `overwrite`, else leaves it; keeps the order.
void SetEnvVar(std::vector<std::string>* env, const std::string& name, const std::string& value,
               bool overwrite);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt when malformed or above 65536 CPUs.
std::optional<std::vector<int>> ParseCpuList(absl::string_view text);
// {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_GPU_PLACEMENT_H_

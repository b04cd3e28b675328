// Which of a node's GPUs the CUDA programs the agent starts can use, and
// their CUDA ordinals: NVIDIA_VISIBLE_DEVICES (the container runtime's), then
// CUDA_VISIBLE_DEVICES (the CUDA runtime's), with the semantics of
// config/system_probe.h VisibleGpus() applied to the GPU list itself, so that
// indices and GPU-/MIG- UUIDs select particular GPUs.
//
// Pure function; safe from any thread.
#ifndef TRAINLET_TOPOLOGY_VISIBILITY_H_
#define TRAINLET_TOPOLOGY_VISIBILITY_H_

#include <map>
#include <string>

#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// Narrows probe->gpus() by `env` and sets each Gpu's visible and
// visible_ordinal and the probe's visible_gpu_count and visibility_note.
//
// On entry, Gpu.visible says whether the GPU is in this container's view (all
// of NVML's GPUs or, without NVML, all of the driver procfs's; for a
// sysfs-only list, every NVIDIA GPU); only NVIDIA GPUs (vendor 0x10de, or an
// NVML or procfs source) can be visible. Then, in the order of the list (PCI
// bus order, which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID):
//  - CUDA_VISIBLE_DEVICES, when set, as the CUDA runtime reads it, over the
//    whole view (CUDA never reads NVIDIA_VISIBLE_DEVICES): ordinals, or
//    GPU-/MIG- UUIDs (a GPU- entry matches a UUID prefix, as CUDA accepts);
//    empty, "-1", "none", "void" give none; the list ends at the first
//    invalid entry (not a number, negative, an ordinal past the GPUs, a UUID
//    that matches none or is of the other kind); a repeated entry makes it
//    empty. The CUDA ordinal follows the list's order. Without UUIDs (no
//    NVML) a UUID list, and any MIG- list, selects the first GPUs by count.
//  - else NVIDIA_VISIBLE_DEVICES, the container runtime's: unset, "all",
//    "void" (no NVIDIA hook: CDI injects the devices), "none", empty or a
//    path (the device plugin's volume-mounts strategy) keep the view: the
//    GPUs this container can open are its GPUs. A list keeps the view when it
//    is no larger than the list (the runtime applied it); a larger view (a
//    privileged pod sees every GPU) is narrowed to the GPUs the list names by
//    NVML index or UUID, else to the first ones by count. The agent then
//    names those GPUs in its workers' CUDA_VISIBLE_DEVICES
//    (agent/gpu_placement.h), since CUDA itself would see them all.
void ApplyVisibility(const std::map<std::string, std::string>& env, v1::NodeProbe* probe);

// True when the probe's GPU list is this container's (NVML or the driver's
// procfs answered), so that its visible GPUs may be counted and placed.
bool HasContainerGpuView(const v1::NodeProbe& probe);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_VISIBILITY_H_

// Which of a node's GPUs the CUDA programs the agent starts can use, and
// their CUDA ordinals: NVIDIA_VISIBLE_DEVICES (the container runtime's), then
// CUDA_VISIBLE_DEVICES (the CUDA runtime's), with the semantics of
// agent/system_probe.h VisibleGpus() applied to the GPU list itself, so that
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
// of NVML's GPUs; for a sysfs-only list, those the container toolkit's
// /proc/driver/nvidia/gpus shows); only NVIDIA GPUs (vendor 0x10de or an
// NVML source) can be visible. Then, in the order of the list (PCI bus order,
// which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID):
//  - NVIDIA_VISIBLE_DEVICES: unset or "all" keeps the view; "none", "void"
//    or empty gives none; a list keeps at most as many GPUs as it names: when
//    the view holds more GPUs than that (the list was not applied by a
//    container runtime) and every entry names one of them (by index or UUID),
//    exactly those, else the first ones;
//  - CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: ordinals among the
//    GPUs left, or GPU-/MIG- UUIDs (a GPU- entry matches a UUID prefix, as
//    CUDA accepts); empty, "-1", "none", "void" give none; the list ends at the
//    first invalid entry (not a number, negative, an ordinal past the GPUs,
//    a UUID that matches none or is of the other kind); a repeated entry makes
//    it empty. The CUDA ordinal follows the list's order. Without UUIDs (no
//    NVML) a UUID list, and any MIG- list, selects the first GPUs by count.
void ApplyVisibility(const std::map<std::string, std::string>& env, v1::NodeProbe* probe);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_VISIBILITY_H_

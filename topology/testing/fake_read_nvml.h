// An in-process stand-in for ReadNvml (topology/nvml.h) for the probe's
// tests and benchmark: ProbeOptions::read_nvml = FakeReadNvml(...). It fills
// the v1::Gpu entries NVML would, in NVML's spelling (uppercase 8-digit-domain
// bus ids), so the probe's normalisation and merge are exercised.
//
// Test-only; the returned function is safe from any thread.
#ifndef TRAINLET_TOPOLOGY_TESTING_FAKE_READ_NVML_H_
#define TRAINLET_TOPOLOGY_TESTING_FAKE_READ_NVML_H_

#include <functional>
#include <string>
#include <vector>

#include "topology/nvml.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology::testing {

using ReadNvmlFn = std::function<void(const NvmlOptions&, v1::NodeProbe*, std::vector<v1::Gpu>*)>;

// NVML that sees H100s at `bus_ids` (lowercase sysfs form), with UUIDs
// GPU-00000000-0000-0000-0000-00000000000N where N is the position in
// DgxGpuBusIds() (so a container's subset keeps the node's UUIDs), 18
// NVLinks each to the NVSwitch fabric, driver 550.54.15, CUDA 12040.
ReadNvmlFn FakeH100Nvml(const std::vector<std::string>& bus_ids);

// NVML that failed to load: status ABSENT with dlopen's reason, no GPUs.
ReadNvmlFn AbsentNvml();

}  // namespace trainlet::topology::testing

#endif  // TRAINLET_TOPOLOGY_TESTING_FAKE_READ_NVML_H_

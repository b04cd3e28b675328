// NVML and NCCL, loaded at run time with dlopen (never linked, never
// dlclosed, as NCCL itself does), for the node probe (probe.h). NVML's structs
// are declared here at their real sizes (nvml_abi.h); a missing library, a
// missing symbol or an NVML error is data in the result, never a failure.
//
// A fully static trainlet cannot dlopen: there NVML is read by the NVML
// reader, a small dynamically linked program the binary carries and runs
// through the image's own dynamic loader (nvml_reader.h), with the same
// reading code (nvml.cc) and the same result. docs/topology.md, "NVML in the
// static build".
//
// Threading: every in-process NVML call is serialised by one process-wide
// mutex (NVML has had thread-safety bugs; NCCL does the same); reads through
// the reader run in parallel, one process each. Safe from any thread.
#ifndef TRAINLET_TOPOLOGY_NVML_H_
#define TRAINLET_TOPOLOGY_NVML_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

struct NvmlOptions {
  // What to dlopen: a soname ("libnvidia-ml.so.1", found the way the dynamic
  // loader finds it) or a path. Empty: NVML is not read (Source SKIPPED).
  std::string library = "libnvidia-ml.so.1";
  bool health = true;  // also read ECC, row-remap and recovery-action counters.
  // Non-empty: NVML is known to be unusable here and is not tried; the probe
  // records it ABSENT with this reason ("no /dev/nvidiactl").
  std::string absent_reason;
  // How many CPUs Gpu.cpu_affinity covers, as sysfs's cpumap does for its
  // nr_cpu_ids (the bits in /sys/devices/system/node/node0/cpumap), so that
  // the two compare as strings. 0: just enough 32-bit groups for the highest
  // CPU in the mask.
  int cpumap_cpus = 0;
  // Where NVML is read. kAuto: in this process where it can load libraries
  // (a dynamic build), through the NVML reader otherwise (the static build).
  // kInProcess: dlopen here (a static build then reports ABSENT). kReader:
  // through the reader in any build (tests, bench/nvml_reader).
  enum class Via { kAuto, kInProcess, kReader };
  Via via = Via::kAuto;
  // The reader is killed (by pid) past this, and NVML is then ERROR: a hung
  // driver. Generous because a cold nvmlInit on a node without persistence
  // mode initialises every GPU, which takes seconds on 8.
  absl::Duration reader_timeout = absl::Seconds(5);
};

// Reads every device NVML sees (the container's GPUs) into `gpus`, one
// v1::Gpu each in NVML index order, with: index, uuid, name, pci_bus_id
// (normalised to lowercase "%04x:%02x:%02x.%x"), memory_bytes, sm,
// vendor_id/device_id, link_speed/link_width (current PCIe generation and
// width), cpu_affinity (hex cpumap groups), nvlinks (aggregated per remote bus
// id), health (when options.health: ECC, row remapping, the recovery
// action, retired pages, memory used and the compute processes),
// minor_number, the SM clock, its maximum and the clock event reasons
// (optional symbols: unknown without them), source = "nvml". Sets probe->nvml (status, reason,
// version = the driver version) and probe->cuda_driver_version. Never fails; a device whose handle
// cannot be had is skipped with a line in probe->warnings. Through the reader (options.via), a
// reader that cannot run, hangs, crashes or answers garbage is NVML ABSENT or ERROR with the
// reason.
void ReadNvml(const NvmlOptions& options, v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus);

// dlopens `library` ("libnccl.so.2" or a path) and reads ncclGetVersion into
// out->version ("2.28.9"). Empty library: SKIPPED. Never fails.
void ReadNcclVersion(const std::string& library, v1::Source* out);

// Pure helpers, exposed for the probe and for tests.

// A CPU mask (64 CPUs per word, least significant word first, as
// nvmlDeviceGetCpuAffinity fills it) in sysfs cpumap form: comma-separated
// 32-bit hex groups, most significant first, the first group only as wide as
// `cpus` needs ("ff" for 8 CPUs, "ffffffff,00000000" for 64). `cpus` <= 0:
// as many CPUs as the highest set bit needs (at least one group). "" for an
// empty mask.
std::string CpuMaskToCpumap(const uint64_t* words, size_t count, int cpus);

// NCCL's version code as "major.minor.patch": code = major*10000 +
// minor*100 + patch from 2.9 on, major*1000 + minor*100 + patch before.
std::string NcclVersionString(int code);

// "DRIVER_NOT_LOADED" for 9, "UNKNOWN_ERROR_<n>" for codes not in nvml.h.
std::string NvmlReturnName(int code);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_NVML_H_

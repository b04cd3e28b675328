// The pod limits that make NCCL and DataLoader workers fail: the size of
// /dev/shm and the memlock limit (RLIMIT_MEMLOCK). The node probe reads both
// (topology/sysfs.h's ReadHostFacts); these checks judge its reading, and
// ReadHostLimits takes a fresh one with the probe's own reader.
//
// Pure functions but ReadHostLimits (a statvfs, a getrlimit and a few
// small /proc reads: microseconds); thread-safe.
#ifndef TRAINLET_PREFLIGHT_HOST_CHECKS_H_
#define TRAINLET_PREFLIGHT_HOST_CHECKS_H_

#include <cstdint>
#include <string>

#include "trainlet/v1/preflight.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::preflight {

struct HostThresholds {
  // Under this, NCCL's shared-memory transport fails ("failed to extend
  // /dev/shm/nccl-...") and DataLoader workers die of a bus error; the
  // probe warns under the same size (topology/env_advice.h).
  uint64_t min_shm_bytes = uint64_t{1} << 30;
  // The memlock limit a node with InfiniBand/RoCE devices needs (-1:
  // unlimited): below it, RDMA memory registration fails or falls back.
  int64_t min_memlock_bytes = -1;
};

// probe.shm_bytes() (0: unknown, SKIPPED) against min_shm_bytes.
v1::CheckResult CheckShmSize(const v1::NodeProbe& probe, const HostThresholds& t);
// probe.memlock_bytes() against min_memlock_bytes, on a node with an
// InfiniBand/RoCE device (probe.nics() of kind INFINIBAND); elsewhere PASS
// (nothing there registers memory for RDMA). The probe also warns of a
// limit on GPU nodes; a GPU without RDMA works under one, so preflight
// does not fail it.
v1::CheckResult CheckMemlock(const v1::NodeProbe& probe, const HostThresholds& t);

// The probe's reading of this host's limits now: shm_bytes (statvfs of
// `shm_path`) and memlock_bytes, with the rest of its host facts
// (hostname, boot id); `proc_root` stands in for /proc.
v1::NodeProbe ReadHostLimits(const std::string& shm_path = "/dev/shm",
                             const std::string& proc_root = "/proc");

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_HOST_CHECKS_H_

#include "preflight/host_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "preflight/check_result.h"
#include "topology/sysfs.h"

namespace trainlet::preflight {

v1::CheckResult CheckShmSize(const v1::NodeProbe& probe, const HostThresholds& t) {
  const double threshold = static_cast<double>(t.min_shm_bytes);
  if (probe.shm_bytes() == 0) {
    return Skipped(kCheckShmSize,
                   "the size of /dev/shm is unknown (no /dev/shm, or statvfs failed)");
  }
  const double value = static_cast<double>(probe.shm_bytes());
  if (probe.shm_bytes() < t.min_shm_bytes) {
    return MakeResult(
        kCheckShmSize, v1::CheckResult::FAIL,
        absl::StrCat("/dev/shm is ", HumanBytes(probe.shm_bytes()), ", under ",
                     HumanBytes(t.min_shm_bytes),
                     ": NCCL's shared-memory transport and DataLoader workers fail; mount an "
                     "emptyDir with medium: Memory at /dev/shm"),
        value, kUnitBytes, threshold);
  }
  return MakeResult(kCheckShmSize, v1::CheckResult::PASS,
                    absl::StrCat("/dev/shm is ", HumanBytes(probe.shm_bytes())), value, kUnitBytes,
                    threshold);
}

v1::CheckResult CheckMemlock(const v1::NodeProbe& probe, const HostThresholds& t) {
  // -1 stands for unlimited in both the probe and the threshold; as a value
  // it is reported as -1 too.
  const double threshold = t.min_memlock_bytes < 0 ? 0 : static_cast<double>(t.min_memlock_bytes);
  const int64_t limit = probe.memlock_bytes();
  const std::string shown = limit < 0 ? "unlimited" : HumanBytes(static_cast<uint64_t>(limit));
  const bool rdma = std::any_of(probe.nics().begin(), probe.nics().end(),
                                [](const v1::Nic& n) { return n.kind() == v1::Nic::INFINIBAND; });
  const bool enough = limit < 0 || (t.min_memlock_bytes >= 0 && limit >= t.min_memlock_bytes);
  if (!rdma || enough) {
    return MakeResult(
        kCheckMemlock, v1::CheckResult::PASS,
        absl::StrCat("memlock is ", shown, rdma ? "" : " (no InfiniBand/RoCE device needs it)"),
        static_cast<double>(limit), kUnitBytes, threshold);
  }
  return MakeResult(
      kCheckMemlock, v1::CheckResult::FAIL,
      absl::StrCat("memlock (RLIMIT_MEMLOCK) is ", shown, ", under ",
                   t.min_memlock_bytes < 0 ? std::string("unlimited")
                                           : HumanBytes(static_cast<uint64_t>(t.min_memlock_bytes)),
                   " on a node with InfiniBand/RoCE devices: RDMA memory registration fails; make "
                   "it unlimited (the container runtime's ulimits, or the IPC_LOCK capability)"),
      static_cast<double>(limit), kUnitBytes, threshold);
}

v1::NodeProbe ReadHostLimits(const std::string& shm_path, const std::string& proc_root) {
  v1::NodeProbe probe;
  topology::ReadHostFacts(topology::RootFs(proc_root), shm_path, &probe);
  return probe;
}

}  // namespace trainlet::preflight

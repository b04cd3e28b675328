// The --preflight-path check (typically the checkpoint directory): is there
// free space, and does a small file survive a write, fsync, read back and
// delete? A read-only or full filesystem, a missing directory or one the
// agent may not write fail, each with a reason that says which.
//
// The filesystem calls run on a BoundedRunner's thread: a hung NFS server
// blocks them in the kernel, where nothing can cancel them, so the check
// gives up after its timeout (FAIL: the job would hang there too) and
// leaves that one thread behind; until it returns, later checks of the
// path fail at once instead of adding threads.
//
// Thread-safe.
#ifndef TRAINLET_PREFLIGHT_PATH_CHECK_H_
#define TRAINLET_PREFLIGHT_PATH_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "preflight/bounded.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

struct PathThresholds {
  // Space the filesystem must have free for this job's user (statvfs's
  // f_bavail).
  uint64_t min_free_bytes = uint64_t{1} << 30;
  // Size of the file written, read back and deleted.
  uint64_t probe_file_bytes = 4096;
};

// Two results for `path`: kCheckPathFreeSpace (value: free bytes) and
// kCheckPathRoundTrip (value: its seconds), both SKIPPED when `path` is
// empty (no --preflight-path). The probe file is
// <path>/.trainlet-preflight-<tag>-<pid>-<n>, with `tag` (the node id)
// reduced to [A-Za-z0-9._-], so pods sharing one volume never collide; it is
// removed on every path out, also after a failed read.
std::vector<v1::CheckResult> CheckPath(const std::string& path, const std::string& tag,
                                       const PathThresholds& thresholds, BoundedRunner& runner,
                                       absl::Duration timeout = absl::Seconds(2));

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_PATH_CHECK_H_

// CPU signals of a node's workers, for naming a slow node with no code in
// the training script (issue 30: slow nodes): a
// worker that is runnable but not running waits in the run queue
// (/proc/PID/schedstat's second field), and a pod whose CPU quota is spent
// is throttled (its cgroup's cpu.stat: v1 `throttled_time` ns, v2
// `throttled_usec`). Two samples an interval apart give the fractions of
// that interval each worker ran, waited to run, and the pod was throttled.
//
// Reads a few small files per worker (no parsing beyond numbers), from a
// root that tests point at fixtures; every read is bounded (4 KiB) and a
// file that is missing or malformed yields "unknown", never an error that
// stops the caller.
//
// Pure functions and value types; thread-compatible.
#ifndef TRAINLET_PROGRESS_CPU_SAMPLE_H_
#define TRAINLET_PROGRESS_CPU_SAMPLE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainlet::agent {

// One process at one time: CPU time it ran and time it waited runnable.
struct ProcessCpu {
  pid_t pid = 0;
  absl::Duration ran;     // schedstat field 1 (ns on the CPU)
  absl::Duration waited;  // schedstat field 2 (ns runnable, in a run queue)
};

// The pod's cgroup: CPU time it was throttled, in all (nullopt: no cgroup
// CPU controller found, or no quota).
struct CgroupCpu {
  absl::Duration throttled;
  int64_t periods = 0;            // nr_periods (quota periods elapsed)
  int64_t throttled_periods = 0;  // nr_throttled
};

// Parses /proc/PID/schedstat ("<ran ns> <waited ns> <timeslices>").
std::optional<ProcessCpu> ParseSchedstat(absl::string_view text, pid_t pid);
// Parses a cgroup cpu.stat, v1 (throttled_time, ns) or v2 (throttled_usec).
std::optional<CgroupCpu> ParseCpuStat(absl::string_view text);

// Where to read: `proc_root` ("/proc") and the cgroup cpu.stat of this
// process's pod: v2's unified /sys/fs/cgroup/<path>/cpu.stat, else v1's
// cpu controller /sys/fs/cgroup/cpu/<path>/cpu.stat (paths from
// /proc/self/cgroup under `sys_root`, "/sys/fs/cgroup").
struct CpuSampleSources {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// The cpu.stat file of the cgroup `proc_root`/`process`/cgroup names
// (`process`: "self" or a pid), or "" when none can be read.
std::string FindCpuStat(const CpuSampleSources& sources, absl::string_view process = "self");

struct CpuSample {
  absl::Time at;
  std::vector<ProcessCpu> processes;  // those that could be read
  std::optional<CgroupCpu> cgroup;
};
CpuSample TakeCpuSample(const CpuSampleSources& sources, const std::string& cpu_stat,
                        const std::vector<pid_t>& pids, absl::Time now);

// Between two samples: each process's share of the interval on a CPU and
// waiting for one, and the pod's throttled share (of the interval; with
// several CPUs of quota it can pass 1).
struct CpuShares {
  absl::Duration interval;
  struct Process {
    pid_t pid = 0;
    double ran = 0;     // 0..1 (a single thread's process), more with threads
    double waited = 0;  // likewise
  };
  std::vector<Process> processes;  // those in both samples
  std::optional<double> throttled;
  // The largest `waited` among the processes (0 with none): how much the
  // node's slowest worker was kept from running.
  double max_waited() const;
};
CpuShares Compare(const CpuSample& before, const CpuSample& after);

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_CPU_SAMPLE_H_

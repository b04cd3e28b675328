// What the agent needs to know about the machine it runs on: hostname, the
// FQDN Kubernetes wrote into /etc/hosts, how many CPUs this container may use
// and how many NVIDIA GPUs are visible. Everything except the hostname is read
// below an injectable root directory, so tests point it at a temp dir.
//
// Pure reads; no state; safe to call from any thread.
#ifndef TRAINLET_AGENT_SYSTEM_PROBE_H_
#define TRAINLET_AGENT_SYSTEM_PROBE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace trainlet::agent {

struct SystemInfo {
  std::string hostname;  // gethostname(2); empty if that failed.
  std::string fqdn;      // "<hostname>.<subdomain>.<ns>.svc.cluster.local" or empty.
  int cpu_count = 1;     // usable CPUs: affinity mask capped by the cgroup v2 quota.
  int gpu_count = 0;     // entries <root>/dev/nvidia[0-9]+.
};

// Probes the machine. `root` prefixes every file read ("/" in production).
SystemInfo ProbeSystem(const std::string& root = "/");

// ---- The pieces, exposed for tests and for callers with a known hostname.

// The first name on a line of an /etc/hosts text that lists `hostname` and
// starts with "<hostname>." (Kubernetes writes
// "10.1.2.3 host.sub.ns.svc.cluster.local host"); empty when none.
std::string FindFqdnInHosts(absl::string_view hosts_text, absl::string_view hostname);

// CPUs allowed by the cgroup v2 cpu.max of this process (the tightest quota
// on the path from its cgroup to the root), rounded up; nullopt when
// unlimited or unreadable. Reads <root>/proc/self/cgroup and
// <root>/sys/fs/cgroup/.../cpu.max.
std::optional<int> CgroupCpuLimit(const std::string& root);

// Parses one cpu.max text ("150000 100000" -> 2, "max 100000" -> nullopt).
std::optional<int> ParseCpuMax(absl::string_view text);

// Number of <root>/dev/nvidia[0-9]+ entries.
int CountNvidiaDevices(const std::string& root);

// CPUs in this process's affinity mask (sched_getaffinity), at least 1.
int AffinityCpuCount();

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_SYSTEM_PROBE_H_

// What the agent needs to know about the machine it runs on: hostname, the
// FQDN Kubernetes wrote into /etc/hosts, this host's interface addresses, how
// many CPUs this container may use and how many NVIDIA GPUs its workers can
// see, plus a bounded name resolver. Every file is read below an injectable
// root directory, so tests point it at a temp dir; the resolver is a plain
// function, so tests inject a fake one.
//
// ProbeSystem() does cheap local reads only (no DNS, no GPU driver): names
// are resolved later, through SystemInfo::resolve, and only when a decision
// needs it
// (ParseRunConfig() asks only for a coordinator name that is neither
// loopback, an address of this host, nor its hostname or FQDN).
//
// Pure reads; no state; safe to call from any thread. ResolveHostBounded()
// starts one detached thread per call (getaddrinfo(3) cannot be cancelled).
#ifndef TRAINLET_CONFIG_SYSTEM_PROBE_H_
#define TRAINLET_CONFIG_SYSTEM_PROBE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainlet::agent {

// What a name resolves to.
struct ResolvedHost {
  std::string canonical_name;      // getaddrinfo's AI_CANONNAME; may be empty.
  std::vector<std::string> addrs;  // numeric, unbracketed, without zone.
};
// Resolves a host name; nullopt when it does not resolve (in time).
using HostResolver = std::function<std::optional<ResolvedHost>(const std::string& host)>;

struct SystemInfo {
  // Prefix of every file the agent reads about the machine ("/" in
  // production): ProbeSystem() reads below it, and so does ParseRunConfig()
  // for the Kubernetes token Secret.
  std::string root = "/";
  std::string hostname;  // gethostname(2); empty if that failed.
  std::string fqdn;      // "<hostname>.<subdomain>.<ns>.svc.cluster.local" or empty.
  // This host's interface addresses (getifaddrs(3)), numeric, without zone;
  // loopback ones included. Listed on the first call (a netlink dump: only
  // an agent deciding whether it hosts the coordinator asks, never a
  // single-node run); ProbeSystem's caches the answer. Empty: no addresses.
  std::function<std::vector<std::string>()> local_addrs;
  // Resolves names (the real one: getaddrinfo, bounded to
  // kResolveTimeout). Empty: nothing resolves.
  HostResolver resolve;
  int cpu_count = 1;              // usable CPUs: affinity mask capped by the cgroup v2 quota.
  std::vector<int> allowed_cpus;  // the affinity mask's CPUs (--bind-numa binds within them).
  // GPUs: <root>/dev/nvidia[0-9]+ entries, and how many of them the workers
  // can see (narrowed by NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES; see
  // VisibleGpus()).
  int gpu_devices = 0;
  int gpu_count = 0;
  std::string gpu_note;  // how gpu_count was found, for the startup log.
  // The node probe (topology/probe.h) is hardware I/O, so the config only
  // plans it (RunConfig::node_probe_timing) and the agent runs it
  // (agent/node_probe.h's AgentSystemInfo sets these). Whether the caller
  // runs the probe the config plans: false (tests, or a caller that wants
  // none): no probe.
  bool node_probe_available = false;
  // Whether that probe loads no GPU driver (no NVML) and reads this
  // machine's own /sys, /proc and /dev (no fixture tree): then, where its
  // answer can change no worker's environment, it may start once the
  // workers run instead of before them.
  bool node_probe_deferrable = false;
};

inline constexpr absl::Duration kResolveTimeout = absl::Seconds(2);

// Probes the machine. `env` is the agent's environment (for the *_VISIBLE_DEVICES
// variables); `root` prefixes every file read ("/" in production). Does no DNS.
SystemInfo ProbeSystem(const std::map<std::string, std::string>& env,
                       const std::string& root = "/");

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

// How many of `devices` GPUs a CUDA program started with `env` sees:
//  - without CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES (the container
//    runtime's): a comma list caps the count (a privileged pod sees every
//    device node); "all", "none", "void" (CDI), empty or a path
//    (volume-mounts) leave the devices the container has;
//  - CUDA_VISIBLE_DEVICES as the CUDA runtime reads it, over every device: a comma list of
//    ordinals, or of GPU-/MIG- UUIDs; empty, "-1", "none" or "void" give
//    none; the list ends at the first entry that is not a valid device (not
//    a number, a negative number, an ordinal >= the devices seen so far, a
//    UUID without the list's prefix); a repeated entry makes it empty.
// `note` says how the count was found ("2 of 8 /dev/nvidia* devices,
// CUDA_VISIBLE_DEVICES=\"0,1\""), with the variables' values escaped and
// bounded, for the startup log.
struct GpuVisibility {
  int count = 0;
  std::string note;
};
GpuVisibility VisibleGpus(int devices, const std::map<std::string, std::string>& env);

// CPUs in this process's affinity mask (sched_getaffinity), at least 1.
int AffinityCpuCount();
// The CPUs of that mask; empty when it cannot be read.
std::vector<int> AffinityCpus();

// This host's interface addresses (getifaddrs), numeric, without zone.
std::vector<std::string> LocalInterfaceAddresses();

// getaddrinfo(host) with AI_CANONNAME, given up after `timeout` (the lookup
// goes on in a detached thread, whose result is then dropped). nullopt when
// the name does not resolve in time.
std::optional<ResolvedHost> ResolveHostBounded(const std::string& host, absl::Duration timeout);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_SYSTEM_PROBE_H_

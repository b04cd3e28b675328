// The node probe as the agent runs it at start (topology/probe.h): the
// probe's options from the agent's environment, and a run bounded in time so
// that a hung driver never holds the agent up.
//
// The agent's probe reads sysfs and NVML but not libnccl.so.2: loading NCCL
// (a ~200 MB library) costs ~12 ms even from the page cache, more than the
// agent's whole start-up budget; `trainlet probe` reads its version.
//
// Environment knobs (docs/configuration.md): TRAINLET_NVML_LIBRARY (what to
// dlopen for NVML: a soname or path; "none" skips NVML), TRAINLET_PROBE_ROOT
// (a tree standing in for /: its sys, proc and dev folders are read instead
// of /sys, /proc and /dev; for fixtures and captured trees) and
// TRAINLET_SYSFS_ROOT (a tree standing in for /sys, over the former).
//
// Thread-safe. StartNodeProbe() (and ProbeNodeBounded()) starts one detached
// thread per call; a probe still running at the deadline finishes (or hangs)
// on it, owning its own state. The agent's probe is a LazyNodeProbe: it
// starts when the options ask for it (--probe-timeout=0 keeps a hung driver
// away), and where its answer changes no worker's environment (a single-node
// run without GPUs) only once the workers run and the agent first idles, so
// that it never delays their start or competes with it for a CPU.
#ifndef TRAINLET_AGENT_NODE_PROBE_H_
#define TRAINLET_AGENT_NODE_PROBE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/system_probe.h"
#include "topology/probe.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

// The agent's probe options: /sys, /proc, /dev as they are, NVML from
// TRAINLET_NVML_LIBRARY (default libnvidia-ml.so.1, tried only where
// /dev/nvidiactl exists: without the driver's device nvmlInit can only fail),
// no NCCL, `env` for the *_VISIBLE_DEVICES variables.
topology::ProbeOptions AgentProbeOptions(const std::map<std::string, std::string>& env);

// Whether a probe with these options dlopens NVML (which a hung driver can
// hang); otherwise it reads only sysfs, procfs and netlink.
bool ProbeLoadsNvml(const topology::ProbeOptions& options);

// Whether a probe with these options reads this machine's /sys, /proc and
// /dev, not a tree standing in for them (TRAINLET_PROBE_ROOT,
// TRAINLET_SYSFS_ROOT).
bool ProbeReadsThisMachine(const topology::ProbeOptions& options);

// topology::ProbeNode(options) running on a thread of its own.
class NodeProbeRun;
std::shared_ptr<NodeProbeRun> StartNodeProbe(const topology::ProbeOptions& options);

// Hands the probe's result to `done` once it has finished: on the probe's
// thread, or at once on the caller's when it has. Never waits.
void WhenNodeProbeDone(NodeProbeRun& run, NodeProbeCallback done);

// A probe that starts when first asked for: Run() starts it once, on the
// first call from any thread, and returns that run to every call.
class LazyNodeProbe {
 public:
  explicit LazyNodeProbe(topology::ProbeOptions options) : options_(std::move(options)) {}
  LazyNodeProbe(const LazyNodeProbe&) = delete;
  LazyNodeProbe& operator=(const LazyNodeProbe&) = delete;

  NodeProbeRun& Run();
  bool started() const;

 private:
  const topology::ProbeOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<NodeProbeRun> run_ ABSL_GUARDED_BY(mu_);  // set once
};

// Waits at most `timeout` (from now) for a started probe; null when it did
// not finish in time, with `*note` saying so. May be called again.
std::shared_ptr<const v1::NodeProbe> AwaitNodeProbe(NodeProbeRun& run, absl::Duration timeout,
                                                    std::string* note);

// Both at once: runs topology::ProbeNode(options), waiting at most
// `timeout`.
std::shared_ptr<const v1::NodeProbe> ProbeNodeBounded(const topology::ProbeOptions& options,
                                                      absl::Duration timeout, std::string* note);

// One line for the startup log: "8 GPUs visible (NVIDIA H100 80GB HBM3;
// NVML OK 550.54.15), 9 NICs (8 InfiniBand), 2 NUMA nodes, /dev/shm 64 GiB,
// in 3.1 ms". Values from the machine are escaped and bounded.
std::string ProbeSummaryLine(const v1::NodeProbe& probe);

// Why this node's GPUs cannot be trusted with a job, one reason per GPU
// problem; empty when nothing is fatal (unknown counters are not). Fatal:
// NVML's recovery action asks for a GPU reset or a node reboot (1, 2, 4);
// uncorrectable (double-bit) ECC errors since the driver loaded; a row
// remap that failed or waits for a reset; a GPU NVML lost (Xid 79, "fallen
// off the bus": the sysfs device is there, NVML does not answer for it).
// An elastic agent leaves the job with exit 81 on it (docs/exit-codes.md).
std::vector<std::string> FatalGpuHealth(const v1::NodeProbe& probe);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_NODE_PROBE_H_

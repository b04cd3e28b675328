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
// on it, owning its own state. The config only plans the agent's probe
// (RunConfig::node_probe_timing): the agent runs it before the workers
// (ProbeNodeBeforeWorkers) where its answer may change them, never with
// --probe-timeout=0 (which keeps a hung driver away), and where its answer
// changes no worker's environment (a single-node run without GPUs) only once
// the workers run and the agent first idles (StartNodeProbeOnceWorkersRun),
// so that it never delays their start or competes with it for a CPU.
#ifndef TRAINLET_AGENT_NODE_PROBE_H_
#define TRAINLET_AGENT_NODE_PROBE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/run_config.h"
#include "config/system_probe.h"
#include "topology/probe.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

// Called with the node probe's result once it has finished.
using NodeProbeCallback = std::function<void(std::shared_ptr<const v1::NodeProbe>)>;

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

// Waits at most `timeout` (from now) for a started probe; null when it did
// not finish in time, with `*note` saying so. May be called again.
std::shared_ptr<const v1::NodeProbe> AwaitNodeProbe(NodeProbeRun& run, absl::Duration timeout,
                                                    std::string* note);

// Both at once: runs topology::ProbeNode(options), waiting at most
// `timeout`.
std::shared_ptr<const v1::NodeProbe> ProbeNodeBounded(const topology::ProbeOptions& options,
                                                      absl::Duration timeout, std::string* note);

// ---- The agent commands' node facts (`run`, `mpi-launcher`, `mpi-worker`).

// The machine's facts the config is resolved from: ProbeSystem(env)'s (no
// GPU driver, no DNS), and that the agent runs the node probe the config
// plans, which may wait for the workers where it loads no GPU driver (NVML)
// and reads this machine's own /sys, /proc and /dev.
SystemInfo AgentSystemInfo(const std::map<std::string, std::string>& env);

// Where `config` plans the probe before the workers (kBeforeWorkers): runs
// it with AgentProbeOptions(env), waits at most config->probe_timeout, and
// resolves the rest of the config with its answer (ResolveWithNodeProbe:
// the worker count, NCCL's config files). Any other plan: nothing. Errors:
// ResolveWithNodeProbe's (--nproc-per-node=gpu without a GPU: exit 78).
absl::Status ProbeNodeBeforeWorkers(const std::map<std::string, std::string>& env,
                                    const SystemInfo& sys, RunConfig* config);

// Where `config` plans the probe for once the workers run
// (kOnceWorkersRun): starts it, and hands its answer to `done` on the
// probe's thread when it finishes. Any other plan: nothing. Never waits.
void StartNodeProbeOnceWorkersRun(const RunConfig& config,
                                  const std::map<std::string, std::string>& env,
                                  NodeProbeCallback done);

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

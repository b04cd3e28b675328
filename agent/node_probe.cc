#include "agent/node_probe.h"

#include <unistd.h>

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"

namespace trainlet::agent {

class NodeProbeRun {
 public:
  absl::Notification done;
  absl::Mutex mu;
  std::shared_ptr<const v1::NodeProbe> result ABSL_GUARDED_BY(mu);
  std::vector<NodeProbeCallback> waiting ABSL_GUARDED_BY(mu);
};

topology::ProbeOptions AgentProbeOptions(const std::map<std::string, std::string>& env) {
  topology::ProbeOptions o;
  o.env = env;
  o.nccl_library.clear();
  auto root = env.find("TRAINLET_PROBE_ROOT");
  if (root != env.end() && !root->second.empty()) {
    o.sysfs_root = root->second + "/sys";
    o.proc_root = root->second + "/proc";
    o.dev_root = root->second + "/dev";
  }
  auto nvml = env.find("TRAINLET_NVML_LIBRARY");
  if (nvml != env.end() && !nvml->second.empty()) {
    o.nvml.library = nvml->second == "none" ? "" : nvml->second;
  } else if (access((o.dev_root + "/nvidiactl").c_str(), F_OK) != 0) {
    // No NVIDIA driver device in this container: nvmlInit could only fail,
    // and looking for the library costs ~2 ms of the agent's start.
    o.nvml.absent_reason = absl::StrCat("no ", o.dev_root,
                                        "/nvidiactl: no NVIDIA driver in this container (NVML "
                                        "not tried; TRAINLET_NVML_LIBRARY forces it)");
  }
  auto sysfs = env.find("TRAINLET_SYSFS_ROOT");
  if (sysfs != env.end() && !sysfs->second.empty()) o.sysfs_root = sysfs->second;
  return o;
}

bool ProbeLoadsNvml(const topology::ProbeOptions& options) {
  return !options.nvml.library.empty() && options.nvml.absent_reason.empty();
}

bool ProbeReadsThisMachine(const topology::ProbeOptions& options) {
  const topology::ProbeOptions machine;
  return options.sysfs_root == machine.sysfs_root && options.proc_root == machine.proc_root &&
         options.dev_root == machine.dev_root;
}

std::shared_ptr<NodeProbeRun> StartNodeProbe(const topology::ProbeOptions& options) {
  auto run = std::make_shared<NodeProbeRun>();
  std::thread([run, options] {
    auto probe = std::make_shared<const v1::NodeProbe>(topology::ProbeNode(options));
    std::vector<NodeProbeCallback> waiting;
    {
      absl::MutexLock lock(&run->mu);
      run->result = probe;
      waiting.swap(run->waiting);
    }
    run->done.Notify();
    for (NodeProbeCallback& done : waiting) done(probe);
  }).detach();
  return run;
}

void WhenNodeProbeDone(NodeProbeRun& run, NodeProbeCallback done) {
  std::shared_ptr<const v1::NodeProbe> result;
  {
    absl::MutexLock lock(&run.mu);
    if (run.result == nullptr) {
      run.waiting.push_back(std::move(done));
      return;
    }
    result = run.result;
  }
  done(std::move(result));
}

std::shared_ptr<const v1::NodeProbe> AwaitNodeProbe(NodeProbeRun& run, absl::Duration timeout,
                                                    std::string* note) {
  if (!run.done.WaitForNotificationWithTimeout(timeout)) {
    *note = absl::StrCat("did not finish within ", absl::FormatDuration(timeout),
                         " (a slow or hung GPU driver?)");
    return nullptr;
  }
  absl::MutexLock lock(&run.mu);
  return run.result;
}

std::shared_ptr<const v1::NodeProbe> ProbeNodeBounded(const topology::ProbeOptions& options,
                                                      absl::Duration timeout, std::string* note) {
  std::shared_ptr<NodeProbeRun> run = StartNodeProbe(options);
  return AwaitNodeProbe(*run, timeout, note);
}

SystemInfo AgentSystemInfo(const std::map<std::string, std::string>& env) {
  SystemInfo sys = ProbeSystem(env);
  const topology::ProbeOptions options = AgentProbeOptions(env);
  sys.node_probe_available = true;
  sys.node_probe_deferrable = !ProbeLoadsNvml(options) && ProbeReadsThisMachine(options);
  return sys;
}

absl::Status ProbeNodeBeforeWorkers(const std::map<std::string, std::string>& env,
                                    const SystemInfo& sys, RunConfig* config) {
  if (config->node_probe_timing != NodeProbeTiming::kBeforeWorkers) return absl::OkStatus();
  std::string note;
  std::shared_ptr<const v1::NodeProbe> probe =
      ProbeNodeBounded(AgentProbeOptions(env), config->probe_timeout, &note);
  return ResolveWithNodeProbe(std::move(probe), note, env, sys, config);
}

void StartNodeProbeOnceWorkersRun(const RunConfig& config,
                                  const std::map<std::string, std::string>& env,
                                  NodeProbeCallback done) {
  if (config.node_probe_timing != NodeProbeTiming::kOnceWorkersRun) return;
  WhenNodeProbeDone(*StartNodeProbe(AgentProbeOptions(env)), std::move(done));
}

namespace {

// The generated Status_Name() looks the name up in topology.proto's descriptor, and the first
// such lookup builds that file's descriptors (and their dependencies') at run time: about a
// millisecond of allocation on the path of every run. The names, spelled as the proto does.
const char* SourceStatusName(v1::Source::Status status) {
  switch (status) {
    case v1::Source::STATUS_UNSPECIFIED:
      return "STATUS_UNSPECIFIED";
    case v1::Source::OK:
      return "OK";
    case v1::Source::ABSENT:
      return "ABSENT";
    case v1::Source::ERROR:
      return "ERROR";
    case v1::Source::UNSUPPORTED:
      return "UNSUPPORTED";
    case v1::Source::SKIPPED:
      return "SKIPPED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

std::string ProbeSummaryLine(const v1::NodeProbe& probe) {
  int ib = 0;
  for (const v1::Nic& n : probe.nics()) ib += n.kind() == v1::Nic::INFINIBAND ? 1 : 0;
  std::string gpu_name;
  for (const v1::Gpu& g : probe.gpus()) {
    if (g.visible() && !g.name().empty()) {
      gpu_name = SafeForLog(g.name(), 64);
      break;
    }
  }
  const v1::Source& nvml = probe.nvml();
  std::string nvml_text = SourceStatusName(nvml.status());
  if (!nvml.version().empty()) absl::StrAppend(&nvml_text, " ", SafeForLog(nvml.version(), 32));
  if (nvml.status() != v1::Source::OK && !nvml.reason().empty()) {
    absl::StrAppend(&nvml_text, ": ", SafeForLog(nvml.reason(), 120));
  }
  const v1::Source& procfs = probe.nvidia_procfs();
  if (nvml.status() != v1::Source::OK && procfs.status() == v1::Source::OK) {
    absl::StrAppend(&nvml_text, "; GPUs from the NVIDIA driver's procfs",
                    procfs.version().empty()
                        ? ""
                        : absl::StrCat(", driver ", SafeForLog(procfs.version(), 32)));
  }
  std::string shm = probe.shm_bytes() > 0
                        ? absl::StrFormat(", /dev/shm %.1f GiB",
                                          static_cast<double>(probe.shm_bytes()) / (1 << 30))
                        : "";
  return absl::StrFormat(
      "%d GPUs visible%s (NVML %s), %d NICs (%d InfiniBand/RoCE), %d NUMA nodes%s",
      probe.visible_gpu_count(), gpu_name.empty() ? "" : absl::StrCat(", ", gpu_name), nvml_text,
      probe.nics_size(), ib, probe.numa_nodes_size(), shm);
}

std::vector<std::string> FatalGpuHealth(const v1::NodeProbe& probe) {
  std::vector<std::string> reasons;
  for (const v1::Gpu& g : probe.gpus()) {
    if (!g.visible()) continue;  // another pod's GPU on this machine
    const v1::GpuHealth& h = g.health();
    const std::string who =
        absl::StrFormat("GPU %d (%s)", g.index(), SafeForLog(g.pci_bus_id(), 32));
    if (h.recovery_action_known() && h.recovery_action() >= 1 && h.recovery_action() <= 4) {
      static constexpr const char* kActions[] = {"", "a GPU reset", "a node reboot",
                                                 "draining P2P traffic and a reset",
                                                 "draining and a reset"};
      reasons.push_back(
          absl::StrCat(who, ": NVML's recovery action asks for ", kActions[h.recovery_action()]));
    }
    if (h.ecc_known() && h.ecc_dbe_volatile() > 0) {
      reasons.push_back(absl::StrCat(who, ": ", h.ecc_dbe_volatile(),
                                     " uncorrectable ECC error(s) since the driver loaded"));
    }
    if (h.remap_known() && h.remap_failure()) {
      reasons.push_back(absl::StrCat(who, ": a row remap failed"));
    } else if (h.remap_known() && h.remap_pending()) {
      reasons.push_back(absl::StrCat(who, ": a row remap waits for a GPU reset"));
    }
  }
  return reasons;
}

}  // namespace trainlet::agent

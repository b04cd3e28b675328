#include "topology/probe.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/net_interfaces.h"
#include "topology/driver_procfs.h"
#include "topology/env_advice.h"
#include "topology/sysfs.h"
#include "topology/visibility.h"

namespace trainlet::topology {
namespace {

void SetSource(v1::Source* source, v1::Source::Status status, std::string reason) {
  source->set_status(status);
  source->set_reason(std::move(reason));
}

// Interface name -> its numeric addresses (getifaddrs: the live kernel only).
std::map<std::string, std::vector<std::string>> InterfaceAddresses() {
  std::map<std::string, std::vector<std::string>> out;
  for (const InterfaceAddress& a : ListInterfaceAddresses()) {
    std::vector<std::string>& addrs = out[a.interface];
    if (addrs.size() < 16 && std::find(addrs.begin(), addrs.end(), a.addr) == addrs.end()) {
      addrs.push_back(a.addr);
    }
  }
  return out;
}

bool IsLiveSysfs(const std::string& root) {
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r == "/sys";
}

void ReadNvmlSource(const ProbeOptions& options, v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus) {
  if (options.read_nvml) {
    options.read_nvml(options.nvml, probe, gpus);
    return;
  }
  if (!options.nvml.absent_reason.empty()) {
    SetSource(probe->mutable_nvml(), v1::Source::ABSENT, options.nvml.absent_reason);
    return;
  }
  if (options.nvml.library.empty()) {
    SetSource(probe->mutable_nvml(), v1::Source::SKIPPED, "not asked (no NVML library given)");
    return;
  }
  ReadNvml(options.nvml, probe, gpus);
}

void ReadNcclSource(const ProbeOptions& options, v1::NodeProbe* probe) {
  if (options.nccl_library.empty()) {
    SetSource(probe->mutable_nccl(), v1::Source::SKIPPED, "not asked (no NCCL library given)");
    return;
  }
  ReadNcclVersion(options.nccl_library, probe->mutable_nccl());
}

// The container's GPUs as NVML or the driver's procfs list them (`source`:
// "nvml" or "procfs"; NVML index order = bus order) completed from sysfs by
// bus id. Returns how many NVIDIA GPUs sysfs has that the list does not.
int MergeWithSysfs(std::vector<v1::Gpu> nvml_gpus, const SysfsScan& scan, const std::string& source,
                   v1::NodeProbe* probe) {
  std::map<std::string, const v1::Gpu*> by_bus;
  for (const v1::Gpu& g : scan.gpus) by_bus[g.pci_bus_id()] = &g;
  std::map<std::string, bool> matched;
  for (v1::Gpu& g : nvml_gpus) {
    std::optional<std::string> bus = NormalizeBusId(g.pci_bus_id());
    g.set_pci_bus_id(bus.value_or(""));
    g.set_visible(true);
    g.set_visible_ordinal(-1);
    auto it = bus.has_value() ? by_bus.find(*bus) : by_bus.end();
    if (it == by_bus.end()) {
      g.set_numa_node(-1);
      g.set_source(source);
      *probe->add_gpus() = std::move(g);
      continue;
    }
    const v1::Gpu& s = *it->second;
    matched[s.pci_bus_id()] = true;
    g.set_numa_node(s.numa_node());
    for (const std::string& p : s.pci_path()) g.add_pci_path(p);
    g.set_root_complex(s.root_complex());
    if (g.link_speed().empty()) g.set_link_speed(s.link_speed());
    if (g.link_width() == 0) g.set_link_width(s.link_width());
    if (g.vendor_id().empty()) g.set_vendor_id(s.vendor_id());
    if (g.device_id().empty()) g.set_device_id(s.device_id());
    if (g.pci_class().empty()) g.set_pci_class(s.pci_class());
    // The NUMA node's cpumap as sysfs writes it (NVML's mask may be printed
    // with another width), so that GPUs and NUMA nodes compare as strings.
    if (!s.cpu_affinity().empty()) g.set_cpu_affinity(s.cpu_affinity());
    if (g.name().empty()) g.set_name(s.name());
    g.set_source(source + "+sysfs");
    *probe->add_gpus() = std::move(g);
  }
  int others = 0;
  for (const v1::Gpu& s : scan.gpus) {
    if (matched.count(s.pci_bus_id()) > 0) continue;
    if (s.vendor_id() == "0x10de") {
      ++others;  // Another pod's GPU: sysfs shows the whole node.
      continue;
    }
    v1::Gpu* g = probe->add_gpus();  // An accelerator that is not NVIDIA's.
    *g = s;
    g->set_index(probe->gpus_size() - 1);
    g->set_visible(false);
  }
  return others;
}

}  // namespace

v1::NodeProbe ProbeNode(const ProbeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  v1::NodeProbe probe;
  const RootFs sysfs(options.sysfs_root);
  const RootFs proc(options.proc_root);
  ReadHostFacts(proc, options.shm_path, &probe);

  SysfsScan scan = ScanSysfs(sysfs, proc);
  if (scan.pci_found) {
    SetSource(probe.mutable_sysfs(), v1::Source::OK, "");
  } else {
    SetSource(probe.mutable_sysfs(), v1::Source::ABSENT,
              absl::StrCat(options.sysfs_root, "/bus/pci/devices cannot be listed"));
  }

  std::vector<v1::Gpu> nvml_gpus;
  ReadNvmlSource(options, &probe, &nvml_gpus);
  ReadNcclSource(options, &probe);

  int nvidia_in_sysfs = 0;
  for (const v1::Gpu& g : scan.gpus) nvidia_in_sysfs += g.vendor_id() == "0x10de" ? 1 : 0;
  int not_in_container = 0;
  if (probe.nvml().status() == v1::Source::OK) {
    SetSource(probe.mutable_nvidia_procfs(), v1::Source::SKIPPED, "not needed (NVML answered)");
    not_in_container = MergeWithSysfs(std::move(nvml_gpus), scan, "nvml", &probe);
  } else {
    // Without NVML (a static build cannot load it; or no library), the
    // driver's procfs still names the container's GPUs.
    DriverProcfsScan driver =
        ReadDriverProcfs(proc, options.dev_root, probe.mutable_nvidia_procfs());
    for (std::string& w : driver.warnings) probe.add_warnings(std::move(w));
    if (probe.nvidia_procfs().status() == v1::Source::OK) {
      const bool any_gpu = !driver.gpus.empty() || nvidia_in_sysfs > 0 || driver.skipped > 0;
      not_in_container = MergeWithSysfs(std::move(driver.gpus), scan, "procfs", &probe);
      if (any_gpu) {
        probe.add_warnings(absl::StrCat(
            "NVML is not available (",
            probe.nvml().reason().empty() ? "no reason given"
                                          : SafeForLog(probe.nvml().reason(), 200),
            "): GPUs come from the NVIDIA driver's procfs (/proc/driver/nvidia/gpus); memory, "
            "NVLinks, health counters and the CUDA version are unknown"));
      }
    } else {
      for (v1::Gpu& g : scan.gpus) *probe.add_gpus() = std::move(g);
      if (nvidia_in_sysfs > 0) {
        // Neither NVML nor the driver's procfs: which GPUs are this
        // container's is unknown.
        std::string view = "nothing tells which are this container's, so all count";
        const int devices = CountNvidiaDevices(options.dev_root);
        if (devices > 0 && devices < nvidia_in_sysfs) {
          absl::StrAppend(&view, " (but ", SafeForLog(options.dev_root, 200), " has only ", devices,
                          " nvidia device nodes: this container probably has that many, which "
                          "ones is unknown)");
        }
        probe.add_warnings(absl::StrCat(
            "NVML is not available (",
            probe.nvml().reason().empty() ? "no reason given"
                                          : SafeForLog(probe.nvml().reason(), 200),
            ") and neither is /proc/driver/nvidia/gpus: the GPU list comes from sysfs, which "
            "shows the whole node (",
            nvidia_in_sysfs, " NVIDIA GPUs); ", view,
            "; names, UUIDs, memory and NVLinks are unknown"));
      }
    }
  }

  const bool live = IsLiveSysfs(options.sysfs_root);
  std::map<std::string, std::vector<std::string>> addrs;
  if (live) addrs = InterfaceAddresses();
  for (v1::Nic& nic : scan.nics) {
    if (nic.kind() == v1::Nic::NET) {
      auto it = addrs.find(nic.name());
      if (it != addrs.end()) {
        for (const std::string& a : it->second) nic.add_addrs(a);
      }
    }
    *probe.add_nics() = std::move(nic);
  }
  for (v1::NumaNode& n : scan.numa_nodes) *probe.add_numa_nodes() = std::move(n);
  for (std::string& w : scan.warnings) probe.add_warnings(std::move(w));
  for (std::string& w : PodLimitWarnings(probe)) probe.add_warnings(std::move(w));

  ApplyVisibility(options.env, &probe);
  if (not_in_container > 0) {
    probe.set_visibility_note(absl::StrCat(probe.visibility_note(), "; ", not_in_container,
                                           " more NVIDIA GPUs on the node (sysfs) are not in "
                                           "this container"));
  }
  probe.set_probe_micros(std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count());
  return probe;
}

}  // namespace trainlet::topology

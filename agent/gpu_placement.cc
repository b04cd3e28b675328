#include "agent/gpu_placement.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rendezvous/protocol.h"
#include "topology/visibility.h"

namespace trainlet::agent {
namespace {

constexpr int kMaxCpus = 65536;

// The visible GPUs in CUDA ordinal order.
std::vector<const v1::Gpu*> VisibleInOrder(const v1::NodeProbe& probe) {
  std::vector<const v1::Gpu*> gpus;
  for (const v1::Gpu& g : probe.gpus()) {
    if (g.visible() && g.visible_ordinal() >= 0) gpus.push_back(&g);
  }
  std::sort(gpus.begin(), gpus.end(), [](const v1::Gpu* a, const v1::Gpu* b) {
    return a->visible_ordinal() < b->visible_ordinal();
  });
  return gpus;
}

// How CUDA_VISIBLE_DEVICES names `g` for a process that sees every GPU of
// the container: its UUID, else its ordinal in PCI order (the NVML index,
// under CUDA_DEVICE_ORDER=PCI_BUS_ID).
std::string CudaName(const v1::Gpu& g) {
  return g.uuid().empty() ? absl::StrCat(g.index()) : g.uuid();
}

const v1::NumaNode* FindNuma(const v1::NodeProbe& probe, int id) {
  for (const v1::NumaNode& n : probe.numa_nodes()) {
    if (n.id() == id) return &n;
  }
  return nullptr;
}

// Binds `p` to NUMA node `node`: its CPUs that the agent may use.
void BindToNode(const v1::NodeProbe& probe, int node, const std::vector<int>& allowed,
                WorkerPlacement* p) {
  const v1::NumaNode* numa = node >= 0 ? FindNuma(probe, node) : nullptr;
  if (numa == nullptr) {
    absl::StrAppend(&p->note, ", not bound (NUMA node unknown)");
    return;
  }
  std::optional<std::vector<int>> cpus = ParseCpuList(numa->cpulist());
  std::vector<int> mine;
  if (cpus.has_value()) {
    std::set<int> ok(allowed.begin(), allowed.end());
    for (int c : *cpus) {
      if (allowed.empty() || ok.count(c) > 0) mine.push_back(c);
    }
  }
  p->numa_node = node;
  if (mine.empty()) {
    absl::StrAppend(&p->note, ", memory on NUMA node ", node, ", CPUs not bound (none of node ",
                    node, "'s CPUs is allowed to this pod)");
    return;
  }
  p->cpus = std::move(mine);
  absl::StrAppend(&p->note, ", NUMA node ", node, " (CPUs ", FormatCpuList(p->cpus), ")");
}

}  // namespace

std::vector<WorkerPlacement> PlanPlacement(const v1::NodeProbe& probe, const PlacementInput& in) {
  const int lws = std::max(in.local_world_size, 0);
  std::vector<WorkerPlacement> out(lws);
  // Without NVML or the driver's procfs the GPU list is sysfs's, the whole
  // node's: which of them this container has is a guess, so GPUs are placed
  // only on the word of a source that shows the container's view.
  // MIG slices are not in the probe's GPU list (it lists whole GPUs): with
  // MIG devices visible, placing workers by whole GPU would point several
  // ranks at ordinals CUDA numbers differently, so GPUs are left alone.
  auto names_mig = [&](const char* name) {
    auto it = in.env.find(name);
    return it != in.env.end() && absl::StrContains(it->second, "MIG-");
  };
  const bool mig = names_mig("CUDA_VISIBLE_DEVICES") || names_mig("NVIDIA_VISIBLE_DEVICES");
  const std::vector<const v1::Gpu*> gpus = topology::HasContainerGpuView(probe) && !mig
                                               ? VisibleInOrder(probe)
                                               : std::vector<const v1::Gpu*>{};
  const int n = static_cast<int>(gpus.size());
  auto cvd = in.env.find("CUDA_VISIBLE_DEVICES");
  const bool user_cvd = cvd != in.env.end();
  std::vector<std::string> user_entries;
  if (user_cvd) {
    for (absl::string_view e : absl::StrSplit(cvd->second, ',')) {
      user_entries.emplace_back(absl::StripAsciiWhitespace(e));
    }
  }
  // --gpu-binding=list without the user's CUDA_VISIBLE_DEVICES: ordinals
  // 0..n-1 when the workers may use every GPU the container has, else (the
  // agent narrowed the set by NVIDIA_VISIBLE_DEVICES, which CUDA does not
  // read) the chosen GPUs by name.
  std::string list_value;
  if (n > 0 && !user_cvd) {
    int in_view = 0;
    for (const v1::Gpu& g : probe.gpus()) {
      in_view += absl::StartsWith(g.source(), "nvml") || absl::StartsWith(g.source(), "procfs");
    }
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      names.push_back(n == in_view ? absl::StrCat(i) : CudaName(*gpus[i]));
    }
    list_value = absl::StrJoin(names, ",");
  }
  for (int l = 0; l < lws; ++l) {
    WorkerPlacement& p = out[l];
    // No GPU and no --bind-numa: nothing is placed, and nothing is logged.
    if (n == 0 && !in.bind_numa) continue;
    p.note = absl::StrCat("local rank ", l);
    if (n > 0) {
      const v1::Gpu& g = *gpus[l % n];
      p.gpu_ordinal = g.visible_ordinal();
      p.gpu_bus_id = g.pci_bus_id();
      absl::StrAppend(&p.note, ": GPU ", p.gpu_ordinal,
                      g.pci_bus_id().empty() ? "" : absl::StrCat(" (", g.pci_bus_id(), ")"));
      switch (in.gpu_binding) {
        case GpuBinding::kList:
          if (!user_cvd) p.cuda_visible_devices = list_value;
          break;
        case GpuBinding::kSingle:
          if (user_cvd && p.gpu_ordinal < static_cast<int>(user_entries.size())) {
            p.cuda_visible_devices = user_entries[p.gpu_ordinal];
          } else {
            p.cuda_visible_devices = CudaName(g);
          }
          absl::StrAppend(&p.note, ", CUDA_VISIBLE_DEVICES=", *p.cuda_visible_devices);
          break;
        case GpuBinding::kNone:
          break;
      }
      if (in.bind_numa) BindToNode(probe, g.numa_node(), in.allowed_cpus, &p);
    } else if (in.bind_numa) {
      // No GPU: spread the workers over the NUMA nodes in blocks.
      const int nodes = probe.numa_nodes_size();
      if (nodes == 0) {
        absl::StrAppend(&p.note, ": not bound (no NUMA node found)");
      } else {
        const int idx = static_cast<int>(static_cast<int64_t>(l) * nodes / std::max(lws, 1));
        absl::StrAppend(&p.note, ": no GPU");
        BindToNode(probe, probe.numa_nodes(idx).id(), in.allowed_cpus, &p);
      }
    }
  }
  return out;
}

namespace {

// Printable ASCII without spaces, 1..max bytes: what the coordinator accepts
// for these fields (rendezvous/coordinator.cc, CheckTopology).
bool Sendable(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

v1::Topology JoinTopology(const v1::NodeProbe& probe) {
  using rendezvous::kMaxGpusPerNode;
  using rendezvous::kMaxHostIdentityLength;
  v1::Topology t;
  t.set_gpu_count(std::clamp(probe.visible_gpu_count(), 0, kMaxGpusPerNode));
  std::vector<const v1::Gpu*> gpus = VisibleInOrder(probe);
  bool all_uuids = !gpus.empty() && static_cast<int>(gpus.size()) <= kMaxGpusPerNode;
  for (const v1::Gpu* g : gpus) all_uuids &= Sendable(g->uuid(), rendezvous::kMaxGpuUuidLength);
  if (all_uuids) {
    for (const v1::Gpu* g : gpus) t.add_gpu_uuids(g->uuid());
  }
  if (Sendable(probe.nccl().version(), rendezvous::kMaxNcclVersionLength)) {
    t.set_nccl_version(probe.nccl().version());
  }
  if (Sendable(probe.boot_id(), kMaxHostIdentityLength)) t.set_boot_id(probe.boot_id());
  if (Sendable(probe.ipc_namespace(), kMaxHostIdentityLength)) {
    t.set_ipc_namespace(probe.ipc_namespace());
  }
  t.set_numa_nodes(std::min(probe.numa_nodes_size(), rendezvous::kMaxNumaNodes));
  // One clique for the node only when every GPU its workers use is in it.
  std::string clique;
  for (const v1::Gpu* g : gpus) {
    if (g->nvlink_clique().empty() || (!clique.empty() && g->nvlink_clique() != clique)) {
      clique.clear();
      break;
    }
    clique = g->nvlink_clique();
  }
  if (Sendable(clique, kMaxHostIdentityLength)) t.set_nvlink_clique(clique);
  return t;
}

void SetEnvVar(std::vector<std::string>* env, const std::string& name, const std::string& value,
               bool overwrite) {
  const std::string prefix = name + "=";
  for (std::string& e : *env) {
    if (e.compare(0, prefix.size(), prefix) == 0) {
      if (overwrite) e = prefix + value;
      return;
    }
  }
  // Not present: where the order by name puts it (a linear scan: an
  // environment is a few hundred entries, and "K=V" strings do not sort as
  // their names do: "A0=" < "A=").
  auto pos = std::find_if(env->begin(), env->end(), [&](const std::string& e) {
    return absl::string_view(e).substr(0, e.find('=')) > name;
  });
  env->insert(pos, prefix + value);
}

std::optional<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int lo = 0;
    int hi = 0;
    if (!absl::SimpleAtoi(ends[0], &lo)) return std::nullopt;
    hi = lo;
    if (ends.size() == 2 && !absl::SimpleAtoi(ends[1], &hi)) return std::nullopt;
    if (lo < 0 || hi < lo || hi >= kMaxCpus) return std::nullopt;
    if (cpus.size() + (hi - lo + 1) > static_cast<size_t>(kMaxCpus)) return std::nullopt;
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, sorted[i]);
    if (j > i) absl::StrAppend(&out, "-", sorted[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace trainlet::agent

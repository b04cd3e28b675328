#include "topology/visibility.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainlet::topology {
namespace {

// `name="value"` with the value escaped and cut at 64 bytes, for the note.
std::string Quoted(absl::string_view name, absl::string_view value) {
  constexpr size_t kMax = 64;
  std::string shown = absl::CEscape(value.substr(0, kMax));
  return absl::StrCat(name, "=\"", shown, value.size() > kMax ? "..." : "", "\"");
}

const std::string* FindEnv(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

bool IsNvidia(const v1::Gpu& gpu) {
  return gpu.vendor_id() == "0x10de" || absl::StartsWith(gpu.source(), "nvml") ||
         absl::StartsWith(gpu.source(), "procfs");
}

// The number an entry starts with, read as strtoul does ("1gpu" -> 1); -1
// when it does not start with a digit.
int64_t LeadingOrdinal(absl::string_view entry) {
  entry = absl::StripAsciiWhitespace(entry);
  if (!entry.empty() && entry[0] == '+') entry.remove_prefix(1);
  size_t digits = 0;
  while (digits < entry.size() && digits < 9 &&
         absl::ascii_isdigit(static_cast<unsigned char>(entry[digits]))) {
    ++digits;
  }
  int64_t n = -1;
  if (digits == 0 || !absl::SimpleAtoi(entry.substr(0, digits), &n)) return -1;
  return n;
}

// NVIDIA_VISIBLE_DEVICES=<list> over `view` (indexes into gpus).
std::vector<int> NvidiaList(absl::string_view value, const v1::NodeProbe& probe,
                            std::vector<int> view, bool* by_count) {
  std::vector<absl::string_view> entries;
  for (absl::string_view e : absl::StrSplit(value, ',')) {
    e = absl::StripAsciiWhitespace(e);
    if (!e.empty()) entries.push_back(e);
  }
  if (view.size() <= entries.size()) return view;  // Already applied by the runtime.
  std::set<int> chosen;
  for (absl::string_view e : entries) {
    int n = -1;
    bool number = absl::SimpleAtoi(e, &n);
    auto it = std::find_if(view.begin(), view.end(), [&](int i) {
      const v1::Gpu& gpu = probe.gpus(i);
      return number ? gpu.index() == n
                    : (!gpu.uuid().empty() && absl::EqualsIgnoreCase(gpu.uuid(), e));
    });
    if (it == view.end() || !chosen.insert(*it).second) {
      view.resize(entries.size());  // Cannot tell which: the first ones, by count.
      *by_count = true;
      return view;
    }
  }
  std::vector<int> out;
  for (int i : view) {
    if (chosen.count(i) > 0) out.push_back(i);
  }
  return out;
}

// CUDA_VISIBLE_DEVICES=`value` over `view`, in the list's order.
std::vector<int> CudaList(absl::string_view value, const v1::NodeProbe& probe,
                          const std::vector<int>& view, bool* by_count) {
  std::vector<absl::string_view> entries = absl::StrSplit(value, ',');
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(value);
  for (absl::string_view prefix : {"GPU-", "MIG-"}) {
    if (!absl::StartsWith(trimmed, prefix)) continue;
    std::set<absl::string_view> seen;
    std::vector<absl::string_view> ids;
    for (absl::string_view e : entries) {
      e = absl::StripAsciiWhitespace(e);
      if (!absl::StartsWith(e, prefix)) break;
      if (!seen.insert(e).second) return {};  // A repeated id selects nothing.
      ids.push_back(e);
    }
    const bool have_uuids = prefix == "GPU-" && std::all_of(view.begin(), view.end(), [&](int i) {
                              return !probe.gpus(i).uuid().empty();
                            });
    if (!have_uuids) {
      *by_count = true;
      return std::vector<int>(view.begin(), view.begin() + std::min(ids.size(), view.size()));
    }
    std::vector<int> out;
    for (absl::string_view id : ids) {
      std::vector<int> matches;
      for (int i : view) {
        if (absl::StartsWithIgnoreCase(probe.gpus(i).uuid(), id)) matches.push_back(i);
      }
      if (matches.size() != 1) break;  // None, or an ambiguous prefix: the list ends.
      if (std::find(out.begin(), out.end(), matches[0]) != out.end()) return {};
      out.push_back(matches[0]);
    }
    return out;
  }
  std::set<int64_t> seen;
  std::vector<int> out;
  bool ended = false;
  for (absl::string_view e : entries) {
    int64_t ordinal = LeadingOrdinal(e);
    if (ordinal < 0) break;
    if (!seen.insert(ordinal).second) return {};  // A repeated ordinal selects nothing.
    // An ordinal past the devices ends the list; later repeats still count.
    if (ordinal >= static_cast<int64_t>(view.size())) ended = true;
    if (!ended) out.push_back(view[ordinal]);
  }
  return out;
}

}  // namespace

void ApplyVisibility(const std::map<std::string, std::string>& env, v1::NodeProbe* probe) {
  std::vector<int> view;
  for (int i = 0; i < probe->gpus_size(); ++i) {
    v1::Gpu* gpu = probe->mutable_gpus(i);
    if (gpu->visible() && IsNvidia(*gpu)) view.push_back(i);
    gpu->set_visible(false);
    gpu->set_visible_ordinal(-1);
  }
  const size_t in_view = view.size();
  std::vector<std::string> why;
  std::vector<int> selected = view;
  bool by_count = false;
  const std::string* cuda = FindEnv(env, "CUDA_VISIBLE_DEVICES");
  if (const std::string* nv = FindEnv(env, "NVIDIA_VISIBLE_DEVICES")) {
    std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*nv));
    if (cuda != nullptr) {
      // CUDA reads CUDA_VISIBLE_DEVICES over every GPU it can open, never
      // NVIDIA_VISIBLE_DEVICES.
      why.push_back(Quoted("NVIDIA_VISIBLE_DEVICES", *nv) +
                    " not applied (CUDA_VISIBLE_DEVICES decides)");
    } else if (t.empty() || t == "all" || t == "void" || t == "none" || absl::StartsWith(t, "/")) {
      // The runtime's own settings ("void": no NVIDIA hook, as with CDI;
      // a path: the device plugin's volume-mounts strategy): the GPUs this
      // container can open are its GPUs.
      if (t != "all") why.push_back(Quoted("NVIDIA_VISIBLE_DEVICES", *nv) + " ignored");
    } else {
      // A list the runtime applied leaves the view as large as the list; a
      // larger view (a privileged pod sees every /dev/nvidia*) is narrowed
      // here, and the agent then names those GPUs in CUDA_VISIBLE_DEVICES.
      selected = NvidiaList(*nv, *probe, selected, &by_count);
      why.push_back(Quoted("NVIDIA_VISIBLE_DEVICES", *nv));
    }
  }
  if (cuda != nullptr) {
    selected = CudaList(*cuda, *probe, selected, &by_count);
    why.push_back(Quoted("CUDA_VISIBLE_DEVICES", *cuda));
  }
  for (size_t k = 0; k < selected.size(); ++k) {
    v1::Gpu* gpu = probe->mutable_gpus(selected[k]);
    gpu->set_visible(true);
    gpu->set_visible_ordinal(static_cast<int>(k));
  }
  probe->set_visible_gpu_count(static_cast<int>(selected.size()));
  std::string note =
      why.empty() ? absl::StrCat(in_view, " GPUs in this container's view")
                  : absl::StrCat(selected.size(), " of ", in_view,
                                 " GPUs in this container's view, ", absl::StrJoin(why, ", "));
  if (by_count) absl::StrAppend(&note, " (not all named GPUs found: the first GPUs, by count)");
  probe->set_visibility_note(note);
}

bool HasContainerGpuView(const v1::NodeProbe& probe) {
  return probe.nvml().status() == v1::Source::OK ||
         probe.nvidia_procfs().status() == v1::Source::OK;
}

}  // namespace trainlet::topology

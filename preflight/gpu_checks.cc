#include "preflight/gpu_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

namespace {

// How one GPU fares in one check.
struct Verdict {
  bool known = false;
  bool failed = false;
  double value = 0;
  std::string what;  // why it failed, for the reason.
};

std::string GpuName(const GpuFacts& g) {
  if (g.pci_bus_id.empty()) return absl::StrCat("GPU ", g.index);
  return absl::StrCat("GPU ", g.index, " (", SafeForLog(g.pci_bus_id, 16), ")");
}

// Runs `judge` over every GPU and folds the verdicts into one result: SKIPPED
// without NVML, GPUs or any GPU that could say; FAIL naming each failing
// GPU; else PASS. The value is the largest of the GPUs'.
template <typename Judge>
v1::CheckResult Fold(absl::string_view check, const GpuInputs& in, absl::string_view fact,
                     absl::string_view unit, double threshold, Judge judge) {
  if (in.gpus.empty()) return Skipped(check, "no GPUs on this node");
  if (!in.nvml_ok) {
    return Skipped(check, absl::StrCat("NVML is not available (",
                                       in.nvml_reason.empty() ? "no reason given"
                                                              : SafeForLog(in.nvml_reason, 200),
                                       "): ", fact, " unknown"));
  }
  int known = 0;
  double value = 0;
  std::vector<std::string> failed;
  for (const GpuFacts& g : in.gpus) {
    const Verdict v = judge(g);
    if (!v.known) continue;
    ++known;
    value = std::max(value, v.value);
    if (v.failed) failed.push_back(absl::StrCat(GpuName(g), ": ", v.what));
  }
  if (known == 0) {
    return Skipped(check, absl::StrCat("NVML cannot say (", fact, ") on any of the ",
                                       in.gpus.size(), " GPUs"));
  }
  const std::string unknown =
      known < static_cast<int>(in.gpus.size())
          ? absl::StrCat(" (", in.gpus.size() - known, " GPUs could not say)")
          : "";
  if (!failed.empty()) {
    return MakeResult(check, v1::CheckResult::FAIL,
                      absl::StrCat(absl::StrJoin(failed, "; "), unknown), value, unit, threshold);
  }
  return MakeResult(check, v1::CheckResult::PASS,
                    absl::StrCat(fact, ": ", known, " GPUs healthy", unknown), value, unit,
                    threshold);
}

}  // namespace

GpuInputs GpuInputsFromProbe(const v1::NodeProbe& probe) {
  GpuInputs in;
  in.nvml_ok = probe.nvml().status() == v1::Source::OK;
  in.nvml_reason = probe.nvml().reason();
  for (const v1::Gpu& g : probe.gpus()) {
    if (!g.visible()) continue;  // another pod's, or hidden from this job's workers.
    GpuFacts f;
    f.index = g.index();
    f.pci_bus_id = g.pci_bus_id();
    const v1::GpuHealth& h = g.health();
    if (h.ecc_known()) f.ecc_dbe_volatile = h.ecc_dbe_volatile();
    if (h.remap_known()) {
      f.remap_failure = h.remap_failure();
      f.remap_pending = h.remap_pending();
    }
    if (h.recovery_action_known()) f.recovery_action = h.recovery_action();
    if (h.retired_pages_known()) {
      f.retired_pages = uint64_t{h.retired_pages_sbe()} + h.retired_pages_dbe();
    }
    if (h.retired_pages_pending_known()) f.retirement_pending = h.retired_pages_pending();
    if (h.processes_known()) {
      std::vector<GpuProcess> processes;
      for (const v1::GpuProcess& p : h.processes()) {
        GpuProcess q;
        q.pid = p.pid();
        if (p.used_memory_bytes() >= 0) q.used_bytes = static_cast<uint64_t>(p.used_memory_bytes());
        processes.push_back(q);
      }
      f.processes = std::move(processes);
    }
    in.gpus.push_back(std::move(f));
  }
  return in;
}

v1::CheckResult CheckGpuEcc(const GpuInputs& in) {
  return Fold(kCheckGpuEcc, in, "uncorrectable ECC errors", kUnitCount, 0, [](const GpuFacts& g) {
    Verdict v;
    if (!g.ecc_dbe_volatile.has_value()) return v;
    v.known = true;
    v.value = static_cast<double>(*g.ecc_dbe_volatile);
    v.failed = *g.ecc_dbe_volatile > 0;
    v.what = absl::StrCat(*g.ecc_dbe_volatile,
                          " uncorrectable (double-bit) ECC errors since the driver "
                          "loaded: drain the node and reset the GPU");
    return v;
  });
}

v1::CheckResult CheckGpuRowRemap(const GpuInputs& in) {
  return Fold(kCheckGpuRowRemap, in, "row remapping", kUnitCount, 0, [](const GpuFacts& g) {
    Verdict v;
    if (!g.remap_failure.has_value() && !g.remap_pending.has_value()) return v;
    v.known = true;
    const bool failure = g.remap_failure.value_or(false);
    const bool pending = g.remap_pending.value_or(false);
    v.failed = failure || pending;
    v.value = v.failed ? 1 : 0;
    if (failure) {
      v.what = "a row remap failed: the GPU needs service";
    } else if (pending) {
      v.what = "a row remap is pending: reset the GPU before use";
    }
    return v;
  });
}

v1::CheckResult CheckGpuRecoveryAction(const GpuInputs& in) {
  static constexpr const char* kActions[] = {"none",      "GPU reset",       "node reboot",
                                             "drain P2P", "drain and reset", "recover IMEX"};
  return Fold(kCheckGpuRecoveryAction, in, "recovery action", kUnitCount, 0, [](const GpuFacts& g) {
    Verdict v;
    if (!g.recovery_action.has_value()) return v;
    v.known = true;
    v.value = *g.recovery_action;
    v.failed = *g.recovery_action != 0;
    v.what = absl::StrCat(
        "NVML asks for recovery action ", *g.recovery_action, " (",
        *g.recovery_action < std::size(kActions) ? kActions[*g.recovery_action] : "unknown", ")");
    return v;
  });
}

v1::CheckResult CheckGpuRetiredPages(const GpuInputs& in, const GpuThresholds& t) {
  return Fold(kCheckGpuRetiredPages, in, "retired pages", kUnitCount,
              static_cast<double>(t.max_retired_pages), [&t](const GpuFacts& g) {
                Verdict v;
                if (!g.retired_pages.has_value() && !g.retirement_pending.has_value()) return v;
                v.known = true;
                const uint64_t pages = g.retired_pages.value_or(0);
                v.value = static_cast<double>(pages);
                if (g.retirement_pending.value_or(false)) {
                  v.failed = true;
                  v.what = absl::StrCat(
                      "pages are pending retirement (", pages,
                      " retired): memory known to be bad is in use until the GPU is reset");
                } else if (t.max_retired_pages > 0 && pages > t.max_retired_pages) {
                  v.failed = true;
                  v.what = absl::StrCat(pages, " retired pages, over ", t.max_retired_pages);
                }
                return v;
              });
}

v1::CheckResult CheckGpuForeignMemory(const GpuInputs& in, const GpuThresholds& t) {
  return Fold(kCheckGpuForeignMemory, in, "memory of other processes", kUnitBytes,
              static_cast<double>(t.max_foreign_memory_bytes), [&t](const GpuFacts& g) {
                Verdict v;
                if (!g.processes.has_value()) return v;
                v.known = true;
                uint64_t foreign = 0;
                size_t others = 0;
                bool unknown = false;  // a process not ours, its memory unknown.
                std::vector<std::string> pids;
                for (const GpuProcess& p : *g.processes) {
                  if (t.is_ours && t.is_ours(p.pid)) continue;
                  foreign += p.used_bytes.value_or(0);
                  unknown = unknown || !p.used_bytes.has_value();
                  ++others;
                  if (pids.size() < 4) pids.push_back(absl::StrCat(p.pid));
                }
                v.value = static_cast<double>(foreign);
                v.failed = foreign > t.max_foreign_memory_bytes || unknown;
                v.what = absl::StrCat(
                    HumanBytes(foreign), unknown ? " and more (NVML cannot say how much)" : "",
                    " held by processes not of this job (pid ", absl::StrJoin(pids, ", "),
                    pids.size() < others ? ", ..." : "",
                    "): a previous job's process still runs on this GPU");
                return v;
              });
}

std::vector<v1::CheckResult> CheckGpus(const GpuInputs& in, const GpuThresholds& t) {
  return {CheckGpuEcc(in), CheckGpuRowRemap(in), CheckGpuRecoveryAction(in),
          CheckGpuRetiredPages(in, t), CheckGpuForeignMemory(in, t)};
}

}  // namespace trainlet::preflight

// ResolveWorkers (run_resolvers.h) and ResolveWithNodeProbe (run_config.h):
// how many workers this node starts, and what the node probe may change.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/nested_launcher.h"
#include "config/run_resolvers.h"
#include "topology/env_advice.h"
#include "topology/visibility.h"

namespace trainlet::agent {
namespace {

// "torch,transformers" -> {"torch", "transformers"}: dotted Python
// identifiers (ASCII), at most 64 of at most 200 bytes each.
absl::StatusOr<std::vector<std::string>> ParseModuleList(absl::string_view text) {
  std::vector<std::string> modules;
  for (absl::string_view name : absl::StrSplit(text, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name.empty()) continue;
    bool ok = name.size() <= 200;
    bool start = true;
    for (char ch : name) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (c == '.') {
        ok = ok && !start;
        start = true;
      } else {
        ok = ok && (absl::ascii_isalpha(c) || c == '_' || (!start && absl::ascii_isdigit(c)));
        start = false;
      }
    }
    if (!ok || start)
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is no module name"));
    modules.emplace_back(name);
  }
  if (modules.empty()) return absl::InvalidArgumentError("no module named");
  if (modules.size() > 64) return absl::InvalidArgumentError("more than 64 modules");
  return modules;
}

// Several workers under Paddle's launcher (it starts one process per device
// itself) would all take the same PADDLE_RANK and never meet.
absl::Status CheckNestedPaddle(const RunConfig& c) {
  if (!c.nproc_request.nested_paddle || c.nproc_per_node == 1) return absl::OkStatus();
  const OptionValue& v = *c.nproc_request.value;  // the default for it is 1.
  return absl::InvalidArgumentError(absl::StrCat(
      v.origin, "=", absl::CEscape(v.text.substr(0, 32)), " gives ", c.nproc_per_node,
      " workers, but COMMAND is Paddle's launcher (paddle.distributed.launch, fleetrun), "
      "which starts one process per device itself: several launchers on one node would all "
      "take the same PADDLE_RANK and never meet; use --nproc-per-node=1 (the default for "
      "it) and give the launcher its devices (--devices=0,1,...)"));
}

// --nproc-per-node N|auto|gpu|cpu (or PET_NPROC_PER_NODE), checked; the
// count comes later (ResolveWorkerCount).
absl::Status ParseNprocRequest(const RunInputs& in, RunConfig* c) {
  NprocRequest& r = c->nproc_request;
  r.value = Pick(in.parsed, "nproc-per-node", in.k8s.nproc_per_node);
  // Paddle's launcher starts one process per device itself: one launcher
  // per node, like a nested torchrun.
  r.nested_paddle =
      in.mode.mpi == MpiRole::kNone && DetectNestedLauncher(c->command) == NestedLauncher::kPaddle;
  if (!r.value.has_value()) {
    c->nproc_kind = r.nested_paddle ? NprocKind::kFixed : NprocKind::kDefault;
    r.fixed = 1;
    return absl::OkStatus();
  }
  const std::string kind = absl::AsciiStrToLower(absl::StripAsciiWhitespace(r.value->text));
  if (kind == "auto") {
    c->nproc_kind = NprocKind::kAuto;
  } else if (kind == "gpu") {
    c->nproc_kind = NprocKind::kGpu;
  } else if (kind == "cpu") {
    c->nproc_kind = NprocKind::kCpu;
  } else {
    absl::StatusOr<int> n = ParseIntValue(*r.value, 1, kMaxNprocPerNode);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected N in 1..%d, auto, gpu or cpu, got \"%s\"", r.value->origin,
                          kMaxNprocPerNode, absl::CEscape(r.value->text)));
    }
    c->nproc_kind = NprocKind::kFixed;
    r.fixed = *n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveWorkerCount(int cpu_count, int gpu_count, const std::string& gpu_note,
                                RunConfig* c) {
  const int cpus = std::clamp(cpu_count, 1, kMaxNprocPerNode);
  const int gpus = std::clamp(gpu_count, 0, kMaxNprocPerNode);
  const std::optional<OptionValue>& value = c->nproc_request.value;
  std::string how;
  switch (c->nproc_kind) {
    case NprocKind::kDefault:
      // torchrun's default is 1; one worker per GPU is what a GPU machine wants.
      c->nproc_per_node = gpus > 0 ? gpus : 1;
      how = gpus > 0 ? gpu_note
                     : absl::StrCat("no GPU visible", gpu_note.empty() ? "" : ": ", gpu_note);
      c->discovery_notes.push_back(
          absl::StrCat("nproc-per-node ", c->nproc_per_node, " (default: ", how, ")"));
      return absl::OkStatus();
    case NprocKind::kAuto:
      c->nproc_per_node = gpus > 0 ? gpus : cpus;
      how = gpus > 0 ? absl::StrCat("auto: ", gpus, " GPUs")
                     : absl::StrCat("auto: no GPU, ", cpus, " CPUs");
      break;
    case NprocKind::kGpu:
      if (gpus <= 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            value->origin, "=gpu: no GPU found (looked for /dev/nvidia[0-9]*",
            gpu_note.empty() ? "" : absl::StrCat("; ", gpu_note), "); use auto, cpu or N"));
      }
      c->nproc_per_node = gpus;
      how = absl::StrCat("gpu: ", gpus, " GPUs");
      break;
    case NprocKind::kCpu:
      c->nproc_per_node = cpus;
      how = absl::StrCat("cpu: ", cpus, " CPUs");
      break;
    case NprocKind::kFixed:
      c->nproc_per_node = c->nproc_request.fixed;
      if (!value.has_value()) {  // Paddle's launcher.
        c->discovery_notes.push_back(
            "nproc-per-node 1 (COMMAND is paddle.distributed.launch, which starts one process "
            "per device)");
        return absl::OkStatus();
      }
      break;
  }
  if (value->source == ValueSource::kDiscovery) {
    c->discovery_notes.push_back(absl::StrCat("nproc-per-node ", c->nproc_per_node, " from ",
                                              value->origin, "=", value->text,
                                              how.empty() ? "" : absl::StrCat(" (", how, ")")));
  } else if (!how.empty()) {
    c->discovery_notes.push_back(
        absl::StrCat("nproc-per-node ", c->nproc_per_node, " (", how, ")"));
  }
  return CheckNestedPaddle(*c);
}

absl::Status ResolveWorkers(RunInputs* in, RunConfig* c) {
  if (absl::Status s = ParseDurationOptions(
          in->parsed, in->table, {{"probe-timeout", absl::ZeroDuration(), &c->probe_timeout}});
      !s.ok()) {
    return s;
  }
  c->allowed_cpus = in->sys.allowed_cpus;
  absl::StatusOr<bool> bind_numa =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "bind-numa"));
  if (!bind_numa.ok()) return bind_numa.status();
  c->bind_numa = *bind_numa;
  absl::StatusOr<bool> warm = ParseBoolValue(ValueOrDefault(in->parsed, in->table, "warm-workers"));
  if (!warm.ok()) return warm.status();
  c->warm_workers = *warm;
  if (const OptionValue* preload = in->parsed.Find("preload"); preload != nullptr) {
    absl::StatusOr<std::vector<std::string>> modules = ParseModuleList(preload->text);
    if (!modules.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(preload->origin, "=", preload->text, ": ", modules.status().message(),
                       "; give Python module names separated by commas, e.g. torch,transformers"));
    }
    c->preload = *std::move(modules);
  }
  // What the node has (topology/probe.h) is for the agent to find out,
  // bounded in time and never fatal; here only when. It need not be waited
  // for where its answer can change no worker's environment: a single-node
  // run (no NCCL socket or HCA advice), no /dev/nvidia* device and no NVML
  // (no GPU to place, count, check or advise on), no --bind-numa.
  const SystemInfo& sys = in->sys;
  const bool changes_nothing = !in->multi_node && !c->bind_numa && sys.gpu_devices == 0 &&
                               sys.gpu_count == 0 && sys.node_probe_deferrable;
  if (!sys.node_probe_available || c->probe_timeout <= absl::ZeroDuration()) {
    c->node_probe_timing = NodeProbeTiming::kOff;
  } else if (changes_nothing) {
    c->node_probe_timing = NodeProbeTiming::kOnceWorkersRun;
  } else {
    c->node_probe_timing = NodeProbeTiming::kBeforeWorkers;
  }
  const OptionValue binding = ValueOrDefault(in->parsed, in->table, "gpu-binding");
  absl::StatusOr<GpuBinding> gpu_binding = ParseGpuBinding(binding.text, binding.origin);
  if (!gpu_binding.ok()) return gpu_binding.status();
  c->gpu_binding = *gpu_binding;

  if (absl::Status s = ParseNprocRequest(*in, c); !s.ok()) return s;
  // Where the probe answers first, its visible GPUs may be the count
  // (ResolveWithNodeProbe); a fixed count is what it is.
  if (c->node_probe_timing == NodeProbeTiming::kBeforeWorkers &&
      c->nproc_kind != NprocKind::kFixed) {
    return absl::OkStatus();
  }
  return ResolveWorkerCount(sys.cpu_count, sys.gpu_count, sys.gpu_note, c);
}

absl::Status ResolveWithNodeProbe(std::shared_ptr<const v1::NodeProbe> probe,
                                  absl::string_view note,
                                  const std::map<std::string, std::string>& env,
                                  const SystemInfo& sys, RunConfig* c) {
  int gpus = sys.gpu_count;
  std::string gpu_note = sys.gpu_note;
  if (probe == nullptr) {
    c->warnings.push_back(absl::StrCat(
        "node probe: ", note,
        "; going on without it: worker count from /dev/nvidia*, no GPU placement, no NCCL "
        "advice (--probe-timeout sets the wait, 0 turns the probe off)"));
  } else {
    // Where NVML answered (or the driver's procfs listed the container's
    // GPUs), its visible GPUs are the GPU count.
    if (topology::HasContainerGpuView(*probe)) {
      gpus = probe->visible_gpu_count();
      gpu_note = probe->visibility_note();
    }
    // What NCCL's own config files set counts as the user's: advice leaves it.
    c->nccl_conf_vars = topology::NcclConfFileVars(env, sys.root);
  }
  c->node_probe = std::move(probe);
  if (c->nproc_per_node != 0) return absl::OkStatus();
  return ResolveWorkerCount(sys.cpu_count, gpus, gpu_note, c);
}

}  // namespace trainlet::agent

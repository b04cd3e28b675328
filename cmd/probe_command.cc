#include "cmd/probe_command.h"

#include <fstream>
#include <ostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/node_probe.h"
#include "common/exit_codes.h"
#include "config/options.h"
#include "google/protobuf/util/json_util.h"
#include "topology/env_advice.h"
#include "topology/nccl_xml.h"

namespace trainlet::agent {
namespace {

constexpr char kProbeUsage[] = "trainlet probe [OPTIONS]";
constexpr char kProbeDescription[] =
    "Probe what this node has: GPUs (sysfs and NVML, loaded at run time, by the static build "
    "through its NVML reader and the image's own dynamic loader; without NVML, the NVIDIA "
    "driver's /proc/driver/nvidia/gpus), GPU health (ECC, row remapping, retired pages, the "
    "processes holding GPU memory), InfiniBand/RoCE and "
    "network interfaces, NUMA nodes, the boot id, /dev/shm and the memlock limit, and NCCL's "
    "version. A missing library or device is reported, never an error: a CPU-only node probes "
    "cleanly. The visible GPUs honour NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES. Every "
    "agent runs the same probe at start (without NCCL).";

}  // namespace

const std::vector<OptionSpec>& ProbeOptionTable() {
  static const auto* table = new std::vector<OptionSpec>{
      {"format", OptionKind::kString, "json|nccl-topo|env", "json",
       "json = the probe (trainlet.v1.NodeProbe, proto3 JSON); nccl-topo = an NCCL topology "
       "file for NCCL_TOPO_FILE; env = the NCCL/CUDA variables the agent would set, as sh "
       "export lines, with warnings as comments.",
       /*hidden=*/false, /*flag_only=*/true},
      {"sysfs-root", OptionKind::kString, "DIR", "/sys",
       "A tree standing in for /sys (bus/pci/devices, class/infiniband, class/net, "
       "devices/system/node), e.g. one captured from another node."},
      {"probe-root", OptionKind::kString, "DIR", "",
       "A tree standing in for /: DIR/sys, DIR/proc (boot id, the NVIDIA driver's "
       "driver/nvidia/gpus) and DIR/dev (nvidia device nodes) are read instead of /sys, /proc "
       "and /dev; --sysfs-root, when given, still decides sysfs."},
      {"nvml-library", OptionKind::kString, "LIB", "libnvidia-ml.so.1",
       "What to dlopen for NVML (a soname, found as the image's loader finds it, or a path); "
       "none skips NVML."},
      {"nccl-library", OptionKind::kString, "LIB", "libnccl.so.2",
       "What to dlopen for NCCL's version; none skips it."},
      {"timeout", OptionKind::kDuration, "DURATION", "10s",
       "Give up (exit 69) when the probe takes longer (a hung GPU driver).", /*hidden=*/false,
       /*flag_only=*/true},
  };
  return *table;
}

namespace {

std::string Library(const OptionValue& v) {
  std::string t(absl::StripAsciiWhitespace(v.text));
  return t == "none" ? "" : t;
}

}  // namespace

std::string ProbeHelpText() {
  return HelpText(kProbeUsage, kProbeDescription, ProbeOptionTable(),
                  /*kubernetes_discovery=*/false);
}

std::string DefaultRouteInterface(const std::string& route_text) {
  // "Iface Destination Gateway Flags ..." with hex fields; the default route
  // has destination 00000000 and mask 00000000.
  for (absl::string_view line : absl::StrSplit(route_text, '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.size() < 8 || f[0] == "Iface") continue;
    if (f[1] == "00000000" && f[7] == "00000000") return std::string(f[0]);
  }
  return "";
}

absl::StatusOr<ProbeCommandOptions> ParseProbeOptions(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  const std::vector<OptionSpec>& table = ProbeOptionTable();
  absl::StatusOr<ParsedOptions> parsed = ParseOptions(table, args, env, kProbeUsage);
  if (!parsed.ok()) return parsed.status();
  ProbeCommandOptions out;
  if (parsed->help_requested) {
    out.help = true;
    return out;
  }
  if (parsed->saw_separator) return absl::InvalidArgumentError("probe takes no COMMAND");
  const OptionValue format_value = ValueOrDefault(*parsed, table, "format");
  out.format = absl::AsciiStrToLower(absl::StripAsciiWhitespace(format_value.text));
  if (out.format != "json" && out.format != "nccl-topo" && out.format != "env") {
    return absl::InvalidArgumentError(
        absl::StrCat(format_value.origin, ": expected json, nccl-topo or env, got \"",
                     absl::CEscape(format_value.text.substr(0, 32)), "\""));
  }
  if (absl::Status s =
          ParseDurationOptions(*parsed, table, {{"timeout", absl::Milliseconds(1), &out.timeout}});
      !s.ok()) {
    return s;
  }
  // Unlike the agent's probe (AgentProbeOptions), the command always tries
  // the libraries it is given, NCCL's included.
  topology::ProbeOptions& options = out.probe;
  options.env = env;
  const std::string probe_root(ValueOrDefault(*parsed, table, "probe-root").text);
  if (!probe_root.empty()) {
    options.sysfs_root = probe_root + "/sys";
    options.proc_root = probe_root + "/proc";
    options.dev_root = probe_root + "/dev";
  }
  if (parsed->values.count("sysfs-root") > 0) {
    options.sysfs_root = std::string(ValueOrDefault(*parsed, table, "sysfs-root").text);
  }
  options.nvml.library = Library(ValueOrDefault(*parsed, table, "nvml-library"));
  options.nccl_library = Library(ValueOrDefault(*parsed, table, "nccl-library"));
  return out;
}

int RunProbeCommand(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env, std::ostream& out,
                    std::ostream& err) {
  absl::StatusOr<ProbeCommandOptions> options = ParseProbeOptions(args, env);
  if (!options.ok()) {
    err << UsageErrorText("probe", options.status());
    return ExitCodeForConfigError(options.status());
  }
  if (options->help) {
    out << ProbeHelpText();
    return kExitSuccess;
  }
  return RunProbe(*options, env, out, err);
}

int RunProbe(const ProbeCommandOptions& command, const std::map<std::string, std::string>& env,
             std::ostream& out, std::ostream& err) {
  const topology::ProbeOptions& options = command.probe;
  const absl::Duration timeout = command.timeout;
  const std::string& format = command.format;
  std::string note;
  std::shared_ptr<const v1::NodeProbe> probe = ProbeNodeBounded(options, timeout, &note);
  if (probe == nullptr) {
    err << "trainlet probe: the probe " << note << "\n";
    return kExitUnavailable;
  }
  if (format == "json") {
    google::protobuf::util::JsonPrintOptions json;
    json.add_whitespace = true;
    json.preserve_proto_field_names = true;
    json.always_print_primitive_fields = true;
    std::string text;
    auto s = google::protobuf::util::MessageToJsonString(*probe, &text, json);
    if (!s.ok()) {
      err << "trainlet probe: cannot write JSON: " << s.ToString() << "\n";
      return kExitInternal;
    }
    out << text;
    if (text.empty() || text.back() != '\n') out << "\n";
    return kExitSuccess;
  }
  if (format == "nccl-topo") {
    absl::StatusOr<std::string> xml = topology::NcclTopologyXml(*probe);
    if (!xml.ok()) {
      err << "trainlet probe: " << xml.status().message() << "\n";
      return kExitConfig;
    }
    out << *xml;
    return kExitSuccess;
  }
  topology::EnvContext context;
  std::ifstream route(options.proc_root + "/net/route");
  std::stringstream route_text;
  route_text << route.rdbuf();
  context.socket_interface = DefaultRouteInterface(route_text.str());
  context.user_env = topology::NcclConfFileVars(env);
  for (const auto& [k, v] : env) context.user_env[k] = v;
  out << topology::FormatEnvAdvice(topology::AdviseEnv(*probe, context));
  return kExitSuccess;
}

}  // namespace trainlet::agent

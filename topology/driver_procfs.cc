#include "topology/driver_procfs.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace trainlet::topology {
namespace {

constexpr size_t kMaxInformationBytes = 4096;
constexpr size_t kMaxVersionBytes = 1024;
constexpr size_t kMaxGpus = 256;  // listing bound; NVML supports far fewer.
constexpr size_t kMaxModelBytes = 96;
constexpr int kMaxMinor = 4095;

bool Printable(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= ' ' && c <= '~'; });
}

bool IsHexRun(absl::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return absl::ascii_isxdigit(static_cast<unsigned char>(c));
         });
}

}  // namespace

bool IsGpuUuid(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "GPU-")) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(text, '-');
  static constexpr size_t kWidths[] = {8, 4, 4, 4, 12};
  if (parts.size() != 5) return false;
  for (size_t i = 0; i < 5; ++i) {
    if (!IsHexRun(parts[i], kWidths[i])) return false;
  }
  return true;
}

absl::StatusOr<DriverGpuInfo> ParseGpuInformation(absl::string_view text) {
  std::map<std::string, absl::string_view> fields;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    if (key.empty() || key.size() > 32 || fields.count(key) > 0) continue;  // First one wins.
    fields[key] = absl::StripAsciiWhitespace(line.substr(colon + 1));
  }
  DriverGpuInfo info;
  auto bus = fields.find("Bus Location");
  if (bus == fields.end()) return absl::InvalidArgumentError("no \"Bus Location:\" line");
  std::optional<std::string> bus_id = NormalizeBusId(bus->second);
  if (!bus_id.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bus Location \"", SafeForLog(bus->second, 32), "\" is not a PCI address"));
  }
  info.bus_id = *bus_id;
  auto minor = fields.find("Device Minor");
  if (minor == fields.end()) return absl::InvalidArgumentError("no \"Device Minor:\" line");
  if (!absl::SimpleAtoi(minor->second, &info.minor) || info.minor < 0 || info.minor > kMaxMinor) {
    return absl::InvalidArgumentError(absl::StrCat("Device Minor \"", SafeForLog(minor->second, 16),
                                                   "\" is not a number 0..", kMaxMinor));
  }
  if (auto model = fields.find("Model"); model != fields.end()) {
    if (!model->second.empty() && model->second.size() <= kMaxModelBytes &&
        Printable(model->second)) {
      info.model = std::string(model->second);
    }
  }
  if (auto uuid = fields.find("GPU UUID"); uuid != fields.end() && IsGpuUuid(uuid->second)) {
    info.uuid = std::string(uuid->second);
  }
  if (auto excluded = fields.find("GPU Excluded"); excluded != fields.end()) {
    info.excluded = absl::EqualsIgnoreCase(excluded->second, "Yes");
  }
  return info;
}

std::optional<std::string> ParseDriverVersion(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "NVRM version:")) continue;
    // The first token after "Kernel Module" made of digits and dots with at
    // least one dot ("x86_64" and "for" are skipped).
    const size_t module = line.find("Kernel Module");
    if (module == absl::string_view::npos) return std::nullopt;
    for (absl::string_view token :
         absl::StrSplit(line.substr(module), absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      if (token.size() > 32 || token.find('.') == absl::string_view::npos) continue;
      if (std::all_of(token.begin(), token.end(),
                      [](char c) {
                        return c == '.' || absl::ascii_isdigit(static_cast<unsigned char>(c));
                      }) &&
          absl::ascii_isdigit(static_cast<unsigned char>(token.front())) &&
          absl::ascii_isdigit(static_cast<unsigned char>(token.back()))) {
        return std::string(token);
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

DriverProcfsScan ReadDriverProcfs(const RootFs& proc, const std::string& dev_root,
                                  v1::Source* source) {
  DriverProcfsScan scan;
  source->Clear();
  if (!proc.Exists("/driver/nvidia/gpus")) {
    source->set_status(v1::Source::ABSENT);
    source->set_reason(
        "no /proc/driver/nvidia/gpus (no NVIDIA driver, or none shown to this container)");
    return scan;
  }
  const RootFs dev(dev_root);
  std::vector<std::string> names = proc.List("/driver/nvidia/gpus", kMaxGpus + 1);
  if (names.size() > kMaxGpus) {
    scan.warnings.push_back(absl::StrCat("/proc/driver/nvidia/gpus lists more than ", kMaxGpus,
                                         " entries; only the first ", kMaxGpus, " are read"));
    names.resize(kMaxGpus);
  }
  std::vector<DriverGpuInfo> found;
  for (const std::string& name : names) {
    const std::string where = absl::StrCat("/proc/driver/nvidia/gpus/", SafeForLog(name, 64));
    std::optional<std::string> bus = NormalizeBusId(name);
    if (!bus.has_value() || *bus != name) {
      scan.warnings.push_back(absl::StrCat(where, ": not a PCI bus id, skipped"));
      continue;
    }
    std::optional<std::string> text =
        proc.Read("/driver/nvidia/gpus/" + name + "/information", kMaxInformationBytes);
    if (!text.has_value()) {
      scan.warnings.push_back(absl::StrCat(where, "/information cannot be read; GPU skipped"));
      ++scan.skipped;
      continue;
    }
    absl::StatusOr<DriverGpuInfo> info = ParseGpuInformation(*text);
    if (!info.ok()) {
      scan.warnings.push_back(
          absl::StrCat(where, "/information: ", info.status().message(), "; GPU skipped"));
      ++scan.skipped;
      continue;
    }
    if (info->bus_id != name) {
      scan.warnings.push_back(absl::StrCat(where, "/information names another bus location (",
                                           info->bus_id, "); GPU skipped"));
      ++scan.skipped;
      continue;
    }
    if (info->excluded) {
      scan.warnings.push_back(absl::StrCat("GPU ", name,
                                           " is excluded by the NVIDIA driver (GPU Excluded: "
                                           "Yes, NVreg_ExcludedGpus): not used"));
      ++scan.skipped;
      continue;
    }
    if (!dev.Exists(absl::StrCat("/nvidia", info->minor))) {
      ++scan.skipped;  // Another pod's GPU: this container cannot open it.
      continue;
    }
    found.push_back(*std::move(info));
  }
  std::sort(found.begin(), found.end(),
            [](const DriverGpuInfo& a, const DriverGpuInfo& b) { return a.bus_id < b.bus_id; });
  for (const DriverGpuInfo& info : found) {
    v1::Gpu gpu;
    gpu.set_index(static_cast<int>(scan.gpus.size()));
    gpu.set_uuid(info.uuid);
    gpu.set_name(info.model);
    gpu.set_pci_bus_id(info.bus_id);
    gpu.set_minor_number(info.minor);
    gpu.set_numa_node(-1);
    gpu.set_visible(true);
    gpu.set_visible_ordinal(-1);
    gpu.set_source("procfs");
    scan.gpus.push_back(std::move(gpu));
  }
  source->set_status(v1::Source::OK);
  if (std::optional<std::string> text = proc.Read("/driver/nvidia/version", kMaxVersionBytes)) {
    if (std::optional<std::string> version = ParseDriverVersion(*text)) {
      source->set_version(*version);
    }
  }
  return scan;
}

}  // namespace trainlet::topology

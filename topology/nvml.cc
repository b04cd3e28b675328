// NVML's reading logic, the one copy of it: linked into trainlet (the
// dynamic build calls it in-process, nvml_in_process.cc) and into the NVML
// reader program (nvml_reader_main.cc), which the static build runs. It
// therefore uses no lock, no logger and nothing of absl but its strings.
#include "topology/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "topology/nvml_abi.h"
#include "topology/nvml_internal.h"

namespace trainlet::topology {
namespace {

// Longest text taken from a library (dlerror, nvmlErrorString) into a reason.
constexpr size_t kMaxLibraryText = 200;
// A node has at most a few dozen GPUs; more is a broken library.
constexpr unsigned int kMaxDevices = 256;
// NVML warnings kept per read; the rest are counted.
constexpr int kMaxWarnings = 32;
// Words for nvmlDeviceGetCpuAffinity: 64 x 64 = 4096 CPUs.
constexpr unsigned int kCpuSetWords = 64;
// nvmlDeviceGetComputeRunningProcesses is asked for this many entries (one
// call: 6 KiB at 24 bytes each); more processes than that are counted only.
constexpr unsigned int kMaxProcessesAsked = 256;
// Processes kept per GPU in GpuHealth.processes (the proto says so).
constexpr int kMaxProcessesKept = 64;
// More retired pages than this is a broken answer (a GPU retires at most a
// few dozen before it must be replaced).
constexpr unsigned int kMaxRetiredPages = 1u << 16;

// One NVML entry point: the symbol found and its name (for messages).
template <typename Fn>
struct Entry {
  Fn fn = nullptr;
  const char* name = "";
  explicit operator bool() const { return fn != nullptr; }
};

struct NvmlApi {
  Entry<nvmlReturn_t (*)()> init;
  Entry<nvmlReturn_t (*)()> shutdown;
  Entry<const char* (*)(nvmlReturn_t)> error_string;
  Entry<nvmlReturn_t (*)(char*, unsigned int)> driver_version;
  Entry<nvmlReturn_t (*)(int*)> cuda_driver_version;
  Entry<nvmlReturn_t (*)(unsigned int*)> device_count;
  Entry<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)> handle_by_index;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)> index;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)> pci_info;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)> uuid;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)> name;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)> memory;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, int*, int*)> compute_capability;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)> pcie_generation;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)> pcie_width;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned long*)> cpu_affinity;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)> minor_number;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlEnableState_t*)> nvlink_state;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlNvLinkCapability_t, unsigned int*)>
      nvlink_capability;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*)> nvlink_remote_pci;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*, nvmlEnableState_t*)> ecc_mode;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemoryErrorType_t, nvmlEccCounterType_t,
                         unsigned long long*)>
      total_ecc_errors;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*, unsigned int*)>
      remapped_rows;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, int, nvmlFieldValue_t*)> field_values;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlPageRetirementCause_t, unsigned int*,
                         unsigned long long*)>
      retired_pages;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*)> retired_pages_pending;
  // Writes nvmlProcessInfo_v2_t entries (_v3, _v2) or nvmlProcessInfo_v1_t
  // (unversioned): see ProcessInfoSize().
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, void*)> compute_processes;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*)> clock;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*)> max_clock;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, nvmlGpuFabricInfo_t*)> fabric_info;
  Entry<nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)> clock_reasons;
};

// The size of one entry nvmlDeviceGetComputeRunningProcesses writes, by the
// symbol resolved: 16 bytes (v1) unversioned, 24 (v2 layout) for _v2 and
// _v3. Both layouts have pid at 0 and usedGpuMemory at 8.
size_t ProcessInfoSize(const char* name) {
  return strcmp(name, "nvmlDeviceGetComputeRunningProcesses") == 0 ? sizeof(nvmlProcessInfo_v1_t)
                                                                   : sizeof(nvmlProcessInfo_v2_t);
}

// go-nvml's fallback: the newest versioned symbol the library has, else the
// next older, else the unversioned one. `names` is newest first.
template <typename Fn>
void Resolve(void* handle, std::initializer_list<const char*> names, Entry<Fn>* out) {
  for (const char* name : names) {
    if (void* sym = dlsym(handle, name)) {
      out->fn = reinterpret_cast<Fn>(sym);
      out->name = name;
      return;
    }
  }
  out->name = *names.begin();
}

NvmlApi ResolveAll(void* h) {
  NvmlApi api;
  Resolve(h, {"nvmlInit_v2", "nvmlInit"}, &api.init);
  Resolve(h, {"nvmlShutdown"}, &api.shutdown);
  Resolve(h, {"nvmlErrorString"}, &api.error_string);
  Resolve(h, {"nvmlSystemGetDriverVersion"}, &api.driver_version);
  Resolve(h, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"},
          &api.cuda_driver_version);
  Resolve(h, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &api.device_count);
  Resolve(h, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, &api.handle_by_index);
  Resolve(h, {"nvmlDeviceGetIndex"}, &api.index);
  // The unversioned call writes the legacy 52-byte layout (bus id at offset
  // 0, the v3 busId left as we zeroed it); ParsePciInfo reads either.
  Resolve(h, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"},
          &api.pci_info);
  Resolve(h, {"nvmlDeviceGetUUID"}, &api.uuid);
  Resolve(h, {"nvmlDeviceGetName"}, &api.name);
  Resolve(h, {"nvmlDeviceGetMemoryInfo"}, &api.memory);
  Resolve(h, {"nvmlDeviceGetCudaComputeCapability"}, &api.compute_capability);
  Resolve(h, {"nvmlDeviceGetCurrPcieLinkGeneration"}, &api.pcie_generation);
  Resolve(h, {"nvmlDeviceGetCurrPcieLinkWidth"}, &api.pcie_width);
  Resolve(h, {"nvmlDeviceGetCpuAffinity"}, &api.cpu_affinity);
  Resolve(h, {"nvmlDeviceGetMinorNumber"}, &api.minor_number);
  Resolve(h, {"nvmlDeviceGetNvLinkState"}, &api.nvlink_state);
  Resolve(h, {"nvmlDeviceGetNvLinkCapability"}, &api.nvlink_capability);
  Resolve(h, {"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"},
          &api.nvlink_remote_pci);
  Resolve(h, {"nvmlDeviceGetEccMode"}, &api.ecc_mode);
  Resolve(h, {"nvmlDeviceGetTotalEccErrors"}, &api.total_ecc_errors);
  Resolve(h, {"nvmlDeviceGetRemappedRows"}, &api.remapped_rows);
  Resolve(h, {"nvmlDeviceGetFieldValues"}, &api.field_values);
  // Without timestamps (_v2 adds them): only the counts are kept.
  Resolve(h, {"nvmlDeviceGetRetiredPages"}, &api.retired_pages);
  Resolve(h, {"nvmlDeviceGetRetiredPagesPendingStatus"}, &api.retired_pages_pending);
  // go-nvml's order: the newest the driver has. _v3 and _v2 write the same
  // 24-byte entries; drivers before CUDA 11.1 have only the unversioned
  // call and its 16-byte entries.
  Resolve(h,
          {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
           "nvmlDeviceGetComputeRunningProcesses"},
          &api.compute_processes);
  Resolve(h, {"nvmlDeviceGetClockInfo"}, &api.clock);
  Resolve(h, {"nvmlDeviceGetMaxClockInfo"}, &api.max_clock);
  Resolve(h, {"nvmlDeviceGetGpuFabricInfo"}, &api.fabric_info);
  // Renamed in CUDA 12.2 (the same bits); the older name stays exported,
  // deprecated, and is all an older driver has.
  Resolve(h,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
          &api.clock_reasons);
  return api;
}

// dlerror's text, bounded and escaped; "" when there is none.
std::string DlError() {
  const char* text = dlerror();
  if (text == nullptr) return "";
  return SafeForLog(absl::string_view(text, strnlen(text, 4 * kMaxLibraryText)), kMaxLibraryText);
}

// A string a library wrote into `size` bytes: it must end (NUL) inside the
// buffer and be printable ASCII. Otherwise false with the reason in *why.
bool TakeString(const char* buf, size_t size, std::string* out, std::string* why) {
  const void* nul = memchr(buf, '\0', size);
  if (nul == nullptr) {
    *why = absl::StrCat("not NUL-terminated within its ", size, "-byte buffer");
    return false;
  }
  size_t len = static_cast<const char*>(nul) - buf;
  for (size_t i = 0; i < len; ++i) {
    unsigned char c = static_cast<unsigned char>(buf[i]);
    if (c < 0x20 || c > 0x7e) {
      *why = absl::StrFormat("non-printable byte 0x%02x at offset %d", c, i);
      return false;
    }
  }
  out->assign(buf, len);
  return true;
}

// Guard bytes around what a library writes: if the library writes past the
// size we declared (or before it), its ABI is not the one in nvml_abi.h.
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardFill = 0xA5;

template <typename T>
class Guarded {
 public:
  explicit Guarded(size_t count = 1)
      : size_(sizeof(T) * count), bytes_(new unsigned char[size_ + 2 * kGuardBytes]) {
    memset(bytes_.get(), kGuardFill, size_ + 2 * kGuardBytes);
    memset(bytes_.get() + kGuardBytes, 0, size_);
  }
  T* get() { return reinterpret_cast<T*>(bytes_.get() + kGuardBytes); }
  size_t size() const { return size_; }
  bool Intact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (bytes_[i] != kGuardFill || bytes_[kGuardBytes + size_ + i] != kGuardFill) return false;
    }
    return true;
  }

 private:
  size_t size_;
  // new[] memory is aligned for any fundamental type; kGuardBytes keeps it so.
  std::unique_ptr<unsigned char[]> bytes_;
};

std::string ReturnText(const NvmlApi& api, nvmlReturn_t rc) {
  std::string text = absl::StrCat(NvmlReturnName(rc), " (", rc, ")");
  if (api.error_string) {
    const char* s = api.error_string.fn(rc);
    if (s != nullptr) {
      absl::StrAppend(&text, ": ",
                      SafeForLog(absl::string_view(s, strnlen(s, kMaxLibraryText + 1)), 80));
    }
  }
  return text;
}

// What to check next when nvmlInit fails.
const char* InitHint(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "; is the NVIDIA kernel driver loaded on the node, and was the container started "
             "with NVIDIA_VISIBLE_DEVICES set (not 'void')?";
    case NVML_ERROR_NO_PERMISSION:
      return "; check that this user may open /dev/nvidiactl and /dev/nvidia*";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "; this libnvidia-ml.so.1 does not match the node's kernel driver (a library baked "
             "into the image instead of the one the NVIDIA container toolkit injects?)";
    default:
      return "";
  }
}

// "%x:%x:%x.%x" (the function optional) into its four numbers; false when
// the text is not of that shape or a number has more than 8 hex digits.
bool ParseBusIdFields(const std::string& text, unsigned int fields[4]) {
  int n = 0;
  size_t digits = 0;
  uint64_t value = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    char c = i < text.size() ? text[i] : '\0';
    char sep = n < 2 ? ':' : '.';
    if (isxdigit(static_cast<unsigned char>(c))) {
      if (++digits > 8) return false;
      value =
          value * 16 + (isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
      continue;
    }
    if (digits == 0 || n > 3) return false;
    fields[n++] = static_cast<unsigned int>(value);
    digits = 0;
    value = 0;
    if (c == '\0') break;
    if (c != sep) return false;
  }
  if (n == 3) fields[3] = 0;
  return n == 3 || n == 4;
}

bool IsPciBdf(const unsigned int f[4]) {
  return f[0] <= 0xffff && f[1] <= 0xff && f[2] <= 0x1f && f[3] <= 7;
}

std::string FormatBusId(const unsigned int f[4]) {
  return absl::StrFormat("%04x:%02x:%02x.%x", f[0], f[1], f[2], f[3]);
}

// NCCL's target for an NVLink whose far end is not a PCI device this node
// can see: it assumes an NVSwitch (class 0x068000).
constexpr char kNvSwitchTarget[] = "fffffff:ffff:ff";
constexpr char kNvSwitchClass[] = "0x068000";

// The bus id in an nvmlPciInfo_t, lowercase "%04x:%02x:%02x.%x". NVML's
// busId ("%08X:%02X:%02X.0") first, else the legacy field ("%04X:...",
// the only one the unversioned calls write). For an NVLink's far end that is
// no PCI device this node can see, NVML reports domain 0xFFFFFFF, bus 0xFFFF,
// device 0xFF (the legacy field, cut to 15 characters, then reads
// "FFFFFFF:FFFF:FF", the string NCCL's xml.cc compares with): *bdf is false
// and *out is NCCL's "fffffff:ffff:ff".
bool ParsePciInfo(const nvmlPciInfo_t& pci, std::string* out, bool* bdf, std::string* why) {
  std::string candidates[2];
  std::string problems[2];
  const bool taken[2] = {
      TakeString(pci.busId, sizeof(pci.busId), &candidates[0], &problems[0]),
      TakeString(pci.busIdLegacy, sizeof(pci.busIdLegacy), &candidates[1], &problems[1])};
  if (taken[1] && absl::AsciiStrToLower(candidates[1]) == kNvSwitchTarget) {
    *bdf = false;
    *out = kNvSwitchTarget;
    return true;
  }
  for (int i = 0; i < 2; ++i) {
    unsigned int f[4];
    if (taken[i] && ParseBusIdFields(candidates[i], f)) {
      *bdf = IsPciBdf(f);
      *out = *bdf ? FormatBusId(f) : kNvSwitchTarget;
      return true;
    }
  }
  const char* const names[2] = {"busId", "busIdLegacy"};
  std::vector<std::string> parts;
  for (int i = 0; i < 2; ++i) {
    parts.push_back(taken[i] ? absl::StrCat(names[i], " '", SafeForLog(candidates[i], 40),
                                            "' is not domain:bus:device.function")
                             : absl::StrCat(names[i], " ", problems[i]));
  }
  *why = absl::StrJoin(parts, "; ");
  return false;
}

const char* PcieSpeed(unsigned int generation) {
  // NCCL's strings for the current generation (xml.cc).
  static const char* const kSpeeds[] = {"2.5 GT/s PCIe",  "5.0 GT/s PCIe",  "8.0 GT/s PCIe",
                                        "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"};
  if (generation < 1 || generation > 6) return "";
  return kSpeeds[generation - 1];
}

int MaxNvLinks(int sm) {
  // As NCCL (xml.cc ncclTopoGetXmlFromGpu).
  if (sm < 60) return 0;
  if (sm < 70) return 4;
  if (sm < 80) return 6;
  if (sm < 90) return 12;
  return 18;
}

uint64_t FieldAsU64(const nvmlFieldValue_t& v) {
  switch (v.valueType) {
    case NVML_VALUE_TYPE_DOUBLE:
      return v.value.dVal < 0 ? 0 : static_cast<uint64_t>(v.value.dVal);
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return v.value.uiVal;
    case NVML_VALUE_TYPE_SIGNED_INT:
      return v.value.siVal < 0 ? 0 : static_cast<uint64_t>(v.value.siVal);
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return v.value.sllVal < 0 ? 0 : static_cast<uint64_t>(v.value.sllVal);
    default:  // unsigned long, unsigned long long
      return v.value.ullVal;
  }
}

// One read of NVML: the library's entry points, the warnings and the first
// ABI violation seen. Its caller serialises NVML calls (nvml_internal.h).
class Reader {
 public:
  Reader(const NvmlApi& api, const NvmlOptions& options, v1::NodeProbe* probe)
      : api_(api), options_(options), probe_(probe) {}

  const std::string& abi_error() const { return abi_error_; }

  void Warn(std::string line) {
    if (warnings_ < kMaxWarnings) probe_->add_warnings(std::move(line));
    ++warnings_;
  }
  void FinishWarnings() {
    if (warnings_ > kMaxWarnings) {
      probe_->add_warnings(
          absl::StrCat("nvml: ", warnings_ - kMaxWarnings, " more NVML warnings not shown"));
    }
  }

  // A struct-writing call's guard check: false (and the read is void) when
  // the library wrote outside the bytes we gave it.
  template <typename T>
  bool CheckGuard(const Guarded<T>& g, const char* fn, const char* type) {
    if (g.Intact()) return true;
    if (abi_error_.empty()) {
      abi_error_ = absl::StrCat(
          fn, " wrote outside the ", g.size(), " bytes of its ", type,
          ": this libnvidia-ml's struct layout is not the one trainlet declares (nvml_abi.h), so "
          "no NVML data is used; report the driver version");
    }
    return false;
  }

  void ReadSystem() {
    if (api_.driver_version) {
      Guarded<char> buf(NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE);
      nvmlReturn_t rc = api_.driver_version.fn(buf.get(), NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE);
      if (CheckGuard(buf, api_.driver_version.name, "80-byte version buffer") &&
          rc == NVML_SUCCESS) {
        std::string version, why;
        if (TakeString(buf.get(), buf.size(), &version, &why)) {
          probe_->mutable_nvml()->set_version(version);
        } else {
          Warn(absl::StrCat("nvml: driver version rejected: ", why));
        }
      } else if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED) {
        Warn(absl::StrCat("nvml: ", api_.driver_version.name, ": ", ReturnText(api_, rc)));
      }
    }
    if (api_.cuda_driver_version) {
      int version = 0;
      nvmlReturn_t rc = api_.cuda_driver_version.fn(&version);
      if (rc == NVML_SUCCESS && version > 0) {
        probe_->set_cuda_driver_version(absl::StrCat(version));
      } else if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED) {
        Warn(absl::StrCat("nvml: ", api_.cuda_driver_version.name, ": ", ReturnText(api_, rc)));
      }
    }
  }

  // Reads device `i` into *gpu; false when the device is to be skipped (no
  // handle, GPU lost) or the ABI check failed.
  bool ReadDevice(unsigned int i, v1::Gpu* gpu) {
    who_ = absl::StrCat("nvml: device ", i);
    lost_ = false;
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t rc = api_.handle_by_index.fn(i, &dev);
    if (rc != NVML_SUCCESS || dev == nullptr) {
      Warn(absl::StrCat(who_, " skipped: ", api_.handle_by_index.name, ": ",
                        rc == NVML_SUCCESS ? "no handle" : ReturnText(api_, rc)));
      return false;
    }
    gpu->set_index(static_cast<int32_t>(i));
    gpu->set_minor_number(-1);
    gpu->set_numa_node(-1);
    gpu->set_visible_ordinal(-1);
    gpu->set_source("nvml");

    unsigned int index = 0;
    if (api_.index && Call(api_.index, api_.index.fn(dev, &index))) {
      if (index < kMaxDevices) gpu->set_index(static_cast<int32_t>(index));
    }
    ReadPci(dev, gpu);
    if (Done()) return false;
    if (!gpu->pci_bus_id().empty()) {
      who_ = absl::StrCat("nvml: device ", i, " (", gpu->pci_bus_id(), ")");
    }
    ReadStrings(dev, gpu);
    if (Done()) return false;

    nvmlMemory_t* mem = nullptr;
    Guarded<nvmlMemory_t> memory;
    if (api_.memory) {
      rc = api_.memory.fn(dev, memory.get());
      if (!CheckGuard(memory, api_.memory.name, "24-byte nvmlMemory_t")) return false;
      if (Call(api_.memory, rc)) mem = memory.get();
    }
    if (mem != nullptr) {
      gpu->set_memory_bytes(mem->total);
      if (options_.health) {
        gpu->mutable_health()->set_memory_used_known(true);
        gpu->mutable_health()->set_memory_used_bytes(mem->used);
      }
    }

    int major = 0, minor = 0;
    if (api_.compute_capability &&
        Call(api_.compute_capability, api_.compute_capability.fn(dev, &major, &minor))) {
      if (major > 0 && major < 100 && minor >= 0 && minor < 10) {
        gpu->set_sm(major * 10 + minor);
      } else {
        Warn(absl::StrCat(who_, ": compute capability ", major, ".", minor, " ignored"));
      }
    }
    unsigned int generation = 0, width = 0;
    if (api_.pcie_generation &&
        Call(api_.pcie_generation, api_.pcie_generation.fn(dev, &generation))) {
      gpu->set_link_speed(PcieSpeed(generation));
    }
    if (api_.pcie_width && Call(api_.pcie_width, api_.pcie_width.fn(dev, &width))) {
      if (width >= 1 && width <= 32) gpu->set_link_width(static_cast<int32_t>(width));
    }
    ReadCpuAffinity(dev, gpu);
    if (!ReadFabric(dev, gpu)) return false;
    unsigned int minor_number = 0;
    if (api_.minor_number && Call(api_.minor_number, api_.minor_number.fn(dev, &minor_number))) {
      if (minor_number < (1u << 20)) gpu->set_minor_number(static_cast<int32_t>(minor_number));
    }
    ReadClocks(dev, gpu);
    if (Done()) return false;
    ReadNvLinks(dev, gpu);
    if (Done()) return false;
    if (options_.health) ReadHealth(dev, gpu->mutable_health());
    return !Done();
  }

 private:
  // True when the device is to be dropped (lost, or the ABI check failed).
  bool Done() const { return lost_ || !abi_error_.empty(); }

  // Classifies a call's result. SUCCESS: true. NOT_SUPPORTED (and a missing
  // symbol, as NCCL treats it): false, silently; the field stays unknown.
  // GPU_IS_LOST: false and the device is skipped. Anything else: a warning.
  template <typename Fn>
  bool Call(const Entry<Fn>& entry, nvmlReturn_t rc) {
    if (!entry) return false;
    if (rc == NVML_SUCCESS) return true;
    if (rc == NVML_ERROR_NOT_SUPPORTED) return false;
    if (rc == NVML_ERROR_GPU_IS_LOST) {
      if (!lost_) {
        Warn(absl::StrCat(who_, " skipped: ", entry.name, ": ", ReturnText(api_, rc),
                          "; the GPU has fallen off the bus: drain the node and reset it"));
      }
      lost_ = true;
      return false;
    }
    Warn(absl::StrCat(who_, ": ", entry.name, ": ", ReturnText(api_, rc)));
    return false;
  }

  void ReadPci(nvmlDevice_t dev, v1::Gpu* gpu) {
    if (!api_.pci_info) return;
    Guarded<nvmlPciInfo_t> pci;
    nvmlReturn_t rc = api_.pci_info.fn(dev, pci.get());
    if (!CheckGuard(pci, api_.pci_info.name, "68-byte nvmlPciInfo_t")) return;
    if (!Call(api_.pci_info, rc)) return;
    std::string bus_id, why;
    bool bdf = false;
    if (!ParsePciInfo(*pci.get(), &bus_id, &bdf, &why) || !bdf) {
      Warn(absl::StrCat(who_, ": ", api_.pci_info.name, ": ",
                        why.empty() ? "not a PCI bus id" : why));
    } else {
      gpu->set_pci_bus_id(bus_id);
    }
    const unsigned int id = pci.get()->pciDeviceId;
    if (id != 0) {
      gpu->set_vendor_id(absl::StrFormat("0x%04x", id & 0xffff));
      gpu->set_device_id(absl::StrFormat("0x%04x", id >> 16));
    }
  }

  void ReadStrings(nvmlDevice_t dev, v1::Gpu* gpu) {
    if (api_.uuid) {
      Guarded<char> buf(NVML_DEVICE_UUID_BUFFER_SIZE);
      nvmlReturn_t rc = api_.uuid.fn(dev, buf.get(), NVML_DEVICE_UUID_BUFFER_SIZE);
      if (!CheckGuard(buf, api_.uuid.name, "80-byte UUID buffer")) return;
      std::string uuid, why;
      if (Call(api_.uuid, rc)) {
        if (!TakeString(buf.get(), buf.size(), &uuid, &why)) {
          Warn(absl::StrCat(who_, ": UUID rejected: ", why));
        } else if (uuid.empty() || uuid.find(' ') != std::string::npos) {
          Warn(absl::StrCat(who_, ": UUID rejected: '", uuid, "' is empty or has a space"));
        } else {
          gpu->set_uuid(uuid);
        }
      }
    }
    if (api_.name) {
      Guarded<char> buf(NVML_DEVICE_NAME_BUFFER_SIZE);
      nvmlReturn_t rc = api_.name.fn(dev, buf.get(), NVML_DEVICE_NAME_BUFFER_SIZE);
      if (!CheckGuard(buf, api_.name.name, "64-byte name buffer")) return;
      std::string name, why;
      if (Call(api_.name, rc)) {
        if (TakeString(buf.get(), buf.size(), &name, &why)) {
          gpu->set_name(name);
        } else {
          Warn(absl::StrCat(who_, ": name rejected: ", why));
        }
      }
    }
  }

  // The SM clock now, its maximum, and why it is held down. A clock above
  // kMaxClockMhz is a broken answer and stays unknown.
  void ReadClocks(nvmlDevice_t dev, v1::Gpu* gpu) {
    unsigned int mhz = 0;
    if (api_.clock && Call(api_.clock, api_.clock.fn(dev, NVML_CLOCK_SM, &mhz)) &&
        mhz <= kMaxClockMhz) {
      gpu->set_sm_clock_mhz(mhz);
    }
    if (Done()) return;
    mhz = 0;
    if (api_.max_clock && Call(api_.max_clock, api_.max_clock.fn(dev, NVML_CLOCK_SM, &mhz)) &&
        mhz <= kMaxClockMhz) {
      gpu->set_sm_clock_max_mhz(mhz);
    }
    if (Done()) return;
    unsigned long long reasons = 0;
    if (api_.clock_reasons && Call(api_.clock_reasons, api_.clock_reasons.fn(dev, &reasons))) {
      gpu->set_clock_reasons_known(true);
      gpu->set_clock_reasons(reasons);
    }
  }

  // The NVLink clique (docs/topology.md, "Rank order"): "<cluster uuid>.<clique
  // id>", as the GPU operator's nvidia.com/gpu.clique label spells it, once
  // Fabric Manager registered the GPU; nothing on GPUs without the fabric
  // (NOT_SUPPORTED), still registering, or in error. False: the struct's
  // guard was broken (no NVML data is used).
  bool ReadFabric(nvmlDevice_t dev, v1::Gpu* gpu) {
    if (!api_.fabric_info) return true;
    Guarded<nvmlGpuFabricInfo_t> info;
    const nvmlReturn_t rc = api_.fabric_info.fn(dev, info.get());
    if (!CheckGuard(info, api_.fabric_info.name, "28-byte nvmlGpuFabricInfo_t")) return false;
    if (!Call(api_.fabric_info, rc)) return true;
    const nvmlGpuFabricInfo_t& f = *info.get();
    if (f.state != NVML_GPU_FABRIC_STATE_COMPLETED || f.status != NVML_SUCCESS) return true;
    bool zero = true;
    for (unsigned char b : f.clusterUuid) zero &= b == 0;
    if (zero) return true;
    std::string uuid;
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
      absl::StrAppend(&uuid, absl::Hex(f.clusterUuid[i], absl::kZeroPad2));
    }
    gpu->set_nvlink_clique(absl::StrCat(uuid, ".", f.cliqueId));
    return true;
  }

  void ReadCpuAffinity(nvmlDevice_t dev, v1::Gpu* gpu) {
    if (!api_.cpu_affinity) return;
    Guarded<unsigned long> words(kCpuSetWords);
    nvmlReturn_t rc = api_.cpu_affinity.fn(dev, kCpuSetWords, words.get());
    if (!CheckGuard(words, api_.cpu_affinity.name, "cpu set")) return;
    if (!Call(api_.cpu_affinity, rc)) return;
    uint64_t mask[kCpuSetWords];
    for (unsigned int w = 0; w < kCpuSetWords; ++w) mask[w] = words.get()[w];
    gpu->set_cpu_affinity(CpuMaskToCpumap(mask, kCpuSetWords, options_.cpumap_cpus));
  }

  // One field value; false when the call or the value failed.
  bool ReadField(nvmlDevice_t dev, unsigned int field, unsigned int scope, nvmlFieldValue_t* out) {
    if (!api_.field_values) return false;
    Guarded<nvmlFieldValue_t> fv;
    fv.get()->fieldId = field;
    fv.get()->scopeId = scope;
    nvmlReturn_t rc = api_.field_values.fn(dev, 1, fv.get());
    if (!CheckGuard(fv, api_.field_values.name, "40-byte nvmlFieldValue_t")) return false;
    if (!Call(api_.field_values, rc)) return false;
    if (fv.get()->nvmlReturn != NVML_SUCCESS) {
      if (fv.get()->nvmlReturn == NVML_ERROR_GPU_IS_LOST) {
        Call(api_.field_values, fv.get()->nvmlReturn);
      }
      return false;
    }
    *out = *fv.get();
    return true;
  }

  void ReadNvLinks(nvmlDevice_t dev, v1::Gpu* gpu) {
    const int max_links = MaxNvLinks(gpu->sm());
    if (!api_.nvlink_capability || !api_.nvlink_remote_pci) return;
    for (int l = 0; l < max_links && !Done(); ++l) {
      const unsigned int link = static_cast<unsigned int>(l);
      unsigned int p2p = 0;
      nvmlReturn_t rc = api_.nvlink_capability.fn(dev, link, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p);
      if (!QuietLinkCall(api_.nvlink_capability, rc, link) || p2p == 0) continue;
      // NCCL reads the link state through field 165 from sm 90 on, and
      // nvmlDeviceGetNvLinkState before; we fall back to the latter when
      // the field cannot be read.
      bool active = false;
      bool known = false;
      nvmlFieldValue_t fv;
      if (gpu->sm() >= 90 && ReadField(dev, NVML_FI_DEV_NVLINK_GET_STATE, link, &fv)) {
        active = FieldAsU64(fv) == NVML_FEATURE_ENABLED;
        known = true;
      }
      if (Done()) return;
      if (!known && api_.nvlink_state) {
        nvmlEnableState_t state = NVML_FEATURE_DISABLED;
        if (QuietLinkCall(api_.nvlink_state, api_.nvlink_state.fn(dev, link, &state), link)) {
          active = state == NVML_FEATURE_ENABLED;
        }
      }
      if (!active) continue;
      Guarded<nvmlPciInfo_t> remote;
      rc = api_.nvlink_remote_pci.fn(dev, link, remote.get());
      if (!CheckGuard(remote, api_.nvlink_remote_pci.name, "68-byte nvmlPciInfo_t")) return;
      if (!QuietLinkCall(api_.nvlink_remote_pci, rc, link)) continue;
      std::string target, why;
      bool bdf = false;
      if (!ParsePciInfo(*remote.get(), &target, &bdf, &why)) {
        Warn(absl::StrCat(who_, ": NVLink ", link, ": remote ", why));
        continue;
      }
      v1::NvLink* entry = nullptr;
      for (v1::NvLink& existing : *gpu->mutable_nvlinks()) {
        if (existing.target_bus_id() == target) entry = &existing;
      }
      if (entry == nullptr) {
        entry = gpu->add_nvlinks();
        entry->set_target_bus_id(target);
        // A visible far end's class comes from sysfs (probe.cc), as NCCL does.
        if (!bdf) entry->set_target_class(kNvSwitchClass);
      }
      entry->set_count(entry->count() + 1);
    }
  }

  // Link calls: INVALID_ARGUMENT means "no such link" on GPUs with fewer
  // links than NCCL probes, so it is as quiet as NOT_SUPPORTED.
  template <typename Fn>
  bool QuietLinkCall(const Entry<Fn>& entry, nvmlReturn_t rc, unsigned int link) {
    if (rc == NVML_ERROR_INVALID_ARGUMENT) return false;
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_GPU_IS_LOST) {
      Warn(absl::StrCat(who_, ": NVLink ", link, ": ", entry.name, ": ", ReturnText(api_, rc)));
      return false;
    }
    return Call(entry, rc);
  }

  void ReadHealth(nvmlDevice_t dev, v1::GpuHealth* health) {
    nvmlEnableState_t current = NVML_FEATURE_DISABLED, pending = NVML_FEATURE_DISABLED;
    if (api_.ecc_mode && Call(api_.ecc_mode, api_.ecc_mode.fn(dev, &current, &pending))) {
      bool known = true;
      unsigned long long sbe = 0, dbe = 0;
      if (current == NVML_FEATURE_ENABLED) {
        known = api_.total_ecc_errors &&
                Call(api_.total_ecc_errors,
                     api_.total_ecc_errors.fn(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                              NVML_VOLATILE_ECC, &sbe)) &&
                Call(api_.total_ecc_errors,
                     api_.total_ecc_errors.fn(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                              NVML_VOLATILE_ECC, &dbe));
      }
      if (known) {
        health->set_ecc_known(true);
        health->set_ecc_enabled(current == NVML_FEATURE_ENABLED);
        health->set_ecc_sbe_volatile(sbe);
        health->set_ecc_dbe_volatile(dbe);
      }
    }
    if (Done()) return;
    unsigned int corr = 0, unc = 0, is_pending = 0, failure = 0;
    if (api_.remapped_rows &&
        Call(api_.remapped_rows, api_.remapped_rows.fn(dev, &corr, &unc, &is_pending, &failure))) {
      health->set_remap_known(true);
      health->set_remapped_rows_correctable(corr);
      health->set_remapped_rows_uncorrectable(unc);
      health->set_remap_pending(is_pending != 0);
      health->set_remap_failure(failure != 0);
    }
    if (Done()) return;
    nvmlFieldValue_t fv;
    if (ReadField(dev, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0, &fv)) {
      uint64_t action = FieldAsU64(fv);
      if (action <= 0xffff) {
        health->set_recovery_action_known(true);
        health->set_recovery_action(static_cast<uint32_t>(action));
      }
    }
    if (Done()) return;
    ReadRetiredPages(dev, health);
    if (Done()) return;
    ReadProcesses(dev, health);
  }

  // How many pages are retired for `cause`: nvmlDeviceGetRetiredPages with a
  // count of 0 answers the count alone (SUCCESS when it is 0,
  // INSUFFICIENT_SIZE otherwise, as pynvml reads it). False when unknown.
  bool RetiredPageCount(nvmlDevice_t dev, nvmlPageRetirementCause_t cause, uint32_t* out) {
    Guarded<unsigned long long> addresses(1);  // never written with a count of 0
    unsigned int count = 0;
    nvmlReturn_t rc = api_.retired_pages.fn(dev, cause, &count, addresses.get());
    if (!CheckGuard(addresses, api_.retired_pages.name, "page address")) return false;
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE && !Call(api_.retired_pages, rc)) return false;
    if (count > kMaxRetiredPages) {
      Warn(absl::StrCat(who_, ": ", api_.retired_pages.name, " says ", count,
                        " retired pages; ignored"));
      return false;
    }
    *out = count;
    return true;
  }

  void ReadRetiredPages(nvmlDevice_t dev, v1::GpuHealth* health) {
    uint32_t sbe = 0, dbe = 0;
    if (api_.retired_pages &&
        RetiredPageCount(dev, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, &sbe) &&
        !Done() && RetiredPageCount(dev, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &dbe)) {
      health->set_retired_pages_known(true);
      health->set_retired_pages_sbe(sbe);
      health->set_retired_pages_dbe(dbe);
    }
    if (Done()) return;
    nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
    if (api_.retired_pages_pending &&
        Call(api_.retired_pages_pending, api_.retired_pages_pending.fn(dev, &pending))) {
      health->set_retired_pages_pending_known(true);
      health->set_retired_pages_pending(pending == NVML_FEATURE_ENABLED);
    }
  }

  // One call with room for kMaxProcessesAsked entries: processes come and
  // go between a count query and the read, so the count alone would not do.
  void ReadProcesses(nvmlDevice_t dev, v1::GpuHealth* health) {
    if (!api_.compute_processes) return;
    const size_t entry = ProcessInfoSize(api_.compute_processes.name);
    Guarded<unsigned char> infos(entry * kMaxProcessesAsked);
    unsigned int count = kMaxProcessesAsked;
    nvmlReturn_t rc = api_.compute_processes.fn(dev, &count, infos.get());
    if (!CheckGuard(infos, api_.compute_processes.name,
                    entry == sizeof(nvmlProcessInfo_v1_t) ? "16-byte nvmlProcessInfo_v1_t array"
                                                          : "24-byte nvmlProcessInfo_v2_t array")) {
      return;
    }
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && count > kMaxProcessesAsked) {
      // More than we asked for: their number is known, not who they are.
      health->set_processes_known(true);
      health->set_process_count(count);
      return;
    }
    if (!Call(api_.compute_processes, rc)) return;
    if (count > kMaxProcessesAsked) {
      Warn(absl::StrCat(who_, ": ", api_.compute_processes.name, " says ", count,
                        " processes in room for ", kMaxProcessesAsked, "; ignored"));
      return;
    }
    health->set_processes_known(true);
    health->set_process_count(count);
    for (unsigned int i = 0; i < count && i < static_cast<unsigned int>(kMaxProcessesKept); ++i) {
      // Both layouts: pid at 0, usedGpuMemory at 8 (nvml_abi.h).
      nvmlProcessInfo_v1_t info;
      memcpy(&info, infos.get() + i * entry, sizeof(info));
      v1::GpuProcess* process = health->add_processes();
      process->set_pid(info.pid);
      process->set_used_memory_bytes(info.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ||
                                             info.usedGpuMemory > INT64_MAX
                                         ? -1
                                         : static_cast<int64_t>(info.usedGpuMemory));
    }
  }

  const NvmlApi& api_;
  const NvmlOptions& options_;
  v1::NodeProbe* const probe_;
  std::string abi_error_;
  std::string who_;
  bool lost_ = false;
  int warnings_ = 0;
};

void SetSource(v1::Source* source, v1::Source::Status status, std::string reason) {
  source->set_status(status);
  source->set_reason(std::move(reason));
}

}  // namespace

std::string NvmlReturnName(int code) {
  switch (code) {
    case NVML_SUCCESS:
      return "SUCCESS";
    case NVML_ERROR_UNINITIALIZED:
      return "UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED:
      return "NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION:
      return "NO_PERMISSION";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "ALREADY_INITIALIZED";
    case NVML_ERROR_NOT_FOUND:
      return "NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "INSUFFICIENT_SIZE";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "INSUFFICIENT_POWER";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "DRIVER_NOT_LOADED";
    case NVML_ERROR_TIMEOUT:
      return "TIMEOUT";
    case NVML_ERROR_IRQ_ISSUE:
      return "IRQ_ISSUE";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "LIBRARY_NOT_FOUND";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "FUNCTION_NOT_FOUND";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "CORRUPTED_INFOROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU_IS_LOST";
    case NVML_ERROR_RESET_REQUIRED:
      return "RESET_REQUIRED";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "OPERATING_SYSTEM";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "LIB_RM_VERSION_MISMATCH";
    case NVML_ERROR_IN_USE:
      return "IN_USE";
    case NVML_ERROR_MEMORY:
      return "MEMORY";
    case NVML_ERROR_NO_DATA:
      return "NO_DATA";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "VGPU_ECC_NOT_SUPPORTED";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "INSUFFICIENT_RESOURCES";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "FREQ_NOT_SUPPORTED";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "ARGUMENT_VERSION_MISMATCH";
    case NVML_ERROR_DEPRECATED:
      return "DEPRECATED";
    case NVML_ERROR_NOT_READY:
      return "NOT_READY";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "GPU_NOT_FOUND";
    case NVML_ERROR_INVALID_STATE:
      return "INVALID_STATE";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "RESET_TYPE_NOT_SUPPORTED";
    case NVML_ERROR_UNKNOWN:
      return "UNKNOWN";
    default:
      return absl::StrCat("UNKNOWN_ERROR_", code);
  }
}

std::string CpuMaskToCpumap(const uint64_t* words, size_t count, int cpus) {
  int highest = -1;
  for (size_t w = 0; w < count; ++w) {
    for (int b = 63; b >= 0; --b) {
      if (words[w] >> b & 1) highest = std::max(highest, static_cast<int>(w * 64 + b));
    }
  }
  if (highest < 0) return "";
  int bits = cpus > 0 ? cpus : (highest / 32 + 1) * 32;
  if (bits > static_cast<int>(count * 64)) bits = static_cast<int>(count * 64);
  // Bits at or above `bits` are dropped, as the kernel's cpumap cannot show them.
  const int groups = (bits + 31) / 32;
  std::vector<std::string> parts;
  for (int g = groups - 1; g >= 0; --g) {
    uint32_t value = static_cast<uint32_t>(words[g / 2] >> (32 * (g % 2)));
    int width = 8;
    if (g == groups - 1) {
      const int top_bits = bits - 32 * g;  // 1..32
      if (top_bits < 32) value &= (1u << top_bits) - 1;
      width = (top_bits + 3) / 4;
    }
    parts.push_back(absl::StrFormat("%0*x", width, value));
  }
  return absl::StrJoin(parts, ",");
}

std::string NcclVersionString(int code) {
  if (code <= 0) return "";
  int major, minor, patch;
  if (code >= 20900) {
    major = code / 10000;
    minor = code % 10000 / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = code % 1000 / 100;
    patch = code % 100;
  }
  return absl::StrCat(major, ".", minor, ".", patch);
}

void ReadNvmlUnlocked(const NvmlOptions& options, v1::NodeProbe* probe,
                      std::vector<v1::Gpu>* gpus) {
  gpus->clear();
  v1::Source* source = probe->mutable_nvml();
  if (options.library.empty()) {
    SetSource(source, v1::Source::SKIPPED, "NVML not read: no library configured");
    return;
  }
  const std::string lib = SafeForLog(options.library, 200);
  dlerror();
  // Never dlclosed (as NCCL does): NVML keeps threads and state that outlive
  // a dlclose badly. A second dlopen of a loaded library only counts a
  // reference.
  void* handle = dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    SetSource(source, v1::Source::ABSENT, absl::StrCat("dlopen ", lib, ": ", DlError()));
    return;
  }
  const NvmlApi api = ResolveAll(handle);
  for (const char* missing :
       {!api.init ? api.init.name : nullptr, !api.device_count ? api.device_count.name : nullptr,
        !api.handle_by_index ? api.handle_by_index.name : nullptr}) {
    if (missing != nullptr) {
      SetSource(source, v1::Source::ERROR,
                absl::StrCat(lib, " has no ", missing,
                             " (nor its older versions): not an NVML "
                             "library, or too old"));
      return;
    }
  }
  nvmlReturn_t rc = api.init.fn();
  if (rc != NVML_SUCCESS) {
    SetSource(source, v1::Source::ERROR,
              absl::StrCat(api.init.name, " failed: ", ReturnText(api, rc), InitHint(rc)));
    return;
  }
  Reader reader(api, options, probe);
  reader.ReadSystem();
  unsigned int count = 0;
  rc = api.device_count.fn(&count);
  std::string error;
  if (rc != NVML_SUCCESS) {
    error = absl::StrCat(api.device_count.name, " failed: ", ReturnText(api, rc));
  } else {
    if (count > kMaxDevices) {
      reader.Warn(absl::StrCat("nvml: ", api.device_count.name, " says ", count,
                               " devices; reading the first ", kMaxDevices));
      count = kMaxDevices;
    }
    for (unsigned int i = 0; i < count && reader.abi_error().empty(); ++i) {
      v1::Gpu gpu;
      if (reader.ReadDevice(i, &gpu)) gpus->push_back(std::move(gpu));
    }
    if (!reader.abi_error().empty()) {
      error = reader.abi_error();
      gpus->clear();
    }
  }
  reader.FinishWarnings();
  if (api.shutdown) {
    rc = api.shutdown.fn();
    if (rc != NVML_SUCCESS) {
      probe->add_warnings(absl::StrCat("nvml: nvmlShutdown: ", ReturnText(api, rc)));
    }
  }
  if (!error.empty()) {
    SetSource(source, v1::Source::ERROR, error);
    return;
  }
  SetSource(source, v1::Source::OK,
            absl::StrCat(gpus->size(), " of ", count, " devices read from ", lib));
}

void ReadNcclVersionUnlocked(const std::string& library, v1::Source* out) {
  out->Clear();
  if (library.empty()) {
    SetSource(out, v1::Source::SKIPPED, "NCCL not read: no library configured");
    return;
  }
  const std::string lib = SafeForLog(library, 200);
  dlerror();
  // Never dlclosed, as NVML: NCCL starts threads (the bootstrap root) that
  // must not lose their code.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    SetSource(out, v1::Source::ABSENT, absl::StrCat("dlopen ", lib, ": ", DlError()));
    return;
  }
  using GetVersionFn = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersionFn>(dlsym(handle, "ncclGetVersion"));
  if (get_version == nullptr) {
    SetSource(out, v1::Source::ERROR, absl::StrCat(lib, " has no ncclGetVersion: not NCCL?"));
    return;
  }
  int code = 0;
  int rc = get_version(&code);
  if (rc != 0 || code <= 0) {
    SetSource(out, v1::Source::ERROR,
              absl::StrCat("ncclGetVersion failed: ncclResult_t ", rc, ", version code ", code));
    return;
  }
  SetSource(out, v1::Source::OK, absl::StrCat("ncclGetVersion from ", lib));
  out->set_version(NcclVersionString(code));
}

}  // namespace trainlet::topology

// A fake libnvidia-ml.so.1 for tests (never installed): it exports NVML's
// real C symbols and answers them from a JSON description named by the
// environment variable FAKE_NVML_FIXTURE, read at each first nvmlInit. It
// needs no protobuf (fixtures are read by tiny_json.h) and, where the NVML
// reader is built, links libstdc++ in and pins its glibc symbol versions
// (topology/portable_glibc.cmake), so that the same file loads in the
// Debian 11, 12 and 13 roots (e2e/e2e_nvml_roots.py). Every
// struct is written at its FULL size (68-byte nvmlPciInfo_t, 24-byte
// nvmlMemory_t, 40-byte nvmlFieldValue_t, all cpuSetSize words), so a caller
// that declares a struct too small overruns it, which the caller's guard bytes
// catch (NVIDIA/nccl #2325).
//
// Flavours, chosen at compile time (topology/nvml.cmake builds each as its own
// libnvidia-ml.so.1 in its own folder):
//   (default)                    the symbols of a current driver.
//   FAKE_NVML_LEGACY             an old driver: no _v2/_v3 symbols (only
//                                nvmlInit, nvmlDeviceGetCount, ...GetPciInfo,
//                                which write the legacy 52-byte layout,
//                                ...GetComputeRunningProcesses, which writes
//                                16-byte nvmlProcessInfo_v1_t entries), no
//                                nvmlDeviceGetRemappedRows, no
//                                nvmlDeviceGetFieldValues, no
//                                nvmlDeviceGetCurrentClocksEventReasons
//                                (only its older name). A real .so cannot
//                                pretend that dlsym fails, so "missing
//                                symbols" is this flavour.
//   FAKE_NVML_OVERFLOW_PCI_INFO  nvmlDeviceGetPciInfo_v3 writes 72 bytes, as
//                                a driver with a grown struct would.
//
// Fixture (JSON; numbers are JSON numbers, hex ids are strings):
//   {
//     "driverVersion": "550.54.15",     // absent: NOT_SUPPORTED
//     "cudaDriverVersion": 12040,       // absent: NOT_SUPPORTED
//     "devices": [{
//       "uuid": "GPU-...", "uuidUnterminated": false,  // true: fills the whole
//                                                      // buffer, no NUL
//       "name": "NVIDIA H100 80GB HBM3",
//       "busId": "0000:18:00.0",         // written as NVML does: busId
//                                        // "%08X:%02X:%02X.0", busIdLegacy
//                                        // "%04X:%02X:%02X.0" cut to 15 chars
//       "rawBusId": "...", "rawBusIdLegacy": "...",  // optional: verbatim
//                                        // instead (no NUL when too long)
//       "pciDeviceId": "0x233010de", "pciSubSystemId": "0x16c110de",
//       "cc": [9, 0], "minor": 0, "pcie": {"gen": 5, "width": 16},
//       "memory": {"total": 0, "free": 0, "used": 0},
//       "cpuList": "0-47",                // nvmlDeviceGetCpuAffinity's mask
//       "nvlinks": [{"link": 0 | "links": [0, 1], "p2p": true, "active": true,
//                    "remoteBusId": "fffffff:ffff:ff"}],  // also raw*, as above
//       "ecc": {"current": true, "pending": true, "sbeVolatile": 0, "dbeVolatile": 0},
//       "remappedRows": {"correctable": 0, "uncorrectable": 0, "pending": false,
//                        "failure": false},
//       "retiredPages": {"sbe": 0, "dbe": 0, "pending": false},  // page retirement
//       "processes": [{"pid": 4242, "usedGpuMemory": 0}],  // compute processes;
//                                        // usedGpuMemory absent: NOT_AVAILABLE
//       "fields": {"230": 0},             // nvmlDeviceGetFieldValues, UNSIGNED_INT
//       "smClock": 1980, "smClockMax": 1980,  // NVML_CLOCK_SM, MHz (GetClockInfo,
//                                        // GetMaxClockInfo)
//       "fabric": {"clusterUuid": "<32 hex digits>", "cliqueId": 7,  // GetGpuFabricInfo
//                  "state": 3, "status": 0},  // state absent: 3 (COMPLETED)
//       "clockReasons": 8                 // GetCurrentClocksEventReasons (and
//                                        // ...ThrottleReasons), a number
//     }],
//     "errors": [{"fn": "nvmlDeviceGetRemappedRows", "device": 0, "link": 3, "rc": 3}],
//     "hangInit": false,                 // true: nvmlInit never returns (a hung driver)
//     "crashInit": false                 // true: nvmlInit aborts its process
//   }
// A section left out answers NOT_SUPPORTED. Field 165 (NVLink state,
// scopeId = link) is answered from "nvlinks". An NVLink to an NVSwitch the
// node cannot see is "remoteBusId": "fffffff:ffff:ff": domain 0xFFFFFFF, bus
// 0xFFFF, device 0xFF, whose legacy string is "FFFFFFF:FFFF:FF" (the text
// NCCL's xml.cc compares with, lowercased). errors[]: "fn" is a symbol name,
// matched without its _vN suffix, or "field:<id>" for one field's per-value
// status; "device" and "link" narrow it (absent: every device / link).
//
// Threading: one mutex around the state, as a real NVML would be used.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "topology/nvml_abi.h"
#include "topology/testing/tiny_json.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using trainlet::topology::testing::Json;
using trainlet::topology::testing::ParseJson;

// Text written verbatim into nvmlPciInfo_t's strings instead of NVML's
// formatting ("rawBusId", "rawBusIdLegacy"), for tests of the reader's
// checks; as long as the field or longer: no NUL.
struct RawPci {
  bool has_bus_id = false, has_legacy = false;
  std::string bus_id, legacy;
};

struct Link {
  bool p2p = true;
  bool active = true;
  std::string remote;
  RawPci raw;
};

struct Device {
  std::string uuid;
  bool uuid_unterminated = false;
  std::string name;
  std::string bus_id;
  RawPci raw;
  unsigned int pci_device_id = 0;
  unsigned int pci_subsystem_id = 0;
  bool has_cc = false;
  int cc_major = 0, cc_minor = 0;
  bool has_minor = false;
  unsigned int minor = 0;
  bool has_pcie = false;
  unsigned int pcie_gen = 0, pcie_width = 0;
  bool has_memory = false;
  nvmlMemory_t memory{};
  bool has_cpus = false;
  std::vector<unsigned long> cpus;  // 64 per word
  std::map<unsigned int, Link> links;
  bool has_ecc = false;
  bool ecc_current = false, ecc_pending = false;
  unsigned long long sbe = 0, dbe = 0;
  bool has_fabric = false;
  nvmlGpuFabricInfo_t fabric{};
  bool has_remap = false;
  unsigned int remap_corr = 0, remap_unc = 0;
  bool remap_pending = false, remap_failure = false;
  bool has_retired = false;
  unsigned int retired_sbe = 0, retired_dbe = 0;
  bool retired_pending = false;
  bool has_processes = false;
  std::vector<nvmlProcessInfo_v2_t> processes;
  std::map<unsigned int, unsigned long long> fields;
  bool has_sm_clock = false, has_sm_clock_max = false, has_clock_reasons = false;
  unsigned int sm_clock = 0, sm_clock_max = 0;
  unsigned long long clock_reasons = 0;
};

struct Injected {
  std::string fn;
  int device = -1;
  int link = -1;
  nvmlReturn_t rc = NVML_SUCCESS;
};

struct State {
  int refs = 0;
  bool hang_init = false;
  bool crash_init = false;
  bool has_driver = false;
  std::string driver;
  bool has_cuda = false;
  int cuda = 0;
  std::vector<Device> devices;
  std::vector<Injected> errors;
};

std::mutex g_mu;
State* g_state = new State();  // leaked: the shim is never unloaded

double Num(const Json& j, const char* key, double def = 0) {
  const Json* v = j.Get(key);
  return v != nullptr && v->kind == Json::kNumber ? v->number : def;
}
std::string Str(const Json& j, const char* key) {
  const Json* v = j.Get(key);
  return v != nullptr && v->kind == Json::kString ? v->string : "";
}
bool Bool(const Json& j, const char* key, bool def) {
  const Json* v = j.Get(key);
  return v != nullptr && v->kind == Json::kBool ? v->boolean : def;
}
unsigned int Hex(const Json& j, const char* key) {
  return static_cast<unsigned int>(strtoul(Str(j, key).c_str(), nullptr, 16));
}
// The member `key` when it is an object (or an array), else nullptr.
const Json* Object(const Json& j, const char* key) {
  const Json* v = j.Get(key);
  return v != nullptr && v->kind == Json::kObject ? v : nullptr;
}
const Json* Array(const Json& j, const char* key) {
  const Json* v = j.Get(key);
  return v != nullptr && v->kind == Json::kArray ? v : nullptr;
}

// "%x:%x:%x[.%x]" into domain, bus, device.
bool ParseBusId(const std::string& text, unsigned int* d, unsigned int* b, unsigned int* dev) {
  unsigned int fn = 0;
  return sscanf(text.c_str(), "%x:%x:%x.%x", d, b, dev, &fn) >= 3;
}

// "0-3,8" into a mask of 64-bit words.
bool ParseCpuList(const std::string& text, std::vector<unsigned long>* words) {
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    unsigned int lo = 0, hi = 0;
    int n = sscanf(part.c_str(), "%u-%u", &lo, &hi);
    if (n == 1) hi = lo;
    if (n < 1 || hi < lo || hi >= 64 * 64) return false;
    for (unsigned int c = lo; c <= hi; ++c) {
      if (words->size() <= c / 64) words->resize(c / 64 + 1, 0);
      (*words)[c / 64] |= 1ul << (c % 64);
    }
  }
  return true;
}

void LoadRaw(const Json& j, RawPci* raw) {
  raw->has_bus_id = j.Get("rawBusId") != nullptr;
  raw->bus_id = Str(j, "rawBusId");
  raw->has_legacy = j.Get("rawBusIdLegacy") != nullptr;
  raw->legacy = Str(j, "rawBusIdLegacy");
}

bool LoadDevice(const Json& j, Device* d, std::string* why) {
  d->uuid = Str(j, "uuid");
  d->uuid_unterminated = Bool(j, "uuidUnterminated", false);
  d->name = Str(j, "name");
  d->bus_id = Str(j, "busId");
  unsigned int x;
  if (!ParseBusId(d->bus_id, &x, &x, &x)) {
    *why = "busId '" + d->bus_id + "' is not domain:bus:device.function";
    return false;
  }
  LoadRaw(j, &d->raw);
  d->pci_device_id = Hex(j, "pciDeviceId");
  d->pci_subsystem_id = Hex(j, "pciSubSystemId");
  if (const Json* cc = Array(j, "cc")) {
    if (cc->array.size() != 2) {
      *why = "cc must be [major, minor]";
      return false;
    }
    d->has_cc = true;
    d->cc_major = static_cast<int>(cc->array[0].number);
    d->cc_minor = static_cast<int>(cc->array[1].number);
  }
  if (j.Get("minor") != nullptr) {
    d->has_minor = true;
    d->minor = static_cast<unsigned int>(Num(j, "minor"));
  }
  if (const Json* p = Object(j, "pcie")) {
    d->has_pcie = true;
    d->pcie_gen = static_cast<unsigned int>(Num(*p, "gen"));
    d->pcie_width = static_cast<unsigned int>(Num(*p, "width"));
  }
  if (const Json* m = Object(j, "memory")) {
    d->has_memory = true;
    d->memory.total = static_cast<unsigned long long>(Num(*m, "total"));
    d->memory.free = static_cast<unsigned long long>(Num(*m, "free"));
    d->memory.used = static_cast<unsigned long long>(Num(*m, "used"));
  }
  if (j.Get("cpuList") != nullptr) {
    d->has_cpus = true;
    if (!ParseCpuList(Str(j, "cpuList"), &d->cpus)) {
      *why = "cpuList '" + Str(j, "cpuList") + "' is not a cpulist";
      return false;
    }
  }
  if (const Json* links = Array(j, "nvlinks")) {
    for (const Json& l : links->array) {
      Link link;
      link.p2p = Bool(l, "p2p", true);
      link.active = Bool(l, "active", true);
      link.remote = Str(l, "remoteBusId");
      LoadRaw(l, &link.raw);
      if (!ParseBusId(link.remote, &x, &x, &x)) {
        *why = "remoteBusId '" + link.remote + "' is not domain:bus:device";
        return false;
      }
      std::vector<unsigned int> ids;
      if (l.Get("link") != nullptr) ids.push_back(static_cast<unsigned int>(Num(l, "link")));
      if (const Json* many = Array(l, "links")) {
        for (const Json& id : many->array) ids.push_back(static_cast<unsigned int>(id.number));
      }
      for (unsigned int id : ids) d->links[id] = link;
    }
  }
  if (const Json* e = Object(j, "ecc")) {
    d->has_ecc = true;
    d->ecc_current = Bool(*e, "current", false);
    d->ecc_pending = Bool(*e, "pending", d->ecc_current);
    d->sbe = static_cast<unsigned long long>(Num(*e, "sbeVolatile"));
    d->dbe = static_cast<unsigned long long>(Num(*e, "dbeVolatile"));
  }
  if (const Json* f = Object(j, "fabric")) {
    d->has_fabric = true;
    const std::string hex = Str(*f, "clusterUuid");
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN && 2 * i + 1 < static_cast<int>(hex.size()); ++i) {
      d->fabric.clusterUuid[i] =
          static_cast<unsigned char>(strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
    }
    d->fabric.cliqueId = static_cast<unsigned int>(Num(*f, "cliqueId"));
    d->fabric.state = f->Get("state") != nullptr
                          ? static_cast<nvmlGpuFabricState_t>(Num(*f, "state"))
                          : NVML_GPU_FABRIC_STATE_COMPLETED;
    d->fabric.status = static_cast<nvmlReturn_t>(Num(*f, "status"));
  }
  if (const Json* r = Object(j, "remappedRows")) {
    d->has_remap = true;
    d->remap_corr = static_cast<unsigned int>(Num(*r, "correctable"));
    d->remap_unc = static_cast<unsigned int>(Num(*r, "uncorrectable"));
    d->remap_pending = Bool(*r, "pending", false);
    d->remap_failure = Bool(*r, "failure", false);
  }
  if (const Json* r = Object(j, "retiredPages")) {
    d->has_retired = true;
    d->retired_sbe = static_cast<unsigned int>(Num(*r, "sbe"));
    d->retired_dbe = static_cast<unsigned int>(Num(*r, "dbe"));
    d->retired_pending = Bool(*r, "pending", false);
  }
  if (const Json* procs = Array(j, "processes")) {
    d->has_processes = true;
    for (const Json& p : procs->array) {
      nvmlProcessInfo_v2_t info{};
      info.pid = static_cast<unsigned int>(Num(p, "pid"));
      info.usedGpuMemory = p.Get("usedGpuMemory") != nullptr
                               ? static_cast<unsigned long long>(Num(p, "usedGpuMemory"))
                               : NVML_VALUE_NOT_AVAILABLE;
      info.gpuInstanceId = 0xFFFFFFFFu;
      info.computeInstanceId = 0xFFFFFFFFu;
      d->processes.push_back(info);
    }
  }
  d->has_sm_clock = j.Get("smClock") != nullptr;
  d->sm_clock = static_cast<unsigned int>(Num(j, "smClock"));
  d->has_sm_clock_max = j.Get("smClockMax") != nullptr;
  d->sm_clock_max = static_cast<unsigned int>(Num(j, "smClockMax"));
  d->has_clock_reasons = j.Get("clockReasons") != nullptr;
  d->clock_reasons = static_cast<unsigned long long>(Num(j, "clockReasons"));
  if (const Json* f = Object(j, "fields")) {
    for (const auto& [id, value] : f->object) {
      d->fields[static_cast<unsigned int>(atoi(id.c_str()))] =
          static_cast<unsigned long long>(value.number);
    }
  }
  return true;
}

// The whole file at `path`; false when it cannot be read.
bool ReadFile(const char* path, std::string* out) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out->append(buf, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

// Reads FAKE_NVML_FIXTURE into *s; false (with the reason on stderr) on any
// problem, which nvmlInit answers with NVML_ERROR_UNKNOWN.
bool Load(State* s) {
  const char* path = getenv("FAKE_NVML_FIXTURE");
  std::string why;
  std::string text;
  Json j;
  if (path == nullptr) {
    why = "FAKE_NVML_FIXTURE is not set";
  } else if (!ReadFile(path, &text)) {
    why = std::string("cannot read ") + path;
  } else if (!ParseJson(text, &j, &why)) {
    why = std::string(path) + ": " + why;
  } else {
    *s = State();
    s->hang_init = Bool(j, "hangInit", false);
    s->crash_init = Bool(j, "crashInit", false);
    s->has_driver = j.Get("driverVersion") != nullptr;
    s->driver = Str(j, "driverVersion");
    s->has_cuda = j.Get("cudaDriverVersion") != nullptr;
    s->cuda = static_cast<int>(Num(j, "cudaDriverVersion"));
    if (const Json* devs = Array(j, "devices")) {
      for (const Json& v : devs->array) {
        s->devices.emplace_back();
        if (!LoadDevice(v, &s->devices.back(), &why)) break;
      }
    }
    if (const Json* errs = Array(j, "errors")) {
      for (const Json& v : errs->array) {
        Injected e;
        e.fn = Str(v, "fn");
        e.device = static_cast<int>(Num(v, "device", -1));
        e.link = static_cast<int>(Num(v, "link", -1));
        e.rc = static_cast<nvmlReturn_t>(Num(v, "rc"));
        s->errors.push_back(e);
      }
    }
  }
  if (!why.empty()) {
    fprintf(stderr, "fake libnvidia-ml: %s\n", why.c_str());
    return false;
  }
  return true;
}

// "nvmlDeviceGetPciInfo_v3" -> "nvmlDeviceGetPciInfo".
std::string BaseName(const std::string& fn) {
  size_t v = fn.rfind("_v");
  if (v != std::string::npos && v + 2 < fn.size() &&
      fn.find_first_not_of("0123456789", v + 2) == std::string::npos) {
    return fn.substr(0, v);
  }
  return fn;
}

// The injected code for `fn` on device `dev` (and `link`), else SUCCESS.
nvmlReturn_t Injection(const State& s, const std::string& fn, int dev, int link = -1) {
  for (const Injected& e : s.errors) {
    if (BaseName(e.fn) != BaseName(fn)) continue;
    if (e.device >= 0 && e.device != dev) continue;
    if (e.link >= 0 && e.link != link) continue;
    return e.rc;
  }
  return NVML_SUCCESS;
}

// The device behind a handle, or null. Handles point into g_state->devices.
Device* Dev(nvmlDevice_t handle, int* index) {
  for (size_t i = 0; i < g_state->devices.size(); ++i) {
    if (reinterpret_cast<nvmlDevice_t>(&g_state->devices[i]) == handle) {
      *index = static_cast<int>(i);
      return &g_state->devices[i];
    }
  }
  return nullptr;
}

// Common entry checks for a device call: initialised, a known handle, no
// injected error.
#define DEVICE_CALL(fn_name)                               \
  std::lock_guard<std::mutex> lock(g_mu);                  \
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED; \
  int index = -1;                                          \
  Device* d = Dev(device, &index);                         \
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;    \
  if (nvmlReturn_t rc = Injection(*g_state, fn_name, index); rc != 0) return rc;

void WriteRaw(const std::string& text, char* field, size_t size) {
  memset(field, 0, size);
  memcpy(field, text.data(), std::min(text.size(), size));
}

void FillPci(const std::string& bus_id, const RawPci& raw, unsigned int device_id,
             unsigned int subsystem_id, nvmlPciInfo_t* p) {
  memset(p, 0, sizeof(*p));
  unsigned int dom = 0, bus = 0, dev = 0;
  ParseBusId(bus_id, &dom, &bus, &dev);
  char text[64];
  // NVML's legacy string is cut to its 16-byte field: domain 0xFFFFFFF then
  // reads "FFFFFFF:FFFF:FF".
  snprintf(text, sizeof(text), "%04X:%02X:%02X.0", dom, bus, dev);
  memcpy(p->busIdLegacy, text, std::min(strlen(text), sizeof(p->busIdLegacy) - 1));
  snprintf(text, sizeof(text), "%08X:%02X:%02X.0", dom, bus, dev);
  memcpy(p->busId, text, std::min(strlen(text), sizeof(p->busId) - 1));
  p->domain = dom;
  p->bus = bus;
  p->device = dev;
  p->pciDeviceId = device_id;
  p->pciSubSystemId = subsystem_id;
  if (raw.has_bus_id) WriteRaw(raw.bus_id, p->busId, sizeof(p->busId));
  if (raw.has_legacy) WriteRaw(raw.legacy, p->busIdLegacy, sizeof(p->busIdLegacy));
}

// The legacy (unversioned) calls' layout: the same first 36 bytes, then four
// reserved words; 52 bytes in all.
constexpr size_t kLegacyPciInfoSize = 52;

void WritePci(const nvmlPciInfo_t& p, nvmlPciInfo_t* out, bool legacy) {
  if (legacy) {
    unsigned char bytes[kLegacyPciInfoSize] = {};
    memcpy(bytes, &p, 36);
    memcpy(out, bytes, sizeof(bytes));
    return;
  }
  memcpy(out, &p, sizeof(p));
}

nvmlReturn_t CopyString(const std::string& value, char* buf, unsigned int length) {
  if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Init(const char* fn) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) {
    State fresh;
    if (!Load(&fresh)) return NVML_ERROR_UNKNOWN;
    // A driver that never answers (a GPU fallen off the bus): block forever,
    // holding the lock as a real driver holds its own.
    while (fresh.hang_init) pause();
    // A driver that crashes its caller (the NVML reader's crash handling).
    if (fresh.crash_init) abort();
    if (nvmlReturn_t rc = Injection(fresh, fn, -1); rc != NVML_SUCCESS) return rc;
    *g_state = fresh;
  }
  ++g_state->refs;
  return NVML_SUCCESS;
}

nvmlReturn_t Count(const char* fn, unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t rc = Injection(*g_state, fn, -1); rc != NVML_SUCCESS) return rc;
  *count = static_cast<unsigned int>(g_state->devices.size());
  return NVML_SUCCESS;
}

nvmlReturn_t HandleByIndex(const char* fn, unsigned int index, nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= g_state->devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t rc = Injection(*g_state, fn, static_cast<int>(index)); rc != NVML_SUCCESS) {
    return rc;
  }
  *device = reinterpret_cast<nvmlDevice_t>(&g_state->devices[index]);
  return NVML_SUCCESS;
}

nvmlReturn_t PciInfo(const char* fn, nvmlDevice_t device, nvmlPciInfo_t* pci, bool legacy) {
  DEVICE_CALL(fn);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlPciInfo_t p;
  FillPci(d->bus_id, d->raw, d->pci_device_id, d->pci_subsystem_id, &p);
  WritePci(p, pci, legacy);
#ifdef FAKE_NVML_OVERFLOW_PCI_INFO
  if (!legacy) memset(reinterpret_cast<unsigned char*>(pci) + sizeof(p), 0, 4);
#endif
  return NVML_SUCCESS;
}

nvmlReturn_t RemotePciInfo(const char* fn, nvmlDevice_t device, unsigned int link,
                           nvmlPciInfo_t* pci, bool legacy) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  int index = -1;
  Device* d = Dev(device, &index);
  if (d == nullptr || pci == nullptr || link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t rc = Injection(*g_state, fn, index, static_cast<int>(link)); rc != 0) return rc;
  auto it = d->links.find(link);
  if (it == d->links.end()) return NVML_ERROR_NOT_SUPPORTED;
  nvmlPciInfo_t p;
  FillPci(it->second.remote, it->second.raw, 0, 0, &p);
  WritePci(p, pci, legacy);
  return NVML_SUCCESS;
}

// nvmlDeviceGetComputeRunningProcesses in either layout: `entry` is 16
// (nvmlProcessInfo_v1_t) or 24 (nvmlProcessInfo_v2_t) bytes.
nvmlReturn_t ComputeProcesses(const char* fn, nvmlDevice_t device, unsigned int* count, void* infos,
                              size_t entry) {
  DEVICE_CALL(fn);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_processes) return NVML_ERROR_NOT_SUPPORTED;
  const unsigned int n = static_cast<unsigned int>(d->processes.size());
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < n; ++i) {
    memcpy(static_cast<unsigned char*>(infos) + i * entry, &d->processes[i], entry);
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t SmClock(const char* fn, nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock,
                     bool max) {
  DEVICE_CALL(fn);
  if (clock == nullptr || type < NVML_CLOCK_GRAPHICS || type > 3) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (type != NVML_CLOCK_SM || !(max ? d->has_sm_clock_max : d->has_sm_clock)) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *clock = max ? d->sm_clock_max : d->sm_clock;
  return NVML_SUCCESS;
}

nvmlReturn_t ClockReasons(const char* fn, nvmlDevice_t device, unsigned long long* reasons) {
  DEVICE_CALL(fn);
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_clock_reasons) return NVML_ERROR_NOT_SUPPORTED;
  *reasons = d->clock_reasons;
  return NVML_SUCCESS;
}

}  // namespace

// ---- Exported NVML symbols ----

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                unsigned int* clock) {
  return SmClock("nvmlDeviceGetClockInfo", device, type, clock, /*max=*/false);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned int* clock) {
  return SmClock("nvmlDeviceGetMaxClockInfo", device, type, clock, /*max=*/true);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long* reasons) {
  return ClockReasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

FAKE_EXPORT nvmlReturn_t nvmlInit() { return Init("nvmlInit"); }

FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  --g_state->refs;
  return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injection(*g_state, "nvmlSystemGetDriverVersion", -1); rc != 0) return rc;
  if (!g_state->has_driver) return NVML_ERROR_NOT_SUPPORTED;
  return CopyString(g_state->driver, version, length);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t rc = Injection(*g_state, "nvmlSystemGetCudaDriverVersion", -1); rc != 0) {
    return rc;
  }
  if (!g_state->has_cuda) return NVML_ERROR_NOT_SUPPORTED;
  *version = g_state->cuda;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return Count("nvmlDeviceGetCount", count);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return HandleByIndex("nvmlDeviceGetHandleByIndex", index, device);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo("nvmlDeviceGetPciInfo", device, pci, /*legacy=*/true);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t* pci) {
  return RemotePciInfo("nvmlDeviceGetNvLinkRemotePciInfo", device, link, pci, /*legacy=*/true);
}

#ifndef FAKE_NVML_LEGACY
FAKE_EXPORT nvmlReturn_t nvmlInit_v2() { return Init("nvmlInit_v2"); }

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return Count("nvmlDeviceGetCount_v2", count);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return HandleByIndex("nvmlDeviceGetHandleByIndex_v2", index, device);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo("nvmlDeviceGetPciInfo_v3", device, pci, /*legacy=*/false);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                             nvmlPciInfo_t* pci) {
  return RemotePciInfo("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, link, pci,
                       /*legacy=*/false);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr,
                                                   unsigned int* unc, unsigned int* pending,
                                                   unsigned int* failure) {
  DEVICE_CALL("nvmlDeviceGetRemappedRows");
  if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_remap) return NVML_ERROR_NOT_SUPPORTED;
  *corr = d->remap_corr;
  *unc = d->remap_unc;
  *pending = d->remap_pending ? 1 : 0;
  *failure = d->remap_failure ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device,
                                                    nvmlGpuFabricInfo_t* info) {
  DEVICE_CALL("nvmlDeviceGetGpuFabricInfo");
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_fabric) return NVML_ERROR_NOT_SUPPORTED;
  *info = d->fabric;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                  nvmlFieldValue_t* values) {
  DEVICE_CALL("nvmlDeviceGetFieldValues");
  if (count < 0 || (count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t v = values[i];  // fieldId and scopeId are the caller's
    v.timestamp = 1700000000000000LL;
    v.latencyUsec = 0;
    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v.value.ullVal = 0;
    v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    if (v.fieldId == NVML_FI_DEV_NVLINK_GET_STATE) {
      auto it = d->links.find(v.scopeId);
      if (!d->links.empty()) {
        v.nvmlReturn = NVML_SUCCESS;
        v.value.uiVal = it != d->links.end() && it->second.active ? NVML_FEATURE_ENABLED
                                                                  : NVML_FEATURE_DISABLED;
      }
    } else if (auto it = d->fields.find(v.fieldId); it != d->fields.end()) {
      v.nvmlReturn = NVML_SUCCESS;
      v.value.uiVal = static_cast<unsigned int>(it->second);
    }
    const std::string field = "field:" + std::to_string(v.fieldId);
    if (nvmlReturn_t rc = Injection(*g_state, field, index, static_cast<int>(v.scopeId)); rc != 0) {
      v.nvmlReturn = rc;
    }
    memcpy(&values[i], &v, sizeof(v));
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v2_t* infos) {
  return ComputeProcesses("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos,
                          sizeof(nvmlProcessInfo_v2_t));
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v2_t* infos) {
  return ComputeProcesses("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos,
                          sizeof(nvmlProcessInfo_v2_t));
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                unsigned long long* reasons) {
  return ClockReasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}
#endif  // FAKE_NVML_LEGACY

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              nvmlProcessInfo_v1_t* infos) {
  return ComputeProcesses("nvmlDeviceGetComputeRunningProcesses", device, count, infos,
                          sizeof(nvmlProcessInfo_v1_t));
}

// A count of 0 asks for the count alone (SUCCESS when there are none,
// INSUFFICIENT_SIZE otherwise); `addresses` gets made-up page addresses.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device,
                                                   nvmlPageRetirementCause_t cause,
                                                   unsigned int* count,
                                                   unsigned long long* addresses) {
  DEVICE_CALL("nvmlDeviceGetRetiredPages");
  if (count == nullptr || (cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
                           cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!d->has_retired) return NVML_ERROR_NOT_SUPPORTED;
  const unsigned int n =
      cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? d->retired_dbe : d->retired_sbe;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && addresses == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < n; ++i) addresses[i] = 0x1000ull * (i + 1) + cause;
  *count = n;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                nvmlEnableState_t* pending) {
  DEVICE_CALL("nvmlDeviceGetRetiredPagesPendingStatus");
  if (pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_retired) return NVML_ERROR_NOT_SUPPORTED;
  *pending = d->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* out) {
  DEVICE_CALL("nvmlDeviceGetIndex");
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *out = static_cast<unsigned int>(index);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  DEVICE_CALL("nvmlDeviceGetUUID");
  if (d->uuid_unterminated) {
    if (uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    memset(uuid, 'A', length);  // the whole buffer, no NUL
    return NVML_SUCCESS;
  }
  return CopyString(d->uuid, uuid, length);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  DEVICE_CALL("nvmlDeviceGetName");
  return CopyString(d->name, name, length);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  DEVICE_CALL("nvmlDeviceGetMemoryInfo");
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_memory) return NVML_ERROR_NOT_SUPPORTED;
  memcpy(memory, &d->memory, sizeof(d->memory));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                            int* minor) {
  DEVICE_CALL("nvmlDeviceGetCudaComputeCapability");
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_cc) return NVML_ERROR_NOT_SUPPORTED;
  *major = d->cc_major;
  *minor = d->cc_minor;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device,
                                                             unsigned int* gen) {
  DEVICE_CALL("nvmlDeviceGetCurrPcieLinkGeneration");
  if (gen == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_pcie) return NVML_ERROR_NOT_SUPPORTED;
  *gen = d->pcie_gen;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  DEVICE_CALL("nvmlDeviceGetCurrPcieLinkWidth");
  if (width == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_pcie) return NVML_ERROR_NOT_SUPPORTED;
  *width = d->pcie_width;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int size,
                                                  unsigned long* set) {
  DEVICE_CALL("nvmlDeviceGetCpuAffinity");
  if (set == nullptr || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_cpus) return NVML_ERROR_NOT_SUPPORTED;
  for (unsigned int w = 0; w < size; ++w) set[w] = w < d->cpus.size() ? d->cpus[w] : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  DEVICE_CALL("nvmlDeviceGetMinorNumber");
  if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_minor) return NVML_ERROR_NOT_SUPPORTED;
  *minor = d->minor;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                       nvmlNvLinkCapability_t cap,
                                                       unsigned int* result) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  int index = -1;
  Device* d = Dev(device, &index);
  if (d == nullptr || result == nullptr || link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t rc =
          Injection(*g_state, "nvmlDeviceGetNvLinkCapability", index, static_cast<int>(link));
      rc != 0) {
    return rc;
  }
  auto it = d->links.find(link);
  if (it == d->links.end()) return NVML_ERROR_NOT_SUPPORTED;
  *result = cap == NVML_NVLINK_CAP_P2P_SUPPORTED && it->second.p2p ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                  nvmlEnableState_t* active) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state->refs == 0) return NVML_ERROR_UNINITIALIZED;
  int index = -1;
  Device* d = Dev(device, &index);
  if (d == nullptr || active == nullptr || link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t rc =
          Injection(*g_state, "nvmlDeviceGetNvLinkState", index, static_cast<int>(link));
      rc != 0) {
    return rc;
  }
  auto it = d->links.find(link);
  if (it == d->links.end()) return NVML_ERROR_NOT_SUPPORTED;
  *active = it->second.active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                              nvmlEnableState_t* pending) {
  DEVICE_CALL("nvmlDeviceGetEccMode");
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_ecc) return NVML_ERROR_NOT_SUPPORTED;
  *current = d->ecc_current ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  *pending = d->ecc_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                     nvmlMemoryErrorType_t type,
                                                     nvmlEccCounterType_t counter,
                                                     unsigned long long* count) {
  DEVICE_CALL("nvmlDeviceGetTotalEccErrors");
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->has_ecc || !d->ecc_current) return NVML_ERROR_NOT_SUPPORTED;
  if (counter != NVML_VOLATILE_ECC) return NVML_ERROR_NOT_SUPPORTED;  // not modelled
  *count = type == NVML_MEMORY_ERROR_TYPE_CORRECTED ? d->sbe : d->dbe;
  return NVML_SUCCESS;
}

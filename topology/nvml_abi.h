// NVML's C ABI, declared here at the sizes and offsets of the real nvml.h
// (x86_64 and aarch64, LP64) so that trainlet can dlopen libnvidia-ml.so.1
// without NVIDIA's headers. Only what topology/nvml.cc and the fake shim
// (topology/testing/fake_nvml.cc) use is declared. The static_asserts below
// pin every size and offset: NCCL declared a 52-byte nvmlPciInfo_t and
// called nvmlDeviceGetPciInfo_v3, which writes 68 (NVIDIA/nccl #2325).
//
// Plain declarations; no state, no threading concerns.
#ifndef TRAINLET_TOPOLOGY_NVML_ABI_H_
#define TRAINLET_TOPOLOGY_NVML_ABI_H_

#include <cstddef>

extern "C" {

typedef struct nvmlDevice_st* nvmlDevice_t;  // opaque

// nvmlReturn_t is a C enum (4 bytes). Declared as int so that any value a
// driver returns, known to us or not, is representable.
typedef int nvmlReturn_t;

enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999,
};

typedef int nvmlEnableState_t;  // C enum
enum : int { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };

typedef int nvmlNvLinkCapability_t;  // C enum
enum : int { NVML_NVLINK_CAP_P2P_SUPPORTED = 0 };

typedef int nvmlMemoryErrorType_t;  // C enum
enum : int { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };

typedef int nvmlEccCounterType_t;  // C enum
enum : int { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };

typedef int nvmlPageRetirementCause_t;  // C enum
enum : int {
  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1,
};

typedef int nvmlValueType_t;  // C enum
enum : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
};

typedef int nvmlClockType_t;  // C enum
enum : int { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

// nvmlClocksEventReason* (nvmlClocksThrottleReason* before CUDA 12.2, the
// same bits): why the clocks are held down, as
// nvmlDeviceGetCurrentClocksEventReasons reports them.
constexpr unsigned long long kNvmlClocksReasonGpuIdle = 0x1ull;
constexpr unsigned long long kNvmlClocksReasonApplicationsClocksSetting = 0x2ull;
constexpr unsigned long long kNvmlClocksReasonSwPowerCap = 0x4ull;
constexpr unsigned long long kNvmlClocksReasonHwSlowdown = 0x8ull;
constexpr unsigned long long kNvmlClocksReasonSyncBoost = 0x10ull;
constexpr unsigned long long kNvmlClocksReasonSwThermalSlowdown = 0x20ull;
constexpr unsigned long long kNvmlClocksReasonHwThermalSlowdown = 0x40ull;
constexpr unsigned long long kNvmlClocksReasonHwPowerBrakeSlowdown = 0x80ull;
constexpr unsigned long long kNvmlClocksReasonDisplayClockSetting = 0x100ull;

// Buffer sizes from nvml.h.
constexpr unsigned int NVML_DEVICE_UUID_BUFFER_SIZE = 80;
constexpr unsigned int NVML_DEVICE_NAME_BUFFER_SIZE = 64;
constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
constexpr unsigned int NVML_NVLINK_MAX_LINKS = 36;

// nvmlProcessInfo_v1_t::usedGpuMemory when the driver cannot say.
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;  // (unsigned long long)(-1)

// Field ids for nvmlDeviceGetFieldValues.
constexpr unsigned int NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3;
constexpr unsigned int NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4;
constexpr unsigned int NVML_FI_DEV_NVLINK_LINK_COUNT = 91;
constexpr unsigned int NVML_FI_DEV_REMAPPED_COR = 142;
constexpr unsigned int NVML_FI_DEV_REMAPPED_UNC = 143;
constexpr unsigned int NVML_FI_DEV_REMAPPED_PENDING = 144;
constexpr unsigned int NVML_FI_DEV_REMAPPED_FAILURE = 145;
constexpr unsigned int NVML_FI_DEV_NVLINK_GET_STATE = 165;  // scopeId = link
constexpr unsigned int NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230;

// nvmlPciInfo_t as written by nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2. The legacy (unversioned) calls write
// only the first 52 bytes, with the bus id at offset 0.
typedef struct {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];  // "%04X:%02X:%02X.0"
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;                        // (device << 16) | vendor
  unsigned int pciSubSystemId;                     // (subsystem device << 16) | subsystem vendor
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "%08X:%02X:%02X.0"
} nvmlPciInfo_t;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  unsigned int version;  // nvmlMemory_v2 below
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

// NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | (2 << 24).
constexpr unsigned int nvmlMemory_v2 = 0x02000028;

// What nvmlDeviceGetComputeRunningProcesses (unversioned) writes per process.
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // NVML_VALUE_NOT_AVAILABLE: unknown
} nvmlProcessInfo_v1_t;

// What nvmlDeviceGetComputeRunningProcesses_v2 and _v3 write per process
// (nvml.h's nvmlProcessInfo_t from the CUDA 11.1 headers on): v1's fields at v1's offsets, then
// the MIG instance ids (0xFFFFFFFF without MIG).
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef union {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
} nvmlValue_t;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// nvmlDeviceGetGpuFabricInfo (R525+, Hopper and later with NVSwitch): the
// GPU's NVLink fabric cluster and clique, once Fabric Manager registered it.
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef unsigned char nvmlGpuFabricState_t;
typedef struct {
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;  // meaningful only once state is COMPLETED.
  unsigned int cliqueId;
  nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

}  // extern "C"

static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t is 28 bytes");
static_assert(offsetof(nvmlGpuFabricInfo_t, cliqueId) == 20, "nvmlGpuFabricInfo_t.cliqueId @20");
static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is a 4-byte C enum");
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t must be the 68-byte v3 layout");
static_assert(offsetof(nvmlPciInfo_t, busIdLegacy) == 0, "nvmlPciInfo_t.busIdLegacy @0");
static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain @16");
static_assert(offsetof(nvmlPciInfo_t, bus) == 20, "nvmlPciInfo_t.bus @20");
static_assert(offsetof(nvmlPciInfo_t, device) == 24, "nvmlPciInfo_t.device @24");
static_assert(offsetof(nvmlPciInfo_t, pciDeviceId) == 28, "nvmlPciInfo_t.pciDeviceId @28");
static_assert(offsetof(nvmlPciInfo_t, pciSubSystemId) == 32, "nvmlPciInfo_t.pciSubSystemId @32");
static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId @36");
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is 24 bytes");
static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is 40 bytes");
static_assert(offsetof(nvmlMemory_v2_t, total) == 8, "nvmlMemory_v2_t.total @8");
static_assert(offsetof(nvmlMemory_v2_t, used) == 32, "nvmlMemory_v2_t.used @32");
static_assert((sizeof(nvmlMemory_v2_t) | (2u << 24)) == nvmlMemory_v2, "nvmlMemory_v2 version");
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8, "v1 usedGpuMemory @8");
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t is 24 bytes");
static_assert(offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) == 8, "v2 usedGpuMemory @8");
static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16, "v2 gpuInstanceId @16");
static_assert(offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20, "v2 computeInstanceId @20");
static_assert(sizeof(nvmlValue_t) == 8, "nvmlValue_t is 8 bytes");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t is 40 bytes");
static_assert(offsetof(nvmlFieldValue_t, scopeId) == 4, "nvmlFieldValue_t.scopeId @4");
static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8, "nvmlFieldValue_t.timestamp @8");
static_assert(offsetof(nvmlFieldValue_t, latencyUsec) == 16, "nvmlFieldValue_t.latencyUsec @16");
static_assert(offsetof(nvmlFieldValue_t, valueType) == 24, "nvmlFieldValue_t.valueType @24");
static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28, "nvmlFieldValue_t.nvmlReturn @28");
static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t.value @32");
static_assert(sizeof(unsigned long) == 8, "LP64: nvmlDeviceGetCpuAffinity's words are 64-bit");

#endif  // TRAINLET_TOPOLOGY_NVML_ABI_H_

// ReadNvml's choice between this process and the NVML reader, and the
// in-process reads of NVML and NCCL under one process-wide lock (nvml.h).
#include <sys/auxv.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "topology/nvml.h"
#include "topology/nvml_internal.h"
#include "topology/nvml_reader.h"

namespace trainlet::topology {
namespace {

// Every in-process NVML and NCCL call is under this lock.
ABSL_CONST_INIT absl::Mutex g_nvml_mu(absl::kConstInit);

// A fully static trainlet (TRAINLET_STATIC) must not dlopen NVML or NCCL:
// static glibc's dlopen brings a second, uninitialized libc (and libstdc++)
// into the process, and the first call that touches thread-local state on a
// thread other than main crashes (seen with the test's fake NVML), whatever
// glibc the image has. A static executable has no program interpreter, so
// the kernel passes AT_BASE 0.
bool IsStaticExecutable() { return getauxval(AT_BASE) == 0; }

constexpr char kStaticBuildReason[] =
    "NVML unavailable: static build without the NVML reader (a fully static trainlet cannot "
    "load shared libraries; GPUs come from the NVIDIA driver's /proc/driver/nvidia/gpus, "
    "without memory, NVLinks or health)";
constexpr char kStaticBuildNcclReason[] =
    "NCCL version unavailable: static build (a fully static trainlet cannot load shared "
    "libraries)";

void SetSource(v1::Source* source, v1::Source::Status status, std::string reason) {
  source->set_status(status);
  source->set_reason(std::move(reason));
}

}  // namespace

void ReadNvml(const NvmlOptions& options, v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus) {
  gpus->clear();
  NvmlOptions::Via via = options.via;
  if (via == NvmlOptions::Via::kAuto) {
    via = IsStaticExecutable() && NvmlReaderBuiltIn() ? NvmlOptions::Via::kReader
                                                      : NvmlOptions::Via::kInProcess;
  }
  if (via == NvmlOptions::Via::kReader && !options.library.empty()) {
    ReadNvmlThroughReader(options, NvmlReaderSeams(), probe, gpus);
    return;
  }
  if (IsStaticExecutable() && !options.library.empty()) {
    SetSource(probe->mutable_nvml(), v1::Source::ABSENT, kStaticBuildReason);
    return;
  }
  absl::MutexLock lock(&g_nvml_mu);
  ReadNvmlUnlocked(options, probe, gpus);
}

void ReadNcclVersion(const std::string& library, v1::Source* out) {
  if (IsStaticExecutable() && !library.empty()) {
    out->Clear();
    SetSource(out, v1::Source::ABSENT, kStaticBuildNcclReason);
    return;
  }
  // dlerror's state is per thread, but dlopen of a library with static
  // constructors may run code; keep NCCL loads from racing NVML's too.
  absl::MutexLock lock(&g_nvml_mu);
  ReadNcclVersionUnlocked(library, out);
}

}  // namespace trainlet::topology

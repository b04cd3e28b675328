// The NVML reading logic of nvml.cc without its process-wide lock, for the
// two places that call it: nvml_in_process.cc (under the lock, in a dynamic
// trainlet and in tests) and the NVML reader program (nvml_reader_main.cc,
// one thread, which the static trainlet runs; nvml_reader.h). Not part of
// the topology library's interface.
//
// Threading: not thread-safe; callers serialise every call.
#ifndef TRAINLET_TOPOLOGY_NVML_INTERNAL_H_
#define TRAINLET_TOPOLOGY_NVML_INTERNAL_H_

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

#include "topology/nvml.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// ReadNvml's reading (nvml.h), in this process: dlopens options.library
// (never closed) and reads it. options.via and options.reader_timeout are
// not looked at.
void ReadNvmlUnlocked(const NvmlOptions& options, v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus);

// ReadNcclVersion's reading (nvml.h), in this process.
void ReadNcclVersionUnlocked(const std::string& library, v1::Source* out);

// The reader's answer, written to the file descriptor its --result-fd names:
// kNvmlReaderMagic (8 bytes), the payload's length (4 bytes, little-endian),
// then the payload, a serialized v1::NodeProbe holding only what
// ReadNvmlUnlocked sets: nvml, cuda_driver_version, warnings, and the GPUs in
// `gpus`. The parent takes at most kNvmlReaderMaxPayload bytes of payload.
inline constexpr char kNvmlReaderMagic[] = "TRNVML1\n";
inline constexpr size_t kNvmlReaderMagicSize = sizeof(kNvmlReaderMagic) - 1;
inline constexpr size_t kNvmlReaderHeaderSize = kNvmlReaderMagicSize + 4;
inline constexpr size_t kNvmlReaderMaxPayload = 1 << 20;

// A GPU clock above this many MHz is a broken answer (today's GPUs run
// below 3,000): nvml.cc leaves it unknown, and the parent rejects a reader's
// answer that has one (Gpu.sm_clock_mhz, topology.proto).
inline constexpr unsigned int kMaxClockMhz = 100000;

// write(2) until all of `data` is out (retrying EINTR and short writes);
// false on an error. Both ends of the reader's pipes use it.
inline bool WriteFully(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_NVML_INTERNAL_H_

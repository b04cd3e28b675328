// The NVML reader: the program a static trainlet carries inside itself and
// runs through the image's own dynamic loader to read NVML, which a fully
// static process cannot dlopen (nvml_reader.h; docs/topology.md, "NVML in the
// static build"). It runs ReadNvmlUnlocked (nvml.cc, the same code a dynamic
// trainlet runs in-process) and writes the result to --result-fd in the form
// nvml_internal.h describes, then exits 0. Everything else it or NVML prints
// goes to stdout/stderr, which the parent keeps a tail of for its reasons.
//
//   trainlet-nvml-reader --result-fd=FD --library=LIB [--health=0|1]
//                        [--cpumap-cpus=N]
//
// Built to run against any glibc from 2.17 on (topology/portable_glibc.cmake):
// libstdc++ and libgcc linked in, protobuf-lite and absl's string code linked
// in, glibc symbols pinned to their 2.17 versions. Exit codes: 0 answered
// (the answer may say NVML is absent), 2 bad arguments, 3 the answer could not
// be written.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "topology/nvml.h"
#include "topology/nvml_internal.h"
#include "trainlet/v1/topology.pb.h"

namespace {

using trainlet::topology::kNvmlReaderHeaderSize;
using trainlet::topology::kNvmlReaderMagic;
using trainlet::topology::kNvmlReaderMagicSize;
using trainlet::topology::kNvmlReaderMaxPayload;
using trainlet::topology::NvmlOptions;

// "--name=value": the value, or nullptr when `arg` is not that flag.
const char* FlagValue(const char* arg, const char* name) {
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0 || arg[n] != '=') return nullptr;
  return arg + n + 1;
}

bool ParseInt(const char* text, long min, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

int Usage(const char* why) {
  fprintf(stderr, "trainlet-nvml-reader: %s\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  NvmlOptions options;
  options.library.clear();
  long result_fd = -1;
  for (int i = 1; i < argc; ++i) {
    long v = 0;
    if (const char* text = FlagValue(argv[i], "--result-fd")) {
      if (!ParseInt(text, 0, 1 << 20, &result_fd)) return Usage("bad --result-fd");
    } else if (const char* lib = FlagValue(argv[i], "--library")) {
      options.library = lib;
    } else if (const char* health = FlagValue(argv[i], "--health")) {
      if (!ParseInt(health, 0, 1, &v)) return Usage("bad --health");
      options.health = v == 1;
    } else if (const char* cpus = FlagValue(argv[i], "--cpumap-cpus")) {
      if (!ParseInt(cpus, 0, 1 << 20, &v)) return Usage("bad --cpumap-cpus");
      options.cpumap_cpus = static_cast<int>(v);
    } else {
      return Usage("unknown argument (see nvml_reader_main.cc)");
    }
  }
  if (result_fd < 0) return Usage("--result-fd is required");

  trainlet::v1::NodeProbe probe;
  std::vector<trainlet::v1::Gpu> gpus;
  trainlet::topology::ReadNvmlUnlocked(options, &probe, &gpus);
  for (trainlet::v1::Gpu& gpu : gpus) *probe.add_gpus() = std::move(gpu);

  std::string answer(kNvmlReaderMagic, kNvmlReaderMagicSize);
  std::string payload;
  if (!probe.SerializeToString(&payload) || payload.size() > kNvmlReaderMaxPayload) {
    fprintf(stderr, "trainlet-nvml-reader: the answer (%zu bytes) cannot be sent\n",
            payload.size());
    return 3;
  }
  const uint32_t size = static_cast<uint32_t>(payload.size());
  for (int b = 0; b < 4; ++b) answer.push_back(static_cast<char>(size >> (8 * b) & 0xff));
  answer += payload;
  static_assert(kNvmlReaderHeaderSize == kNvmlReaderMagicSize + 4, "magic, then 4 bytes");
  const int fd = static_cast<int>(result_fd);
  if (!trainlet::topology::WriteFully(fd, answer.data(), answer.size()) || close(fd) != 0) {
    fprintf(stderr, "trainlet-nvml-reader: cannot write the answer to fd %d: %s\n", fd,
            strerror(errno));
    return 3;
  }
  // No destructors, NVML's atexit handlers included: the answer is out, and
  // a driver that hangs in them must not make the parent wait.
  fflush(stderr);
  _exit(0);
}

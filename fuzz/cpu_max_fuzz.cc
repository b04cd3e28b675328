// Fuzz target: ParseCpuMax over a cgroup v2 cpu.max text. A limit, when there
// is one, is at least 1 CPU.
#include <string>

#include "config/system_probe.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  std::optional<int> cpus = trainlet::agent::ParseCpuMax(text);
  if (cpus.has_value()) FUZZ_CHECK(*cpus >= 1, text);
  return 0;
}

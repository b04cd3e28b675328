// Fuzz target: the NVIDIA driver's procfs parsers (topology/driver_procfs.h)
// over any text. What they accept is validated: a bus id in sysfs form, a
// minor in 0..4095, a UUID that is either empty or "GPU-" 8-4-4-4-12 hex, a
// printable model of at most 96 bytes, a driver version of digits and dots.
#include <string>

#include "absl/strings/ascii.h"
#include "fuzz/fuzz_util.h"
#include "topology/driver_procfs.h"
#include "topology/sysfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  auto info = trainlet::topology::ParseGpuInformation(text);
  if (info.ok()) {
    FUZZ_CHECK(trainlet::topology::IsBusId(info->bus_id), info->bus_id);
    FUZZ_CHECK(info->minor >= 0 && info->minor <= 4095, text);
    FUZZ_CHECK(info->uuid.empty() || trainlet::topology::IsGpuUuid(info->uuid), info->uuid);
    FUZZ_CHECK(info->model.size() <= 96, info->model);
    for (char c : info->model)
      FUZZ_CHECK(absl::ascii_isprint(static_cast<unsigned char>(c)), info->model);
  }
  std::optional<std::string> version = trainlet::topology::ParseDriverVersion(text);
  if (version.has_value()) {
    FUZZ_CHECK(!version->empty() && version->size() <= 32, *version);
    for (char c : *version) {
      FUZZ_CHECK(absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.', *version);
    }
  }
  return 0;
}

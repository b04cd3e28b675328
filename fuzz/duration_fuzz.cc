// Fuzz target: ParseDurationValue. Input: one byte choosing the minimum
// (0 to 255 ms), then the text. A parsed duration is finite and >= the minimum.
#include <string>

#include "absl/time/time.h"
#include "config/options.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::Duration min = absl::Milliseconds(data[0]);
  agent::OptionValue v{std::string(trainlet::fuzz::AsText(data + 1, size - 1)), "--join-timeout",
                       agent::ValueSource::kFlag};
  auto d = agent::ParseDurationValue(v, min);
  if (d.ok()) {
    FUZZ_CHECK(*d >= min, v.text);
    FUZZ_CHECK(*d != absl::InfiniteDuration() && *d != -absl::InfiniteDuration(), v.text);
  }
  return 0;
}

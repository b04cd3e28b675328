// Fuzz target: ParseNnodesValue ("N" or "MIN:MAX") and ParseIntValue over the
// whole input as text. A parsed range is in bounds and survives a round trip
// through NnodesToString.
#include <string>

#include "config/options.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  agent::OptionValue v{std::string(trainlet::fuzz::AsText(data, size)), "--nnodes",
                       agent::ValueSource::kFlag};
  auto n = agent::ParseNnodesValue(v);
  if (n.ok()) {
    FUZZ_CHECK(1 <= n->min && n->min <= n->max && n->max <= agent::kMaxNodes, v.text);
    agent::OptionValue again{agent::NnodesToString(*n), "again", agent::ValueSource::kFlag};
    auto round_trip = agent::ParseNnodesValue(again);
    FUZZ_CHECK(round_trip.ok() && round_trip->min == n->min && round_trip->max == n->max,
               again.text);
  } else {
    FUZZ_CHECK(!n.status().message().empty(), "an error without a message");
  }
  auto i = agent::ParseIntValue(v, -1, 65535);
  if (i.ok()) FUZZ_CHECK(-1 <= *i && *i <= 65535, v.text);
  return 0;
}

// Fuzz target: ParseHostPortValue and ParseHostValue over the whole input as
// text, and the common/host_names.h predicates. A parsed host keeps the
// documented shape (non-empty, <= 253 bytes, printable ASCII, no space, no
// brackets) and HOST:PORT survives a round trip through JoinHostPort.
#include <string>

#include "common/host_names.h"
#include "config/options.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

namespace {

bool PrintableNoSpace(const std::string& s) {
  for (unsigned char c : s) {
    if (c <= 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  agent::OptionValue v{text, "--coordinator", agent::ValueSource::kFlag};
  auto hp = agent::ParseHostPortValue(v, 29400);
  if (hp.ok()) {
    FUZZ_CHECK(hp->port >= 1 && hp->port <= 65535, text);
    FUZZ_CHECK(!hp->host.empty() && hp->host.size() <= 253 && PrintableNoSpace(hp->host), text);
    agent::OptionValue joined{agent::JoinHostPort(hp->host, hp->port), "joined",
                              agent::ValueSource::kFlag};
    auto again = agent::ParseHostPortValue(joined, 1);
    FUZZ_CHECK(again.ok() && again->host == hp->host && again->port == hp->port, joined.text);
  }
  auto host = agent::ParseHostValue(v);
  if (host.ok()) {
    FUZZ_CHECK(!host->empty() && host->size() <= 253 && PrintableNoSpace(*host), text);
    FUZZ_CHECK(host->find_first_of("[]") == std::string::npos, *host);
  }
  const bool valid = trainlet::IsValidHost(text);
  FUZZ_CHECK(valid == (trainlet::IsIpLiteral(text) || trainlet::IsDnsName(text)), text);
  if (valid) FUZZ_CHECK(text.size() <= trainlet::kMaxHostLength && PrintableNoSpace(text), text);
  if (trainlet::IsLoopbackHost(text)) FUZZ_CHECK(valid, "loopback but not a valid host: " + text);
  return 0;
}

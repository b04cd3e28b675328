// Fuzz target: FindFqdnInHosts. Input: the first line is the hostname, the
// rest an /etc/hosts text. A result is "<hostname>.<something>" and appears
// in the text.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "config/system_probe.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text = trainlet::fuzz::AsText(data, size);
  size_t nl = text.find('\n');
  absl::string_view hostname = text.substr(0, nl);
  absl::string_view hosts = nl == absl::string_view::npos ? "" : text.substr(nl + 1);
  std::string fqdn = trainlet::agent::FindFqdnInHosts(hosts, hostname);
  if (!fqdn.empty()) {
    FUZZ_CHECK(absl::StartsWith(fqdn, absl::StrCat(hostname, ".")), fqdn);
    FUZZ_CHECK(absl::StrContains(hosts, fqdn), fqdn);
  }
  return 0;
}

// Fuzz target: LintNcclXml (topology/nccl_xml.h) over any text, and the sysfs
// value parsers it shares with the probe. A text the linter accepts has no
// tab and no XML declaration and starts (after blanks and comments) with
// <system; a normalised bus id is in sysfs form and normalises to itself.
#include <string>

#include "absl/strings/match.h"
#include "fuzz/fuzz_util.h"
#include "topology/nccl_xml.h"
#include "topology/sysfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  if (trainlet::topology::LintNcclXml(text).ok()) {
    FUZZ_CHECK(text.find('\t') == std::string::npos, text);
    FUZZ_CHECK(text.find("<?") == std::string::npos, text);
    FUZZ_CHECK(text.find("<system") != std::string::npos, text);
  }
  std::optional<std::string> bus = trainlet::topology::NormalizeBusId(text);
  if (bus.has_value()) {
    FUZZ_CHECK(trainlet::topology::IsBusId(*bus), *bus);
    FUZZ_CHECK(trainlet::topology::NormalizeBusId(*bus) == bus, *bus);
  }
  std::optional<double> speed = trainlet::topology::ParseLinkSpeed(text);
  if (speed.has_value()) {
    FUZZ_CHECK(!trainlet::topology::FormatLinkSpeed(*speed).empty(), text);
  }
  (void)trainlet::topology::IsCpumap(text);
  (void)trainlet::topology::ParseIbRateMbps(text);
  return 0;
}

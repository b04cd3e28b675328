// Fuzz target: LintNcclXml (topology/nccl_xml.h) over any text, and the sysfs
// value parsers it shares with the probe. A text the linter accepts has no
// tab and no XML declaration: it starts (after blanks and comments) with
// <system; a normalised bus id is in sysfs form and normalises to itself.
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "fuzz/fuzz_util.h"
#include "topology/nccl_xml.h"
#include "topology/sysfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  if (trainlet::topology::LintNcclXml(text).ok()) {
    FUZZ_CHECK(text.find('\t') == std::string::npos, text);
    // No declaration before the root ("<?" may appear inside a quoted value,
    // which NCCL's parser reads up to the closing quote).
    absl::string_view head = absl::StripLeadingAsciiWhitespace(text);
    while (absl::StartsWith(head, "<!--")) {
      const size_t end = head.find("-->");
      head = end == absl::string_view::npos ? absl::string_view() : head.substr(end + 3);
      head = absl::StripLeadingAsciiWhitespace(head);
    }
    FUZZ_CHECK(absl::StartsWith(head, "<system"), text);
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

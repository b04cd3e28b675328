// SafeForLog (declared in logging.h), in a file of its own so that a program
// that needs only it (topology's NVML reader, nvml_reader_main.cc) links
// neither the logger nor its clock and mutex.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"

namespace trainlet {

std::string SafeForLog(absl::string_view text, size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  const absl::string_view kept = text.substr(0, max);
  std::string out;
  out.reserve(kept.size() + 16);
  for (char ch : kept) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += ch;
        } else {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        }
    }
  }
  if (text.size() > kept.size())
    absl::StrAppend(&out, "...(+", text.size() - kept.size(), " bytes)");
  return out;
}

}  // namespace trainlet

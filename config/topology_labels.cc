#include "config/topology_labels.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "rendezvous/protocol.h"
#include "rendezvous/rank_order.h"

namespace trainlet::agent {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Go's strconv.Unquote of a double-quoted string; false when malformed.
bool GoUnquote(absl::string_view q, std::string* out) {
  if (q.size() < 2 || q.front() != '"' || q.back() != '"') return false;
  q = q.substr(1, q.size() - 2);
  out->clear();
  for (size_t i = 0; i < q.size(); ++i) {
    const char c = q[i];
    if (c == '"') return false;
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++i >= q.size()) return false;
    const char e = q[i];
    auto hex = [&](int digits, uint32_t* v) {
      *v = 0;
      for (int k = 1; k <= digits; ++k) {
        if (i + k >= q.size()) return false;
        const int h = HexValue(q[i + k]);
        if (h < 0) return false;
        *v = *v * 16 + static_cast<uint32_t>(h);
      }
      i += digits;
      return true;
    };
    uint32_t v = 0;
    switch (e) {
      case 'a':
        out->push_back('\a');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'v':
        out->push_back('\v');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '"':
        out->push_back('"');
        break;
      case '\'':
        out->push_back('\'');
        break;
      case 'x':
        if (!hex(2, &v)) return false;
        out->push_back(static_cast<char>(v));
        break;
      case 'u':
        if (!hex(4, &v) || (v >= 0xD800 && v < 0xE000)) return false;
        AppendUtf8(v, out);
        break;
      case 'U':
        if (!hex(8, &v) || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return false;
        AppendUtf8(v, out);
        break;
      default:
        if (e >= '0' && e <= '7') {  // \ooo: three octal digits
          if (i + 2 >= q.size()) return false;
          v = 0;
          for (int k = 0; k < 3; ++k) {
            const char o = q[i + k];
            if (o < '0' || o > '7') return false;
            v = v * 8 + static_cast<uint32_t>(o - '0');
          }
          if (v > 255) return false;
          out->push_back(static_cast<char>(v));
          i += 2;
          break;
        }
        return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<Domains> ParseTopologyPairs(absl::string_view text, absl::string_view origin) {
  Domains out;
  absl::flat_hash_set<std::string> keys;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin,
                       ": expected KEY=VALUE,... (widest domain first, e.g. "
                       "zone=us-east-1a,switch=sw-12), got \"",
                       SafeForLog(item, 64), "\""));
    }
    std::string key(absl::StripAsciiWhitespace(item.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(item.substr(eq + 1)));
    absl::Status s = rendezvous::CheckTopologyKey(key);
    if (s.ok()) s = rendezvous::CheckTopologyValue(value);
    if (s.ok() && (key == rendezvous::kBootIdLevel || key == rendezvous::kNvlinkCliqueLevel)) {
      s = absl::InvalidArgumentError(absl::StrCat(
          key, " is a level trainlet adds itself (NVML's NVLink clique, co-located pods)"));
    }
    if (s.ok() && !keys.insert(key).second) {
      s = absl::InvalidArgumentError(absl::StrCat("key \"", key, "\" appears twice"));
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": \"", SafeForLog(item, 64), "\": ", s.message()));
    }
    out.emplace_back(std::move(key), std::move(value));
  }
  if (static_cast<int>(out.size()) > rendezvous::kMaxTopologyDomains) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": at most ", rendezvous::kMaxTopologyDomains, " domains, got ", out.size()));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseTopologyKeys(absl::string_view text,
                                                           absl::string_view origin) {
  std::vector<std::string> out;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    absl::Status s = rendezvous::CheckTopologyKey(item);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
    if (!seen.insert(std::string(item)).second) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": key \"", item, "\" appears twice"));
    }
    out.emplace_back(item);
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseDownwardApiFile(absl::string_view text,
                                                                        absl::string_view origin) {
  std::map<std::string, std::string> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const size_t eq = line.find('=');
    std::string value;
    if (eq == absl::string_view::npos || eq == 0 || !GoUnquote(line.substr(eq + 1), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", line_no,
                       ": expected key=\"value\" (a downward API labels or "
                       "annotations file: fieldPath metadata.labels or "
                       "metadata.annotations), got \"",
                       SafeForLog(line, 64), "\""));
    }
    out[std::string(line.substr(0, eq))] = std::move(value);
  }
  return out;
}

}  // namespace trainlet::agent

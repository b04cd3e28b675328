#include "common/host_names.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace trainlet {
namespace {

bool IsLabelChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// Only what an address (and an IPv6 zone) can contain: inet_pton reads a C
// string, so anything after a NUL would otherwise go unchecked.
bool IsAddressText(absl::string_view text) {
  for (char c : text) {
    if (!IsLabelChar(c) && c != '.' && c != ':' && c != '%') return false;
  }
  return true;
}

}  // namespace

bool IsIpLiteral(absl::string_view host) {
  if (host.empty() || host.size() > 64 || !IsAddressText(host)) return false;
  std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return true;
  // An IPv6 zone ("fe80::1%eth0") is not part of inet_pton's syntax.
  size_t percent = text.find('%');
  if (percent != std::string::npos) {
    absl::string_view zone = absl::string_view(text).substr(percent + 1);
    if (zone.empty() || zone.size() > 16) return false;
    for (char c : zone) {
      if (!IsLabelChar(c) && c != '.') return false;
    }
    text.resize(percent);
  }
  in6_addr v6;
  return inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

bool IsDnsName(absl::string_view host) {
  if (host.empty() || host.size() > kMaxHostLength) return false;
  if (host.back() == '.') host.remove_suffix(1);
  if (host.empty()) return false;
  size_t start = 0;
  while (start <= host.size()) {
    size_t end = host.find('.', start);
    if (end == absl::string_view::npos) end = host.size();
    absl::string_view label = host.substr(start, end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!IsLabelChar(c)) return false;
    }
    start = end + 1;
  }
  return true;
}

bool IsValidHost(absl::string_view host) { return IsIpLiteral(host) || IsDnsName(host); }

bool IsLoopbackHost(absl::string_view host) {
  absl::string_view name = host;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (absl::EqualsIgnoreCase(name, "localhost")) return true;
  if (!IsIpLiteral(host)) return false;
  std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

}  // namespace trainlet

#include "config/addresses.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "common/host_names.h"

namespace trainlet::agent {
namespace {

// The 16-byte form of an IP literal (IPv4 as v4-mapped, zone dropped).
std::optional<in6_addr> AddressBytes(absl::string_view text) {
  std::string s(text.substr(0, text.find('%')));
  in_addr v4;
  in6_addr v6 = {};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    v6.s6_addr[10] = 0xff;
    v6.s6_addr[11] = 0xff;
    std::memcpy(&v6.s6_addr[12], &v4, 4);
    return v6;
  }
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) return v6;
  return std::nullopt;
}

bool IsUnspecified(absl::string_view host) {
  std::optional<in6_addr> a = AddressBytes(host);
  if (!a.has_value()) return false;
  static const in6_addr kAny6 = {};
  in6_addr any4 = {};
  any4.s6_addr[10] = 0xff;
  any4.s6_addr[11] = 0xff;
  return std::memcmp(&*a, &kAny6, sizeof(in6_addr)) == 0 ||
         std::memcmp(&*a, &any4, sizeof(in6_addr)) == 0;
}

bool IsOwnAddress(absl::string_view addr, const SystemInfo& sys) {
  std::optional<in6_addr> a = AddressBytes(addr);
  if (!a.has_value()) return false;
  if (IsLoopbackHost(addr) || IsUnspecified(addr)) return true;
  if (!sys.local_addrs) return false;
  for (const std::string& own : sys.local_addrs()) {
    std::optional<in6_addr> b = AddressBytes(own);
    if (b.has_value() && std::memcmp(&*a, &*b, sizeof(in6_addr)) == 0) return true;
  }
  return false;
}

}  // namespace

bool IsThisHostOnly(absl::string_view host) { return IsLoopbackHost(host) || IsUnspecified(host); }

std::string LoopbackLike(absl::string_view host) {
  std::optional<in6_addr> a = AddressBytes(host);
  return a.has_value() && IN6_IS_ADDR_LOOPBACK(&*a) ? "::1" : "127.0.0.1";
}

bool SameHostName(absl::string_view a, absl::string_view b) {
  if (!a.empty() && a.back() == '.') a.remove_suffix(1);
  if (!b.empty() && b.back() == '.') b.remove_suffix(1);
  return !a.empty() && absl::EqualsIgnoreCase(a, b);
}

bool IsLocalCoordinator(absl::string_view host, const SystemInfo& sys) {
  if (IsThisHostOnly(host)) return true;
  if (IsIpLiteral(host)) return IsOwnAddress(host, sys);
  if (SameHostName(host, sys.hostname) || SameHostName(host, sys.fqdn)) return true;
  if (!sys.resolve) return false;
  std::optional<ResolvedHost> resolved = sys.resolve(std::string(host));
  if (!resolved.has_value()) return false;
  return std::any_of(resolved->addrs.begin(), resolved->addrs.end(),
                     [&](const std::string& a) { return IsOwnAddress(a, sys); });
}

std::string OwnReachableName(const SystemInfo& sys) {
  auto usable = [](absl::string_view h) { return IsValidHost(h) && !IsThisHostOnly(h); };
  if (usable(sys.fqdn)) return sys.fqdn;
  if (sys.resolve && usable(sys.hostname)) {
    std::optional<ResolvedHost> r = sys.resolve(sys.hostname);
    if (r.has_value() && absl::StrContains(r->canonical_name, ".") && usable(r->canonical_name)) {
      return std::string(absl::StripSuffix(r->canonical_name, "."));
    }
  }
  if (usable(sys.hostname)) return sys.hostname;
  return "";
}

}  // namespace trainlet::agent

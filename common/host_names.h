// Host names and addresses as trainlet accepts them, from flags, the
// environment and the network alike (one definition, so that what the agent
// accepts is exactly what the coordinator accepts).
//
// A host is either an IP literal (IPv4 dotted quad, or IPv6 without
// brackets, optionally with a %zone) or a DNS name: dot-separated labels of
// 1-63 letters, digits, '-' or '_' (underscores appear in Docker Compose and
// some cluster names), not starting or ending with '-', at most 253 bytes in
// all, one optional trailing dot. Nothing else: no spaces, no control bytes,
// no ':' outside IPv6, no port.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_COMMON_HOST_NAMES_H_
#define TRAINLET_COMMON_HOST_NAMES_H_

#include "absl/strings/string_view.h"

namespace trainlet {

inline constexpr size_t kMaxHostLength = 253;

bool IsIpLiteral(absl::string_view host);
bool IsDnsName(absl::string_view host);
// IsIpLiteral || IsDnsName.
bool IsValidHost(absl::string_view host);
// "localhost" (any case, optional trailing dot), 127.0.0.0/8, ::1 and
// ::ffff:127.x.y.z.
bool IsLoopbackHost(absl::string_view host);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_HOST_NAMES_H_

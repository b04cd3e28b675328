// What an address or host name means to this host, for the config's
// decisions (who hosts the coordinator, what this node advertises): loopback
// or "any", one of this host's own addresses or names, a name peers on other
// hosts can dial. Pure functions over SystemInfo's facts; the only lookups
// are SystemInfo's own (local_addrs, resolve), asked only when a decision
// needs them. Thread-compatible.
#ifndef TRAINLET_CONFIG_ADDRESSES_H_
#define TRAINLET_CONFIG_ADDRESSES_H_

#include <string>

#include "absl/strings/string_view.h"
#include "config/system_probe.h"

namespace trainlet::agent {

// Loopback, or 0.0.0.0 / :: (which a dialer on this host reaches over
// loopback): no other host can reach a coordinator at such an address.
bool IsThisHostOnly(absl::string_view host);

// The loopback address of `host`'s family: "::1" for the IPv6 loopback
// literal, else "127.0.0.1".
std::string LoopbackLike(absl::string_view host);

// Host names compared as DNS does: case-insensitive, a final dot ignored;
// never equal when empty.
bool SameHostName(absl::string_view a, absl::string_view b);

// Whether a coordinator at `host` runs on this host: loopback, one of this
// host's addresses, its hostname or FQDN, or a name that resolves to one of
// those addresses (the only case that asks sys.resolve).
bool IsLocalCoordinator(absl::string_view host, const SystemInfo& sys);

// This host's name as peers on other hosts can dial it: the FQDN from
// /etc/hosts, else the canonical name of the hostname (what torchrun's
// socket.getfqdn() gives), else the hostname; empty when none is a valid,
// non-loopback host name.
std::string OwnReachableName(const SystemInfo& sys);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_ADDRESSES_H_

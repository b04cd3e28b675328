// The DNS check: do the names this node needs (the master, the members it
// talks to) resolve now, within a deadline?
//
// Names are resolved with c-ares, the resolver gRPC already links into the
// binary, never with getaddrinfo(3): in a static binary glibc's resolver
// loads the NSS modules nsswitch.conf names and aborts where a module is
// one the static libc lacks (cmd/main.cc, ForceAresResolver), and a
// getaddrinfo call cannot be cancelled. c-ares reads /etc/hosts,
// resolv.conf and nsswitch.conf's `hosts:` order itself, sends every query
// at once, and is abandoned at the deadline (ares_destroy), leaving no
// thread behind. CheckDns still runs the resolver through a BoundedRunner,
// so that its bound holds for any Resolver.
//
// Thread-safe: the c-ares resolver opens one channel per call.
#ifndef TRAINLET_PREFLIGHT_DNS_H_
#define TRAINLET_PREFLIGHT_DNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "preflight/bounded.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::preflight {

// What one name resolved to.
struct NameAnswer {
  std::string name;
  std::vector<std::string> addrs;  // numeric, deduplicated; empty when it did not resolve.
  std::string error;               // why not ("Domain name not found", "timed out after 2s").
};

// Resolves names. Seam for tests (testing/fake_resolver.h).
class Resolver {
 public:
  virtual ~Resolver() = default;
  // One answer per name, in order, within `timeout`: a name still
  // unanswered then has error "timed out after ...". Thread-safe.
  virtual std::vector<NameAnswer> Resolve(const std::vector<std::string>& names,
                                          absl::Duration timeout) = 0;
};

struct AresOptions {
  // "host:port,..." of the DNS servers to ask; empty: resolv.conf's.
  std::string servers;
  // c-ares's lookup order, "fb" (files, then DNS), "b" (DNS only); empty:
  // from resolv.conf/nsswitch.conf, as c-ares reads them.
  std::string lookups;
};
std::shared_ptr<Resolver> MakeAresResolver(AresOptions options = {});

// Names checked per call; further names are not resolved (the reason says
// how many), so that a large job's agents do not flood the cluster DNS.
inline constexpr int kMaxDnsNames = 32;

// Resolves `names` (duplicates and empty ones dropped) within `timeout`:
// PASS when every name resolves, FAIL naming those that do not (value:
// how many, threshold 0), SKIPPED with no names or no thread to run the
// resolver on. A resolver that does not answer in time fails the names
// (what the job would see), and until it answers, later calls on the same
// runner fail at once without asking it again.
v1::CheckResult CheckDns(const std::vector<std::string>& names, std::shared_ptr<Resolver> resolver,
                         BoundedRunner& runner, absl::Duration timeout = absl::Seconds(2));

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_DNS_H_

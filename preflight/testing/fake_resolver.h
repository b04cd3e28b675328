// A Resolver for tests: names resolve to what the test says, fail with the
// error it says, or hang until Release() (a resolver that never answers).
// Thread-safe; it may outlive the test's wait, as a real hung resolver
// would (hold it in a shared_ptr).
#ifndef TRAINLET_PREFLIGHT_TESTING_FAKE_RESOLVER_H_
#define TRAINLET_PREFLIGHT_TESTING_FAKE_RESOLVER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "preflight/dns.h"

namespace trainlet::preflight::testing {

class FakeResolver : public Resolver {
 public:
  void Add(const std::string& name, std::vector<std::string> addrs);
  // A name that never answers: Resolve blocks until Release().
  void Hang(const std::string& name);
  void Release() { release_.Notify(); }
  // Names asked so far, in order, over every call.
  std::vector<std::string> asked() const;

  // Known names get their addresses; unknown ones "Domain name not found".
  // Honours `timeout` for names it knows; a hanging name ignores it.
  std::vector<NameAnswer> Resolve(const std::vector<std::string>& names,
                                  absl::Duration timeout) override;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> known_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> hang_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
  absl::Notification release_;
};

}  // namespace trainlet::preflight::testing

#endif  // TRAINLET_PREFLIGHT_TESTING_FAKE_RESOLVER_H_

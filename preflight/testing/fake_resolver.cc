#include "preflight/testing/fake_resolver.h"

namespace trainlet::preflight::testing {

void FakeResolver::Add(const std::string& name, std::vector<std::string> addrs) {
  absl::MutexLock lock(&mu_);
  known_[name] = std::move(addrs);
}

void FakeResolver::Hang(const std::string& name) {
  absl::MutexLock lock(&mu_);
  hang_.insert(name);
}

std::vector<std::string> FakeResolver::asked() const {
  absl::MutexLock lock(&mu_);
  return asked_;
}

std::vector<NameAnswer> FakeResolver::Resolve(const std::vector<std::string>& names,
                                              absl::Duration timeout) {
  std::vector<NameAnswer> out;
  bool hang = false;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : names) {
      asked_.push_back(name);
      NameAnswer a;
      a.name = name;
      if (hang_.count(name) > 0) hang = true;
      auto it = known_.find(name);
      if (it != known_.end()) {
        a.addrs = it->second;
      } else {
        a.error = "Domain name not found";
      }
      out.push_back(std::move(a));
    }
  }
  if (hang) release_.WaitForNotification();
  return out;
}

}  // namespace trainlet::preflight::testing

#include "mpi/testing/fake_ssh_prober.h"

#include <algorithm>
#include <utility>

namespace trainlet::mpi::testing {

void FakeSshProber::Script(const std::string& node_id, std::vector<ProbeResult> results) {
  absl::MutexLock lock(&mu_);
  scripts_[node_id] = std::move(results);
}

void FakeSshProber::OnProbe(std::function<void(const ProbeTarget&)> hook) {
  absl::MutexLock lock(&mu_);
  hook_ = std::move(hook);
}

ProbeResult FakeSshProber::Probe(const ProbeTarget& target, absl::Duration timeout) {
  std::function<void(const ProbeTarget&)> hook;
  ProbeResult result;
  {
    absl::MutexLock lock(&mu_);
    hook = hook_;
    timeouts_.push_back(timeout);
    max_concurrent_ = std::max(max_concurrent_, ++in_flight_);
    const int n = probes_[target.node_id]++;
    auto it = scripts_.find(target.node_id);
    if (it != scripts_.end() && !it->second.empty())
      result = it->second[std::min<size_t>(n, it->second.size() - 1)];
  }
  if (hook) hook(target);
  if (clock_ != nullptr) clock_->Advance(probe_takes_);
  absl::MutexLock lock(&mu_);
  --in_flight_;
  return result;
}

int FakeSshProber::probes(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = probes_.find(node_id);
  return it == probes_.end() ? 0 : it->second;
}

int FakeSshProber::total_probes() const {
  absl::MutexLock lock(&mu_);
  int total = 0;
  for (const auto& [id, n] : probes_) total += n;
  return total;
}

int FakeSshProber::max_concurrent() const {
  absl::MutexLock lock(&mu_);
  return max_concurrent_;
}

std::vector<absl::Duration> FakeSshProber::timeouts() const {
  absl::MutexLock lock(&mu_);
  return timeouts_;
}

}  // namespace trainlet::mpi::testing

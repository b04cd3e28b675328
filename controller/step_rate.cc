#include "controller/step_rate.h"

namespace trainlet::controller {

double StepRateTracker::Update(const std::string& node_key, int64_t step, int64_t written_unix_ms) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(node_key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_nodes_ && !entries_.empty()) {
      auto oldest = entries_.begin();
      for (auto e = entries_.begin(); e != entries_.end(); ++e) {
        if (e->second.touched < oldest->second.touched) oldest = e;
      }
      entries_.erase(oldest);
    }
    it = entries_.emplace(node_key, Entry{}).first;
    it->second.step = step;
    it->second.written_unix_ms = written_unix_ms;
  }
  Entry& e = it->second;
  e.touched = ++clock_;
  if (step < 0) {
    e.rate = -1;
  } else if (step < e.step) {
    e.rate = -1;  // went back: a restart from a checkpoint.
  } else if (written_unix_ms > e.written_unix_ms && e.step >= 0) {
    e.rate = static_cast<double>(step - e.step) * 1000.0 /
             static_cast<double>(written_unix_ms - e.written_unix_ms);
  }
  if (written_unix_ms != e.written_unix_ms || step != e.step) {
    e.step = step;
    e.written_unix_ms = written_unix_ms;
  }
  return e.rate;
}

void StepRateTracker::Forget(const std::string& node_key) {
  absl::MutexLock lock(&mu_);
  entries_.erase(node_key);
}

size_t StepRateTracker::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace trainlet::controller

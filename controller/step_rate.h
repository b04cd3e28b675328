// Steps per second of each node's progress, for ProgressView::steps_per_
// second: a report carries only the latest step and its age, so the rate
// needs the step before it. The adapter that builds a ControllerSnapshot
// feeds every node's progress (as of each snapshot or each report) and gets
// the rate back.
//
// The rate is (step - previous step) / (time written - previous time
// written), over two distinct progress lines; a line seen again keeps the
// last rate; a step that goes back (a restart from a checkpoint) starts
// over. Memory: at most `max_nodes` entries; beyond that the least recently
// updated is dropped.
//
// Threading: thread-safe (one mutex).
#ifndef TRAINLET_CONTROLLER_STEP_RATE_H_
#define TRAINLET_CONTROLLER_STEP_RATE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainlet::controller {

class StepRateTracker {
 public:
  explicit StepRateTracker(size_t max_nodes = 16384) : max_nodes_(max_nodes) {}

  // `node_key` names the node (job, node id and incarnation, say);
  // `written_unix_ms` is when the worker wrote the line (the report's
  // sent time minus the progress age). Returns steps per second, -1 while
  // unknown.
  double Update(const std::string& node_key, int64_t step, int64_t written_unix_ms);

  // Drops a node (forgotten by the core).
  void Forget(const std::string& node_key);

  size_t size() const;

 private:
  struct Entry {
    int64_t step = -1;
    int64_t written_unix_ms = 0;
    double rate = -1;
    uint64_t touched = 0;
  };
  const size_t max_nodes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_STEP_RATE_H_

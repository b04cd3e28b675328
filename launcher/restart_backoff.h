// RestartBackoff: how long the Supervisor waits before restarting a helper
// that exited (RestartPolicy kOnFailure/kAlways). The delay starts at
// `initial`, doubles after each exit up to `max`, and goes back to `initial`
// once the helper had stayed up for `reset_after`, so a helper that crashes
// at once is not restarted in a tight loop, while one that ran for hours
// and then failed comes back quickly. Pure logic; not thread-safe.
#ifndef TRAINLET_LAUNCHER_RESTART_BACKOFF_H_
#define TRAINLET_LAUNCHER_RESTART_BACKOFF_H_

#include <algorithm>

#include "absl/time/time.h"

namespace trainlet {
namespace launcher {

class RestartBackoff {
 public:
  struct Options {
    absl::Duration initial = absl::Seconds(1);
    absl::Duration max = absl::Seconds(30);
    absl::Duration reset_after = absl::Seconds(60);
  };

  explicit RestartBackoff(const Options& options) : options_(options), next_(options.initial) {}

  // The delay before the next start, given how long the exited run lasted.
  absl::Duration NextDelay(absl::Duration ran_for) {
    if (ran_for >= options_.reset_after) next_ = options_.initial;
    const absl::Duration delay = next_;
    next_ = std::min(next_ * 2, options_.max);
    return delay;
  }

 private:
  const Options options_;
  absl::Duration next_;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_RESTART_BACKOFF_H_

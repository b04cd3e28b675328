// Runs blocking work that may never return (a write to a hung NFS mount, a
// resolver that does not answer) on a thread of its own, and waits for it
// only until a timeout. Work still running then is left to finish by itself;
// it holds only what it shares with the runner (shared_ptrs), so the caller
// may go. Such a thread cannot be cancelled, so a runner starts no second
// piece of work while one is still out: the next call answers at once that
// the earlier one is blocked, instead of piling up threads stuck in the
// same mount.
//
// Thread-safe. One runner per kind of work (the path check, the resolver).
#ifndef TRAINLET_PREFLIGHT_BOUNDED_H_
#define TRAINLET_PREFLIGHT_BOUNDED_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"

namespace trainlet::preflight {

class BoundedRunner {
 public:
  BoundedRunner();
  BoundedRunner(const BoundedRunner&) = delete;
  BoundedRunner& operator=(const BoundedRunner&) = delete;

  // Why work gave no answer.
  struct NoAnswer {
    enum Kind {
      kTimedOut,  // "no answer within 2s"
      kBusy,      // "an earlier check is still blocked, for 40s": this one did not start.
      kNoThread,  // no thread could be started: nothing was tried.
    };
    Kind kind = kTimedOut;
    std::string text;
  };

  // Runs `work` and returns its answer; nullopt with *why set when it did
  // not answer within `timeout`, when an earlier call's work is still
  // running, or when no thread could be started. `work` must own or share
  // everything it touches: it may outlive this call and this runner.
  template <typename T>
  std::optional<T> Run(std::function<T()> work, absl::Duration timeout, NoAnswer* why) {
    auto answer = std::make_shared<std::optional<T>>();
    // The answer is written before the work is marked done (under the
    // runner's mutex) and read only after: no race with a late thread.
    if (!RunErased([answer, work = std::move(work)] { *answer = work(); }, timeout, why)) {
      return std::nullopt;
    }
    return std::move(*answer);
  }

  // Whether work is still out (for tests and the log).
  bool busy() const;

 private:
  struct Shared;
  bool RunErased(std::function<void()> work, absl::Duration timeout, NoAnswer* why);
  std::shared_ptr<Shared> shared_;
};

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_BOUNDED_H_

#include "preflight/bounded.h"

#include <system_error>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"

namespace trainlet::preflight {

struct BoundedRunner::Shared {
  absl::Mutex mu;
  // The call whose work is out; 0 when none. Calls are numbered so that a
  // late thread marks only its own call done.
  uint64_t out ABSL_GUARDED_BY(mu) = 0;
  uint64_t last ABSL_GUARDED_BY(mu) = 0;
  absl::Time out_since ABSL_GUARDED_BY(mu);
};

BoundedRunner::BoundedRunner() : shared_(std::make_shared<Shared>()) {}

bool BoundedRunner::busy() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->out != 0;
}

bool BoundedRunner::RunErased(std::function<void()> work, absl::Duration timeout, NoAnswer* why) {
  Clock* clock = Clock::Monotonic();
  uint64_t call = 0;
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->out != 0) {
      why->kind = NoAnswer::kBusy;
      why->text = absl::StrCat("an earlier check is still blocked, for ",
                               absl::FormatDuration(absl::Trunc(clock->Now() - shared_->out_since,
                                                                absl::Milliseconds(1))));
      return false;
    }
    call = ++shared_->last;
    shared_->out = call;
    shared_->out_since = clock->Now();
  }
  try {
    std::thread([shared = shared_, call, work = std::move(work)] {
      work();
      absl::MutexLock lock(&shared->mu);
      if (shared->out == call) shared->out = 0;
    }).detach();
  } catch (const std::system_error& e) {
    absl::MutexLock lock(&shared_->mu);
    shared_->out = 0;
    why->kind = NoAnswer::kNoThread;
    why->text = absl::StrCat("no thread to run it: ", e.what());
    return false;
  }
  absl::MutexLock lock(&shared_->mu);
  auto done = [this, call]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) { return shared_->out != call; };
  shared_->mu.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (shared_->out == call) {
    why->kind = NoAnswer::kTimedOut;
    why->text = absl::StrCat("no answer within ", absl::FormatDuration(timeout));
    return false;
  }
  return true;
}

}  // namespace trainlet::preflight

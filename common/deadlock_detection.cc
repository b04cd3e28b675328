#include "common/deadlock_detection.h"

namespace trainlet {

BuildFlavor ThisBuild() {
  BuildFlavor f;
#ifdef NDEBUG
  f.ndebug = true;
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  f.sanitized = true;
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(undefined_behavior_sanitizer)
  f.sanitized = true;
#endif
#endif
#ifdef TRAINLET_SANITIZED
  f.sanitized = true;
#endif
  return f;
}

absl::OnDeadlockCycle DeadlockDetectionFor(BuildFlavor flavor) {
  return flavor.ndebug && !flavor.sanitized ? absl::OnDeadlockCycle::kIgnore
                                            : absl::OnDeadlockCycle::kAbort;
}

absl::OnDeadlockCycle ConfigureDeadlockDetection() {
  const absl::OnDeadlockCycle mode = DeadlockDetectionFor(ThisBuild());
  absl::SetMutexDeadlockDetectionMode(mode);
  return mode;
}

}  // namespace trainlet

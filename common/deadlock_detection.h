// absl::Mutex deadlock detection, chosen per build at process start.
//
// Debian's Abseil is built without NDEBUG, so absl::Mutex records every
// nested lock in a global lock graph (synchronization_internal::GraphCycles)
// and checks it for cycles: about 10% of the coordinator's CPU at 3,000 agents
// (issue 13). The trainlet binary turns that off in release builds (NDEBUG,
// no sanitizer) and asks for it (abort on a potential deadlock) in debug and
// sanitizer builds. Unit tests never call ConfigureDeadlockDetection, so they
// keep Abseil's default, which is on in Debian's build.
//
// Threading: ConfigureDeadlockDetection runs once in main, before any
// thread or mutex exists; the pure functions are thread-safe.
#ifndef TRAINLET_COMMON_DEADLOCK_DETECTION_H_
#define TRAINLET_COMMON_DEADLOCK_DETECTION_H_

#include "absl/synchronization/mutex.h"

namespace trainlet {

struct BuildFlavor {
  bool ndebug = false;     // NDEBUG was defined.
  bool sanitized = false;  // built with ASan, TSan, MSan or UBSan.
};

// The flavor this translation unit was compiled with.
BuildFlavor ThisBuild();

// kIgnore for a release build (NDEBUG, no sanitizer); kAbort otherwise.
absl::OnDeadlockCycle DeadlockDetectionFor(BuildFlavor flavor);

// Applies DeadlockDetectionFor(ThisBuild()) and returns it.
absl::OnDeadlockCycle ConfigureDeadlockDetection();

}  // namespace trainlet

#endif  // TRAINLET_COMMON_DEADLOCK_DETECTION_H_

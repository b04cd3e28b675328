#include "common/descriptors.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "absl/strings/str_cat.h"

namespace trainlet {
namespace {

// The soft limit before RaiseDescriptorLimit; -1 until it ran. A plain
// atomic so that a forked child can read it without locks.
std::atomic<long long> g_original_soft{-1};

int Clamp(rlim_t v) {
  if (v == RLIM_INFINITY || v > static_cast<rlim_t>(INT_MAX)) return INT_MAX;
  return static_cast<int>(v);
}

}  // namespace

int RaiseDescriptorLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  long long expected = -1;
  g_original_soft.compare_exchange_strong(expected, static_cast<long long>(rl.rlim_cur));
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0 && rl.rlim_max == RLIM_INFINITY) {
      // The kernel caps descriptors at fs.nr_open (1,048,576 by default);
      // "unlimited" is refused, so ask for that much instead.
      raised.rlim_cur = 1 << 20;
      setrlimit(RLIMIT_NOFILE, &raised);
    }
  }
  return DescriptorLimit();
}

int DescriptorLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  return Clamp(rl.rlim_cur);
}

int OriginalDescriptorLimit() {
  const long long v = g_original_soft.load();
  return v < 0 ? DescriptorLimit() : Clamp(static_cast<rlim_t>(v));
}

void RestoreDescriptorLimitInChild() {
  const long long v = g_original_soft.load();
  if (v < 0) return;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rl.rlim_cur = static_cast<rlim_t>(v);
  setrlimit(RLIMIT_NOFILE, &rl);
}

void CloseDescriptorsFrom(int first) {
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0) == 0) return;
  struct rlimit limit;
  int last = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < 65536) {
    last = static_cast<int>(limit.rlim_cur);
  }
  for (int fd = first; fd < last; ++fd) close(fd);
}

int DescriptorsForCoordinator(int max_nodes) { return kBaseDescriptors + std::max(0, max_nodes); }

int DescriptorsForAgent(int local_workers, int hosted_nodes) {
  return kBaseDescriptors + kDescriptorsPerWorker * std::max(0, local_workers) +
         std::max(0, hosted_nodes);
}

absl::Status CheckDescriptorBudget(int needed, absl::string_view breakdown) {
  const int limit = RaiseDescriptorLimit();
  if (limit >= needed) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the open-file limit is ", limit, " descriptors (ulimit -n, hard limit included), but ",
      needed, " are needed", breakdown.empty() ? "" : absl::StrCat(" (", breakdown, ")"),
      "; raise it: `ulimit -n ", needed,
      "` in the shell that starts trainlet, `docker run --ulimit nofile=", needed, ":", needed,
      "`, or the container runtime's default nofile limit"));
}

}  // namespace trainlet

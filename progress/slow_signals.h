// The slow-node signals of this node's local workers (docs/slow-nodes.md):
// every interval the coordinator asks for (Assignment.
// slow_signals_interval_ms), one v1::SlowSignals summing up how the workers
// ran in it, for the next Report.
//
//   StartRound(pids, interval, now) --> base sample taken at the first Poll
//        |
//        v   every `interval`:  Poll(now) samples again and answers the
//   sampling ---------------->  summary of [previous sample, now]
//        |
//   EndRound() --> idle (Poll answers nothing, NextDeadline is never)
//
// What a sample reads, per worker and its descendant processes (bounded:
// kMaxProcessesPerWorker processes, kMaxThreadsPerProcess threads,
// kMaxFdsPerProcess descriptors, kMaxSockets sockets): every thread's
// /proc/PID/task/TID/schedstat (time on a CPU, time runnable on a run
// queue), each process's /proc/PID/fd links (its sockets' inodes), the
// workers' cgroup cpu.stat (cpu_sample.h), and one sock_diag dump of the
// pod's TCP connections (tcp_diag.h); the GPUs' clocks come from their own
// thread (gpu_sample.h). Progress comes from the agent's
// progress files (OnStep). Counters are compared per thread and per
// connection, so a thread or a connection that ends in an interval does not
// make a sum go back. A signal that cannot be read is left 0 (its cause is
// logged once, at DEBUG); nothing here is fatal to the agent.
//
// SlowSignalsSampler is the agent's seam (AgentSeams::slow); ProcSlowSampler
// the real one. Thread-compatible: the agent's loop thread uses it.
#ifndef TRAINLET_PROGRESS_SLOW_SIGNALS_H_
#define TRAINLET_PROGRESS_SLOW_SIGNALS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "progress/gpu_sample.h"
#include "progress/tcp_diag.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

inline constexpr size_t kMaxProcessesPerWorker = 64;
inline constexpr size_t kMaxThreadsPerProcess = 1024;
inline constexpr size_t kMaxFdsPerProcess = 4096;
inline constexpr size_t kMaxSockets = 4096;
// A connection "sent" in an interval when this many bytes were acked in it:
// below, its delivery rate says more about the application than the path.
inline constexpr int64_t kDeliveryRateMinBytes = 64 * 1024;

class SlowSignalsSampler {
 public:
  virtual ~SlowSignalsSampler() = default;
  // A round's workers started: `workers[local_rank]` is each one's pid (<= 0:
  // none). Sampling starts at the next Poll; the first summary covers the
  // `interval` after it. Forgets the earlier round's processes and steps.
  virtual void StartRound(const std::vector<pid_t>& workers, absl::Duration interval,
                          absl::Time now) = 0;
  // The round's workers stop: nothing more until the next StartRound.
  virtual void EndRound() = 0;
  // A local worker's progress line named step `step` (docs/progress.md).
  virtual void OnStep(int local_rank, int64_t step, absl::Time now) = 0;
  // When Poll next has work (InfiniteFuture: not sampling).
  virtual absl::Time NextDeadline() const = 0;
  // Samples when due; the summary of the interval that just ended, if one
  // did. seq counts up from 1 over the sampler's life (the agent's
  // incarnation).
  virtual std::optional<v1::SlowSignals> Poll(absl::Time now) = 0;
};

// One thread's schedstat counters.
struct ThreadCpu {
  absl::Duration ran;
  absl::Duration waited;
};

// What one sample read.
struct SlowSample {
  absl::Time at;
  // Per local rank: each thread of the worker's processes, by tid; null
  // when the worker itself could not be read (gone).
  std::vector<std::optional<absl::flat_hash_map<pid_t, ThreadCpu>>> workers;
  // Throttled time so far, by cpu.stat file.
  std::map<std::string, absl::Duration> throttled;
  absl::flat_hash_map<uint64_t, TcpSocketInfo> tcp;  // by socket inode
};

// One line for a log: "seq=3 interval=10000ms workers=8 cpu ran=412 waited=3
// throttled=0 (permille) tcp=32 rtt=210us retrans=0 acked=1048576
// rate=52428800B/s step=1200 step_time=812000us gpus=8 sm_clock=1000
// (permille) reasons=0x0".
std::string SlowSignalsText(const v1::SlowSignals& s);

// The summary of [before, after] (seq, step and step_time_us left for the
// caller). Exposed for tests.
v1::SlowSignals CompareSlowSamples(const SlowSample& before, const SlowSample& after);

class ProcSlowSampler : public SlowSignalsSampler {
 public:
  struct Options {
    std::string proc_root = "/proc";
    std::string cgroup_root = "/sys/fs/cgroup";
    TcpInfoSource* tcp = nullptr;  // null: no TCP signals.
    // null: no GPU signals (no NVML). Resumed by StartRound, paused by
    // EndRound; each summary takes its latest reading if at most two
    // intervals old.
    GpuClockSampler* gpu = nullptr;
  };
  explicit ProcSlowSampler(Options options);

  void StartRound(const std::vector<pid_t>& workers, absl::Duration interval,
                  absl::Time now) override;
  void EndRound() override;
  void OnStep(int local_rank, int64_t step, absl::Time now) override;
  absl::Time NextDeadline() const override;
  std::optional<v1::SlowSignals> Poll(absl::Time now) override;

  // Reads everything once (the benchmark times this).
  SlowSample Take(absl::Time now);

 private:
  struct Step {
    int64_t latest = -1;
    absl::Time latest_at;  // when `latest` was first seen
    int64_t base = -1;     // the step step_time_us counts from
    absl::Time base_at;
  };
  // The counters of every thread of the worker `pid` and of its descendant
  // processes (bounded), and their sockets' inodes (`inodes` may be null);
  // false when the worker itself is gone.
  bool AddWorker(pid_t pid, absl::flat_hash_map<pid_t, ThreadCpu>* threads,
                 absl::flat_hash_set<uint64_t>* inodes);
  void AddSockets(pid_t pid, absl::flat_hash_set<uint64_t>* inodes);
  // Progress: the lowest latest step and the mean time per step since the
  // last boundary where each worker advanced.
  void FillProgress(v1::SlowSignals* out);
  // GPU: the GPU sampler's latest reading, if recent.
  void FillGpu(absl::Time now, v1::SlowSignals* out);
  // Logs `what` at DEBUG the first time `key` is seen.
  void NoteOnce(const std::string& key, const std::string& what);

  const Options options_;
  std::vector<pid_t> workers_;
  std::vector<std::string> cpu_stats_;  // the workers' distinct cgroup cpu.stat files
  absl::Duration interval_;
  absl::Time next_ = absl::InfiniteFuture();
  std::optional<SlowSample> base_;
  std::map<int, Step> steps_;
  uint64_t seq_ = 0;
  absl::flat_hash_set<std::string> noted_;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_SLOW_SIGNALS_H_

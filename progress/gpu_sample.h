// The GPU part of the slow-node signals (docs/slow-nodes.md): the local
// GPUs' SM clocks and clock event reasons, read through NVML on a thread of
// its own, because a read (the NVML reader is a child process in the static
// build, and nvmlInit on a node without persistence mode initialises every
// GPU) takes tens of milliseconds to seconds, which the agent's loop must
// not wait for. The slow-node sampler (slow_signals.h) takes the latest
// reading when it sums up an interval.
//
//   (made) --Resume(interval)--> reading: a read at once, then one every
//      ^                           |       `interval`, the latest kept
//      |                        Pause()
//      |                           v
//      +---- destructor ------- paused: the thread waits (a read in flight
//            (stops, joins)             finishes; its reading is kept)
//
// Threading: the public methods are thread-safe; the thread starts at the
// first Resume and is joined by the destructor, which waits for a read in
// flight (bounded by NvmlOptions::reader_timeout where the read goes
// through the reader).
#ifndef TRAINLET_PROGRESS_GPU_SAMPLE_H_
#define TRAINLET_PROGRESS_GPU_SAMPLE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::agent {

// The clock event reasons that mean a GPU is held below what it could run
// at (nvml.h; topology.proto, Gpu.clock_reasons): SW power cap 0x4, HW
// slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80. Idle,
// application clocks, sync boost and display clocks are settings, not
// slowdowns.
inline constexpr uint64_t kGpuSlowdownReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;
// nvml.h's GPU idle reason: nothing runs on the GPU, its clock drops.
inline constexpr uint64_t kGpuIdleReason = 0x1;
// GPUs counted per node: as many as the probe reads.
inline constexpr int kMaxGpus = 256;

// One reading of the node's GPUs.
struct GpuClockReading {
  absl::Time at;
  int gpus = 0;  // GPUs read
  // The lowest sm_clock_mhz / sm_clock_max_mhz among the GPUs where both
  // are known and that are not idle (kGpuIdleReason), per mille, capped at
  // 1000; 0: no such GPU.
  int32_t sm_clock_permille = 0;
  // The OR of kGpuSlowdownReasons bits over the GPUs whose reasons are known.
  uint64_t slowdown_reasons = 0;
};

// Sums up one read (exposed for tests).
GpuClockReading SummariseGpuClocks(const std::vector<v1::Gpu>& gpus, absl::Time at);

class GpuClockSampler {
 public:
  // Reads the node's GPUs (topology::ReadNvml in production); called on the
  // sampler's thread only, one call at a time.
  using ReadFn = std::function<void(std::vector<v1::Gpu>*)>;
  // `clock` times the readings: the same clock as the `now` Latest gets.
  GpuClockSampler(ReadFn read, Clock* clock);
  ~GpuClockSampler();
  GpuClockSampler(const GpuClockSampler&) = delete;
  GpuClockSampler& operator=(const GpuClockSampler&) = delete;

  // Reads every `interval` (at least 1 ms), the first at once; starts the
  // thread the first time. Forgets the earlier reading.
  void Resume(absl::Duration interval);
  // No more reads until the next Resume. Never waits for a read in flight.
  void Pause();
  // Reads once, on the caller's thread (the thread's step; tests call it).
  void SampleOnce();
  // The latest reading if it was taken at most `max_age` before `now`.
  std::optional<GpuClockReading> Latest(absl::Time now, absl::Duration max_age) const;
  // Reads so far (tests, the benchmark).
  int64_t reads() const;

 private:
  GpuClockReading Read();  // one read_, summed up; no lock held
  void Loop();

  const ReadFn read_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // Resume() counts; stale reads are dropped.
  absl::Duration interval_ ABSL_GUARDED_BY(mu_);
  std::optional<GpuClockReading> latest_ ABSL_GUARDED_BY(mu_);
  int64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // started by the first Resume, joined by the destructor
};

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_GPU_SAMPLE_H_

// Slow nodes (docs/slow-nodes.md, "How the coordinator judges"): the node
// whose workers the others wait for, from every member's SlowSignals. Per
// node the judge keeps the summaries of the last window (kSlowWindow of
// them, one per interval) and, per cause, estimates how much slower the job
// runs because of it:
//   cpu:      runnable-but-waiting share s (waited + throttled) against the
//             job's median m: (1-m)/(1-s) - 1;
//   network:  the others' median delivery rate over its lowest: median/rate - 1
//             (RTT and retransmits go into the evidence);
//   progress: its time per step over the others' median, minus 1;
//   gpu:      the others' median lowest SM clock share over its own: median/
//             clock - 1, counted only while its GPUs report a slowdown
//             reason (NVML's clock event reasons).
// A cause counts for a summary when the estimate is over the threshold and
// the node's figure is beyond the job's spread (kSpreadMads median absolute
// deviations from the others' median).
//
//                  a summary over            every summary of the
//   +---------+    the threshold  +---------+  window, one cause  +-------+
//   | HEALTHY | ----------------> | SUSPECT | ------------------> | SLOW  |
//   +---------+ <---------------- +---------+                     | named |
//        ^       none over                                        +-------+
//        |                                                            |
//        |              a whole window below the threshold            |
//        +------------------------- CLEARED <-------------------------+
//
// SUSPECT is not stored: it is a window with some summaries over. SLOW and
// CLEARED are the events Judge returns (each once); a node cleared is
// HEALTHY again and may be named again. Fewer than kMinSlowCompare nodes
// with a full, fresh window: nobody is judged (nothing to compare with).
//
// Cost: Add is O(1); Judge runs at most once per interval (Due) and is
// O(n log n) in the nodes (a sort per cause and summary); memory is
// kSlowWindow summaries per node. Not thread-safe: the coordinator's lock
// guards it. Time comes in as arguments (no clock of its own).
#ifndef TRAINLET_RENDEZVOUS_SLOW_NODES_H_
#define TRAINLET_RENDEZVOUS_SLOW_NODES_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// Summaries per window (Assignment.slow_signals_interval_ms = window / 3).
inline constexpr int kSlowWindow = 3;
// Nodes with a full window needed before any is judged.
inline constexpr int kMinSlowCompare = 3;
// "Beyond the job's own spread": this many median absolute deviations.
inline constexpr double kSpreadMads = 3;
// Nodes named at once, at most (SlowNodes.lines, CoordinatorView.slow_nodes).
inline constexpr int kMaxSlowNodesNamed = 16;
// An evidence line, at most.
inline constexpr size_t kMaxSlowEvidence = 1024;
// SlowSignals bounds (rendezvous.proto).
inline constexpr int64_t kMaxSlowIntervalMs = 600000;
inline constexpr int kMaxSlowWorkers = 1024;
inline constexpr int kMaxSlowTcpConnections = 65536;
inline constexpr int64_t kMaxSlowFigure = int64_t{1} << 53;
inline constexpr int kMaxSlowGpus = 256;
// The clock event reasons an agent sends (progress/gpu_sample.h's
// kGpuSlowdownReasons): SW power cap, HW slowdown, SW thermal, HW thermal,
// HW power brake.
inline constexpr uint64_t kSlowGpuReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

// OK when `s` is within rendezvous.proto's SlowSignals bounds; else
// INVALID_ARGUMENT naming the field ("slow.interval_ms: ...").
absl::Status ValidateSlowSignals(const v1::SlowSignals& s);

// The interval the agents sample at for `window` (a third of it, >= 1 ms).
absl::Duration SlowSignalsInterval(absl::Duration window);

// A node named slow, or cleared.
struct SlowNode {
  std::string node_id;
  std::string cause;     // "cpu", "network", "progress" or "gpu".
  std::string evidence;  // one line ("node pod-3 is slow (cpu): ..."), escaped, bounded.
  absl::Time since;      // when the window that showed it began.
  int slowdown_percent = 0;
};

struct SlowNodeEvent {
  enum Kind { kNamed, kCleared };
  Kind kind = kNamed;
  SlowNode node;  // for kCleared: the node as it was named, evidence = why cleared.
};

class SlowNodeJudge {
 public:
  struct Options {
    double threshold = 0.10;                    // --slow-node-threshold, a fraction.
    absl::Duration window = absl::Seconds(30);  // --slow-node-window.
  };
  explicit SlowNodeJudge(Options options);

  // A validated summary from `node_id`, arrived at `now`. A seq not above
  // the node's last one is a repeat: ignored (returns false).
  bool Add(const std::string& node_id, const v1::SlowSignals& s, absl::Time now);
  // The node left the round: forgotten (named or not).
  void Remove(const std::string& node_id);
  // A new round: everything forgotten.
  void Clear();

  // Whether a judgement is due: an interval since the last one.
  bool Due(absl::Time now) const { return now >= next_judgement_; }
  // Judges every node (when Due; else returns nothing): the nodes named and
  // cleared by this judgement.
  std::vector<SlowNodeEvent> Judge(absl::Time now);

  // The nodes named now, by node id.
  const std::map<std::string, SlowNode>& named() const { return named_; }
  absl::Duration interval() const { return interval_; }
  // The round's interval (Assignment.slow_signals_interval_ms), which a
  // large round stretches beyond window / 3; with Clear(), at a round's close.
  void SetInterval(absl::Duration interval) { interval_ = interval; }
  size_t nodes() const { return nodes_.size(); }

 private:
  // One summary, as the judge uses it.
  struct Summary {
    absl::Time at;          // arrival
    absl::Duration covers;  // interval_ms
    double cpu_share = 0;   // max(waited, throttled) / interval, at most kMaxCpuShare
    double waited = 0;      // shares, for the evidence
    double throttled = 0;
    double rate = 0;   // tcp_delivery_rate, bytes/s; 0: none measured
    double bytes = 0;  // tcp_bytes_acked: what it sent in the interval
    double rtt_us = 0;
    double retransmits = 0;
    double step_time_us = 0;   // 0: unknown
    double gpu_clock = 0;      // the lowest SM clock share; 0: unknown
    uint64_t gpu_reasons = 0;  // slowdown reasons seen (kSlowGpuReasons)
  };
  struct Node {
    uint64_t last_seq = 0;
    // Its first summary of the round covers its workers' start-up (imports,
    // loading data: CPU-bound on every node, by different amounts): not judged.
    bool started = false;
    std::array<Summary, kSlowWindow> window;  // ring, window[(next + k) % 3] oldest first
    int count = 0;                            // summaries held (<= kSlowWindow)
    int next = 0;                             // where the next goes
    const Summary& Back(int k) const {        // k = 0: the latest
      return window[(next + kSlowWindow - 1 - k) % kSlowWindow];
    }
  };

  const Options options_;
  absl::Duration interval_;
  absl::Time next_judgement_ = absl::InfinitePast();
  std::map<std::string, Node> nodes_;
  std::map<std::string, SlowNode> named_;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_SLOW_NODES_H_

#include "rendezvous/slow_nodes.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::rendezvous {
namespace {

enum Cause { kCpu = 0, kNetwork = 1, kProgress = 2, kGpu = 3, kCauses = 4 };
constexpr const char* kCauseNames[kCauses] = {"cpu", "network", "progress", "gpu"};
// The CPU share is counted at most this: (1-m)/(1-s) grows without bound
// near 1, and the figures can reach 1 without meaning "never ran" (waited is
// summed over a worker's threads, throttled over the cgroup's CPUs): the
// estimate stops at 10x (900% slower).
constexpr double kMaxCpuShare = 0.9;

absl::Status OutOfRange(absl::string_view field, int64_t lo, int64_t hi, int64_t got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("slow.%s: expected %d..%d, got %d", field, lo, hi, got));
}

// The median of sorted[0..n) without the element at `skip` (n >= 2).
double MedianWithout(const std::vector<double>& sorted, size_t skip) {
  const size_t m = sorted.size() - 1;
  auto at = [&](size_t r) { return sorted[r < skip ? r : r + 1]; };
  return (at((m - 1) / 2) + at(m / 2)) / 2;
}

double Median(std::vector<double> v) {  // v non-empty
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

std::string Percent(double share) { return absl::StrFormat("%.0f%%", share * 100); }

std::string Millis(double us) {
  return us >= 10000 ? absl::StrFormat("%.0f ms", us / 1000)
                     : absl::StrFormat("%.1f ms", us / 1000);
}

// "HW slowdown, HW thermal" for the slowdown bits of NVML's clock event
// reasons (kSlowGpuReasons).
std::string GpuReasonNames(uint64_t reasons) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {{0x8, "HW slowdown"},
                                                                {0x40, "HW thermal"},
                                                                {0x80, "HW power brake"},
                                                                {0x20, "SW thermal"},
                                                                {0x4, "SW power cap"}};
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if (reasons & bit) absl::StrAppend(&out, out.empty() ? "" : ", ", name);
  }
  return out;
}

std::string Clock(absl::Time t) { return absl::FormatTime("%H:%M:%S", t, absl::UTCTimeZone()); }

}  // namespace

absl::Status ValidateSlowSignals(const v1::SlowSignals& s) {
  if (s.seq() < 1) return absl::InvalidArgumentError("slow.seq: expected 1 or more, got 0");
  if (s.interval_ms() < 1 || s.interval_ms() > kMaxSlowIntervalMs) {
    return OutOfRange("interval_ms", 1, kMaxSlowIntervalMs, s.interval_ms());
  }
  if (s.workers() < 0 || s.workers() > kMaxSlowWorkers) {
    return OutOfRange("workers", 0, kMaxSlowWorkers, s.workers());
  }
  const std::pair<const char*, int32_t> permille[] = {
      {"cpu_ran_permille", s.cpu_ran_permille()},
      {"cpu_waited_permille", s.cpu_waited_permille()},
      {"cpu_throttled_permille", s.cpu_throttled_permille()}};
  for (const auto& [field, v] : permille) {
    if (v < 0 || v > 1000) return OutOfRange(field, 0, 1000, v);
  }
  if (s.tcp_connections() < 0 || s.tcp_connections() > kMaxSlowTcpConnections) {
    return OutOfRange("tcp_connections", 0, kMaxSlowTcpConnections, s.tcp_connections());
  }
  const std::pair<const char*, int64_t> figures[] = {{"tcp_rtt_us", s.tcp_rtt_us()},
                                                     {"tcp_retransmits", s.tcp_retransmits()},
                                                     {"tcp_bytes_acked", s.tcp_bytes_acked()},
                                                     {"tcp_delivery_rate", s.tcp_delivery_rate()},
                                                     {"step_time_us", s.step_time_us()}};
  for (const auto& [field, v] : figures) {
    if (v < 0 || v > kMaxSlowFigure) return OutOfRange(field, 0, kMaxSlowFigure, v);
  }
  if (s.step() < -1 || s.step() > kMaxSlowFigure) {
    return OutOfRange("step", -1, kMaxSlowFigure, s.step());
  }
  if (s.gpus() < 0 || s.gpus() > kMaxSlowGpus) return OutOfRange("gpus", 0, kMaxSlowGpus, s.gpus());
  if (s.gpu_sm_clock_permille() < 0 || s.gpu_sm_clock_permille() > 1000) {
    return OutOfRange("gpu_sm_clock_permille", 0, 1000, s.gpu_sm_clock_permille());
  }
  if ((s.gpu_clock_reasons() & ~kSlowGpuReasons) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slow.gpu_clock_reasons: expected only the bits of 0x%x, got 0x%x",
                        kSlowGpuReasons, s.gpu_clock_reasons()));
  }
  return absl::OkStatus();
}

absl::Duration SlowSignalsInterval(absl::Duration window) {
  return std::max(absl::Milliseconds(1), absl::Floor(window / kSlowWindow, absl::Milliseconds(1)));
}

SlowNodeJudge::SlowNodeJudge(Options options)
    : options_(options), interval_(SlowSignalsInterval(options.window)) {}

bool SlowNodeJudge::Add(const std::string& node_id, const v1::SlowSignals& s, absl::Time now) {
  Node& n = nodes_[node_id];
  if (s.seq() <= n.last_seq) return false;
  n.last_seq = s.seq();
  if (!n.started) {
    n.started = true;
    return true;
  }
  Summary& x = n.window[n.next];
  n.next = (n.next + 1) % kSlowWindow;
  n.count = std::min(n.count + 1, kSlowWindow);
  x = Summary{};
  x.at = now;
  x.covers = absl::Milliseconds(s.interval_ms());
  if (s.workers() == 0) {
    // No worker alive through the interval: nothing to hold against the
    // others (a gap in its window, so it is not judged until it has three).
    n.count = 0;
    return true;
  }
  x.waited = s.cpu_waited_permille() / 1000.0;
  x.throttled = s.cpu_throttled_permille() / 1000.0;
  // A throttled worker's runnable threads wait on the run queue too
  // (schedstat counts the throttled time as waiting): the larger of the
  // two, not their sum, which would count it twice.
  x.cpu_share = std::min(kMaxCpuShare, std::max(x.waited, x.throttled));
  x.rate = static_cast<double>(s.tcp_delivery_rate());
  x.bytes = static_cast<double>(s.tcp_bytes_acked());
  x.rtt_us = static_cast<double>(s.tcp_rtt_us());
  x.retransmits = static_cast<double>(s.tcp_retransmits());
  x.step_time_us = static_cast<double>(s.step_time_us());
  x.gpu_clock = s.gpu_sm_clock_permille() / 1000.0;
  x.gpu_reasons = s.gpu_clock_reasons();
  return true;
}

void SlowNodeJudge::Remove(const std::string& node_id) {
  nodes_.erase(node_id);
  named_.erase(node_id);
}

void SlowNodeJudge::Clear() {
  nodes_.clear();
  named_.clear();
  next_judgement_ = absl::InfinitePast();
}

std::vector<SlowNodeEvent> SlowNodeJudge::Judge(absl::Time now) {
  std::vector<SlowNodeEvent> events;
  if (!Due(now)) return events;
  next_judgement_ = now + interval_;
  // Nodes with a full window whose latest summary is fresh (a node that
  // stopped reporting is not held against the others, nor they against it).
  std::vector<std::pair<const std::string*, const Node*>> p;
  for (const auto& [id, n] : nodes_) {
    if (n.count == kSlowWindow && now - n.Back(0).at <= 2 * interval_) p.push_back({&id, &n});
  }
  const size_t np = p.size();
  if (np < static_cast<size_t>(kMinSlowCompare)) return events;

  // Per node, cause and summary: the estimated slowdown, the others'
  // median, and whether it counts (over the threshold, beyond the spread).
  struct Mark {
    double slowdown = 0;
    double others = 0;
    bool over = false;
  };
  std::vector<std::array<std::array<Mark, kSlowWindow>, kCauses>> marks(np);
  std::vector<double> values, sorted, deviations;
  std::vector<size_t> who, position;
  std::vector<std::pair<double, size_t>> order;
  for (int c = 0; c < kCauses; ++c) {
    for (int k = 0; k < kSlowWindow; ++k) {
      values.clear();
      who.clear();
      for (size_t i = 0; i < np; ++i) {
        const Summary& s = p[i].second->Back(k);
        const double v = c == kCpu       ? s.cpu_share
                         : c == kNetwork ? s.rate
                         : c == kGpu     ? s.gpu_clock
                                         : s.step_time_us;
        if (c != kCpu && v <= 0) continue;  // not measured on that node
        values.push_back(v);
        who.push_back(i);
      }
      const size_t n = values.size();
      if (n < static_cast<size_t>(kMinSlowCompare)) continue;
      order.clear();
      for (size_t j = 0; j < n; ++j) order.push_back({values[j], j});
      std::sort(order.begin(), order.end());
      sorted.resize(n);
      position.resize(n);
      for (size_t r = 0; r < n; ++r) {
        sorted[r] = order[r].first;
        position[order[r].second] = r;
      }
      const double median = (sorted[(n - 1) / 2] + sorted[n / 2]) / 2;
      deviations.clear();
      for (double v : values) deviations.push_back(std::abs(v - median));
      const double spread = kSpreadMads * Median(deviations);
      for (size_t j = 0; j < n; ++j) {
        const double v = values[j];
        const double others = MedianWithout(sorted, position[j]);
        double slowdown = 0;
        bool beyond = false;
        switch (c) {
          case kCpu:
            slowdown = (1 - std::min(others, kMaxCpuShare)) / (1 - v) - 1;
            beyond = v - others > spread;
            break;
          case kNetwork: {
            // What its slower rate cost: the time its interval's bytes took
            // beyond what they would have at the others' rate, against the
            // rest of the interval. A node 25% slower on links the job
            // hardly uses (GB/s links, MB/s of traffic) costs ~nothing.
            const Summary& sm = p[who[j]].second->Back(k);
            const double secs = absl::ToDoubleSeconds(sm.covers);
            const double extra = sm.bytes / v - sm.bytes / others;
            slowdown = extra <= 0 ? 0 : extra / std::max(secs - extra, secs / 10);
            beyond = others - v > spread;
            break;
          }
          case kGpu:
            // A GPU below the others' clock counts only while NVML says
            // it is held down (heat, power, the board): an idle GPU's
            // clock is low too, and says nothing.
            slowdown = others / v - 1;
            beyond = others - v > spread && p[who[j]].second->Back(k).gpu_reasons != 0;
            break;
          default:
            slowdown = others > 0 ? v / others - 1 : 0;
            beyond = v - others > spread;
            break;
        }
        marks[who[j]][c][k] = {slowdown, others, slowdown > options_.threshold && beyond};
      }
      if (c == kNetwork) {
        // Both ends of a slow link can read slow (the node that sends into
        // a throttled one waits on it): the slower end is the likelier
        // cause, and only it counts in this summary.
        size_t lowest = n;
        for (size_t j = 0; j < n; ++j) {
          if (marks[who[j]][c][k].over && (lowest == n || values[j] < values[lowest])) lowest = j;
        }
        for (size_t j = 0; j < n; ++j) {
          if (j != lowest) marks[who[j]][c][k].over = false;
        }
      }
    }
  }

  for (size_t i = 0; i < np; ++i) {
    const std::string& id = *p[i].first;
    const Node& node = *p[i].second;
    auto named = named_.find(id);
    if (named != named_.end()) {
      int c = 0;
      while (c < kCauses - 1 && named->second.cause != kCauseNames[c]) ++c;
      const bool still =
          std::any_of(marks[i][c].begin(), marks[i][c].end(), [](const Mark& m) { return m.over; });
      if (still) continue;
      SlowNodeEvent e{SlowNodeEvent::kCleared, named->second};
      e.node.evidence =
          SafeForLog(absl::StrCat("node ", id, " is no longer slow (", named->second.cause,
                                  "): a whole window below the threshold, since ", Clock(now)),
                     kMaxSlowEvidence);
      events.push_back(std::move(e));
      named_.erase(named);
      continue;
    }
    // The cause every summary of the window shows; the worst if several.
    // The network's: the latest and all but one, since the kernel's
    // delivery rate is its last sample, which on a rate-limited link read
    // tens of times too high in some intervals (docs/slow-nodes.md); its
    // estimate needs the time the node's bytes really cost, so a healthy
    // node's noise stays under the threshold.
    int cause = -1;
    double worst = 0;
    for (int c = 0; c < kCauses; ++c) {
      double sum = 0;
      int over = 0;
      for (const Mark& m : marks[i][c]) {
        over += m.over;
        sum += m.slowdown;
      }
      const bool shows =
          c == kNetwork ? marks[i][c][0].over && over >= kSlowWindow - 1 : over == kSlowWindow;
      if (shows && sum / kSlowWindow > worst) {
        cause = c;
        worst = sum / kSlowWindow;
      }
    }
    if (cause < 0 || static_cast<int>(named_.size()) >= kMaxSlowNodesNamed) continue;
    SlowNode s;
    s.node_id = id;
    s.cause = kCauseNames[cause];
    s.since = node.Back(kSlowWindow - 1).at - node.Back(kSlowWindow - 1).covers;
    s.slowdown_percent = static_cast<int>(std::lround(std::min(worst, 1000.0) * 100));
    double waited = 0, throttled = 0, rate = 0, rtt = 0, retransmits = 0, step = 0, others = 0;
    double gpu_clock = 0;
    uint64_t gpu_reasons = 0;
    absl::Duration covers;
    for (int k = 0; k < kSlowWindow; ++k) {
      const Summary& x = node.Back(k);
      waited += x.waited / kSlowWindow;
      throttled += x.throttled / kSlowWindow;
      rate += x.rate / kSlowWindow;
      rtt = std::max(rtt, x.rtt_us);
      retransmits += x.retransmits;
      step += x.step_time_us / kSlowWindow;
      gpu_clock += x.gpu_clock / kSlowWindow;
      gpu_reasons |= x.gpu_reasons;
      others += marks[i][cause][k].others / kSlowWindow;
      covers += x.covers;
    }
    const std::string last =
        absl::FormatDuration(absl::Floor(covers + absl::Milliseconds(500), absl::Seconds(1)));
    std::string what;
    switch (cause) {
      case kCpu:
        what = absl::StrCat(
            "its workers waited for a CPU ", Percent(waited),
            throttled > 0 ? absl::StrCat(" and were throttled ", Percent(throttled)) : "",
            " of the last ", last, ", the job's median ", Percent(others));
        break;
      case kNetwork:
        what = absl::StrCat("its connections delivered ", preflight::HumanRate(rate),
                            " at the lowest, the others' median ", preflight::HumanRate(others),
                            rtt > 0 ? absl::StrCat(", RTT up to ", Millis(rtt)) : "", ", ",
                            static_cast<int64_t>(retransmits), " retransmits over the last ", last);
        break;
      case kGpu:
        what = absl::StrCat("its slowest GPU ran at ", Percent(gpu_clock),
                            " of its maximum SM clock (", GpuReasonNames(gpu_reasons),
                            "), the others' median ", Percent(others), ", over the last ", last);
        break;
      default:
        what = absl::StrCat("its workers took ", Millis(step), " a step, the others' median ",
                            Millis(others), ", over the last ", last);
        break;
    }
    s.evidence = SafeForLog(
        absl::StrCat("node ", id, " is slow (", s.cause, "): ", what, "; the job runs about ",
                     s.slowdown_percent, "% slower for it; since ", Clock(s.since)),
        kMaxSlowEvidence);
    events.push_back({SlowNodeEvent::kNamed, s});
    named_.emplace(id, std::move(s));
  }
  return events;
}

}  // namespace trainlet::rendezvous

#include "progress/slow_signals.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/small_file.h"
#include "progress/cpu_sample.h"

namespace trainlet::agent {
namespace {

constexpr size_t kMaxFileBytes = 4096;
// The proto's bounds (rendezvous.proto, SlowSignals).
constexpr int64_t kMaxCount = int64_t{1} << 53;
constexpr int64_t kMaxIntervalMs = 600000;
// Cause keys logged once: at most this many.
constexpr size_t kMaxNoted = 64;

int64_t Bounded(int64_t v) { return std::clamp<int64_t>(v, 0, kMaxCount); }

int32_t Permille(absl::Duration part, absl::Duration interval) {
  const double p = 1000.0 * absl::FDivDuration(part, interval);
  return static_cast<int32_t>(std::clamp(std::lround(p), 0L, 1000L));
}

// Calls `fn(name)` for each entry of `dir` that is a number (a pid, a tid,
// an fd), at most `max` of them; false when the directory cannot be read.
template <typename Fn>
bool ForEachNumbered(const std::string& dir, size_t max, Fn fn) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  size_t seen = 0;
  while (seen < max) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    uint64_t n = 0;
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || !absl::SimpleAtoi(e->d_name, &n)) continue;
    ++seen;
    fn(e->d_name, n);
  }
  closedir(d);
  return true;
}

// The counter's growth from `before` (absent: born in the interval, all of
// it counts); a counter that went back is another thread or connection with
// a reused id: all of it counts too.
int64_t Grown(int64_t after, const int64_t* before) {
  if (after < 0) return 0;
  if (before == nullptr || *before < 0 || after < *before) return after;
  return after - *before;
}

}  // namespace

v1::SlowSignals CompareSlowSamples(const SlowSample& before, const SlowSample& after) {
  v1::SlowSignals out;
  const absl::Duration interval = after.at - before.at;
  out.set_interval_ms(std::clamp<int64_t>(absl::ToInt64Milliseconds(interval), 1, kMaxIntervalMs));
  out.set_step(-1);
  if (interval <= absl::ZeroDuration()) return out;

  // CPU: the worker that waited most, its threads summed.
  int32_t workers = 0;
  absl::Duration worst_ran, worst_waited = -absl::InfiniteDuration();
  const size_t n = std::min(before.workers.size(), after.workers.size());
  for (size_t w = 0; w < n; ++w) {
    if (!before.workers[w].has_value() || !after.workers[w].has_value()) continue;
    ++workers;
    absl::Duration ran, waited;
    for (const auto& [tid, a] : *after.workers[w]) {
      auto b = before.workers[w]->find(tid);
      if (b != before.workers[w]->end() && a.ran >= b->second.ran && a.waited >= b->second.waited) {
        ran += a.ran - b->second.ran;
        waited += a.waited - b->second.waited;
      } else {  // a thread born in the interval
        ran += a.ran;
        waited += a.waited;
      }
    }
    if (waited > worst_waited || (waited == worst_waited && ran > worst_ran)) {
      worst_waited = waited;
      worst_ran = ran;
    }
  }
  out.set_workers(workers);
  if (workers > 0) {
    out.set_cpu_ran_permille(Permille(worst_ran, interval));
    out.set_cpu_waited_permille(Permille(worst_waited, interval));
  }
  // Throttled: the most throttled of the workers' cgroups.
  absl::Duration throttled;
  for (const auto& [path, a] : after.throttled) {
    auto b = before.throttled.find(path);
    if (b != before.throttled.end() && a >= b->second)
      throttled = std::max(throttled, a - b->second);
  }
  out.set_cpu_throttled_permille(Permille(throttled, interval));

  // TCP.
  int64_t retransmits = 0, acked = 0, rtt = 0, rate = -1;
  for (const auto& [inode, a] : after.tcp) {
    auto b = before.tcp.find(inode);
    const TcpSocketInfo* was = b != before.tcp.end() ? &b->second : nullptr;
    retransmits += Grown(a.total_retrans, was != nullptr ? &was->total_retrans : nullptr);
    const int64_t sent = Grown(a.bytes_acked, was != nullptr ? &was->bytes_acked : nullptr);
    acked += sent;
    if (sent > 0) rtt = std::max(rtt, a.rtt_us);
    // A connection held back by its receiver for a quarter of its busy time
    // or more measures the receiver, not this node: its rate is left out
    // (a healthy node sending into a CPU-starved one is not the slow one).
    const int64_t busy = Grown(a.busy_us, was != nullptr ? &was->busy_us : nullptr);
    const int64_t held = Grown(a.rwnd_limited_us, was != nullptr ? &was->rwnd_limited_us : nullptr);
    const bool receiver_limited = busy > 0 && held * 4 >= busy;
    if (sent >= kDeliveryRateMinBytes && a.delivery_rate > 0 && !receiver_limited) {
      rate = rate < 0 ? a.delivery_rate : std::min(rate, a.delivery_rate);
    }
  }
  out.set_tcp_connections(static_cast<int32_t>(std::min<size_t>(after.tcp.size(), 65536)));
  out.set_tcp_rtt_us(Bounded(rtt));
  out.set_tcp_retransmits(Bounded(retransmits));
  out.set_tcp_bytes_acked(Bounded(acked));
  out.set_tcp_delivery_rate(Bounded(rate));
  return out;
}

std::string SlowSignalsText(const v1::SlowSignals& s) {
  return absl::StrCat(
      "seq=", s.seq(), " interval=", s.interval_ms(), "ms workers=", s.workers(),
      " cpu ran=", s.cpu_ran_permille(), " waited=", s.cpu_waited_permille(),
      " throttled=", s.cpu_throttled_permille(), " (permille) tcp=", s.tcp_connections(),
      " rtt=", s.tcp_rtt_us(), "us retrans=", s.tcp_retransmits(), " acked=", s.tcp_bytes_acked(),
      " rate=", s.tcp_delivery_rate(), "B/s step=", s.step(), " step_time=", s.step_time_us(),
      "us gpus=", s.gpus(), " sm_clock=", s.gpu_sm_clock_permille(), " (permille) reasons=0x",
      absl::Hex(s.gpu_clock_reasons()));
}

ProcSlowSampler::ProcSlowSampler(Options options) : options_(std::move(options)) {}

void ProcSlowSampler::StartRound(const std::vector<pid_t>& workers, absl::Duration interval,
                                 absl::Time now) {
  workers_ = workers;
  interval_ = std::max(interval, absl::Milliseconds(1));
  next_ = now;
  base_.reset();
  steps_.clear();
  if (options_.gpu != nullptr) options_.gpu->Resume(interval_);
  // The workers' cgroups: one lookup a round (a pod's workers share one).
  cpu_stats_.clear();
  const CpuSampleSources sources{options_.proc_root, options_.cgroup_root};
  for (pid_t pid : workers_) {
    if (pid <= 0) continue;
    std::string path = FindCpuStat(sources, absl::StrCat(pid));
    if (path.empty()) {
      NoteOnce("cgroup", absl::StrCat("slow-node signals: no cgroup cpu.stat with throttled time "
                                      "for worker pid ",
                                      pid, "; throttling reads as 0"));
    } else if (std::find(cpu_stats_.begin(), cpu_stats_.end(), path) == cpu_stats_.end()) {
      cpu_stats_.push_back(std::move(path));
    }
  }
}

void ProcSlowSampler::EndRound() {
  if (options_.gpu != nullptr) options_.gpu->Pause();
  workers_.clear();
  next_ = absl::InfiniteFuture();
  base_.reset();
  steps_.clear();
}

void ProcSlowSampler::OnStep(int local_rank, int64_t step, absl::Time now) {
  if (next_ == absl::InfiniteFuture() || step < 0) return;
  Step& s = steps_[local_rank];
  if (step == s.latest) return;
  s.latest = step;
  s.latest_at = now;
}

absl::Time ProcSlowSampler::NextDeadline() const { return next_; }

std::optional<v1::SlowSignals> ProcSlowSampler::Poll(absl::Time now) {
  if (now < next_) return std::nullopt;
  SlowSample sample = Take(now);
  // The next boundary one interval on; a late loop does not make a burst.
  next_ = std::max(next_ + interval_, now + interval_ / 2);
  std::optional<v1::SlowSignals> out;
  if (base_.has_value()) {
    out = CompareSlowSamples(*base_, sample);
    FillProgress(&*out);
    FillGpu(now, &*out);
    out->set_seq(++seq_);
  }
  base_ = std::move(sample);
  return out;
}

void ProcSlowSampler::FillProgress(v1::SlowSignals* out) {
  int64_t lowest = -1;
  absl::Duration per_step_sum;
  int advanced = 0;
  for (auto& [rank, s] : steps_) {
    if (s.latest < 0) continue;
    lowest = lowest < 0 ? s.latest : std::min(lowest, s.latest);
    if (s.base >= 0 && s.latest > s.base) {
      per_step_sum += (s.latest_at - s.base_at) / (s.latest - s.base);
      ++advanced;
    }
    // The next interval counts from here, unless it did not advance (a
    // step longer than an interval is timed over several).
    if (s.base < 0 || s.latest != s.base) {
      s.base = s.latest;
      s.base_at = s.latest_at;
    }
  }
  out->set_step(lowest);
  out->set_step_time_us(advanced > 0 ? Bounded(absl::ToInt64Microseconds(per_step_sum / advanced))
                                     : 0);
}

void ProcSlowSampler::FillGpu(absl::Time now, v1::SlowSignals* out) {
  if (options_.gpu == nullptr) return;
  // A reading older than two intervals (a read hung in the driver) is none.
  const std::optional<GpuClockReading> g = options_.gpu->Latest(now, 2 * interval_);
  if (!g.has_value()) return;
  out->set_gpus(g->gpus);
  out->set_gpu_sm_clock_permille(g->sm_clock_permille);
  out->set_gpu_clock_reasons(g->slowdown_reasons);
}

SlowSample ProcSlowSampler::Take(absl::Time now) {
  SlowSample s;
  s.at = now;
  absl::flat_hash_set<uint64_t> inodes;
  for (pid_t pid : workers_) {
    std::optional<absl::flat_hash_map<pid_t, ThreadCpu>>& threads = s.workers.emplace_back();
    if (pid <= 0) continue;
    threads.emplace();
    if (!AddWorker(pid, &*threads, options_.tcp != nullptr ? &inodes : nullptr)) threads.reset();
  }
  for (const std::string& path : cpu_stats_) {
    if (std::optional<CgroupCpu> c = ParseCpuStat(ReadSmallFile(path, kMaxFileBytes))) {
      s.throttled[path] = c->throttled;
    } else {
      NoteOnce(path, absl::StrCat("slow-node signals: ", path, " unreadable"));
    }
  }
  if (options_.tcp != nullptr && !inodes.empty()) {
    absl::StatusOr<std::vector<TcpSocketInfo>> dump = options_.tcp->Dump(inodes, kMaxSockets);
    if (!dump.ok()) {
      NoteOnce("tcp", absl::StrCat("slow-node signals: no TCP signals: ", dump.status().message()));
    } else {
      for (TcpSocketInfo& t : *dump) s.tcp[t.inode] = t;
    }
  }
  return s;
}

bool ProcSlowSampler::AddWorker(pid_t pid, absl::flat_hash_map<pid_t, ThreadCpu>* threads,
                                absl::flat_hash_set<uint64_t>* inodes) {
  std::vector<pid_t> seen;
  std::deque<pid_t> queue = {pid};
  // (Bounded twice: processes kept, and processes looked at.)
  for (size_t looked = 0; !queue.empty() && seen.size() < kMaxProcessesPerWorker &&
                          looked < 4 * kMaxProcessesPerWorker;
       ++looked) {
    const pid_t p = queue.front();
    queue.pop_front();
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    const std::string task = absl::StrCat(options_.proc_root, "/", p, "/task");
    // Each thread's counters, and its children (/proc/PID/task/TID/children,
    // Linux 3.5+): the processes it forked that still run.
    const bool readable =
        ForEachNumbered(task, kMaxThreadsPerProcess, [&](const char* name, uint64_t tid) {
          const std::string dir = absl::StrCat(task, "/", name);
          std::optional<ProcessCpu> c = ParseSchedstat(
              ReadSmallFile(dir + "/schedstat", kMaxFileBytes), static_cast<pid_t>(tid));
          if (c.has_value()) (*threads)[c->pid] = ThreadCpu{c->ran, c->waited};
          const std::string children = ReadSmallFile(dir + "/children", kMaxFileBytes);
          for (absl::string_view child : absl::StrSplit(children, ' ', absl::SkipWhitespace())) {
            pid_t n = 0;
            if (absl::SimpleAtoi(child, &n) && n > 0 && queue.size() < kMaxProcessesPerWorker) {
              queue.push_back(n);
            }
          }
        });
    if (!readable) {
      if (p == pid) return false;  // the worker is gone
      continue;                    // a child gone meanwhile
    }
    seen.push_back(p);
    if (inodes != nullptr) AddSockets(p, inodes);
  }
  return true;
}

void ProcSlowSampler::AddSockets(pid_t pid, absl::flat_hash_set<uint64_t>* inodes) {
  const std::string dir = absl::StrCat(options_.proc_root, "/", pid, "/fd");
  const bool listed = ForEachNumbered(dir, kMaxFdsPerProcess, [&](const char* name, uint64_t) {
    if (inodes->size() >= kMaxSockets) return;
    char link[64];
    const ssize_t n = readlink(absl::StrCat(dir, "/", name).c_str(), link, sizeof(link));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(link)) return;
    absl::string_view target(link, static_cast<size_t>(n));
    uint64_t inode = 0;
    if (absl::ConsumePrefix(&target, "socket:[") && absl::ConsumeSuffix(&target, "]") &&
        absl::SimpleAtoi(target, &inode)) {
      inodes->insert(inode);
    }
  });
  if (!listed) {
    NoteOnce("fd", absl::StrCat("slow-node signals: cannot list ", dir, ": ", strerror(errno),
                                "; the TCP signals miss its sockets"));
  }
}

void ProcSlowSampler::NoteOnce(const std::string& key, const std::string& what) {
  if (noted_.size() >= kMaxNoted || !noted_.insert(key).second) return;
  TLOG(kDebug) << what;
}

}  // namespace trainlet::agent

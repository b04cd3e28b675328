#include "progress/cpu_sample.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/small_file.h"

namespace trainlet::agent {
namespace {

constexpr size_t kMaxFileBytes = 4096;

bool ParseCount(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out) && *out >= 0;
}

}  // namespace

std::optional<ProcessCpu> ParseSchedstat(absl::string_view text, pid_t pid) {
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  int64_t ran = 0, waited = 0;
  if (f.size() < 2 || !ParseCount(f[0], &ran) || !ParseCount(f[1], &waited)) return std::nullopt;
  return ProcessCpu{pid, absl::Nanoseconds(ran), absl::Nanoseconds(waited)};
}

std::optional<CgroupCpu> ParseCpuStat(absl::string_view text) {
  CgroupCpu out;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
    int64_t v = 0;
    if (!ParseCount(kv.second, &v)) continue;
    if (kv.first == "throttled_time") {  // v1, ns
      out.throttled = absl::Nanoseconds(v);
      found = true;
    } else if (kv.first == "throttled_usec") {  // v2
      out.throttled = absl::Microseconds(v);
      found = true;
    } else if (kv.first == "nr_periods") {
      out.periods = v;
    } else if (kv.first == "nr_throttled") {
      out.throttled_periods = v;
    }
  }
  if (!found) return std::nullopt;
  return out;
}

std::string FindCpuStat(const CpuSampleSources& sources, absl::string_view process) {
  const std::string self =
      ReadSmallFile(absl::StrCat(sources.proc_root, "/", process, "/cgroup"), kMaxFileBytes);
  std::string v1, v2;
  for (absl::string_view line : absl::StrSplit(self, '\n', absl::SkipEmpty())) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3 || f[2].empty() || f[2][0] != '/') continue;
    if (f[0] == "0" && f[1].empty()) v2 = std::string(f[2]);
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "cpu") v1 = std::string(f[2]);
    }
  }
  std::vector<std::string> candidates;
  if (!v1.empty()) {
    candidates.push_back(
        absl::StrCat(sources.cgroup_root, "/cpu", v1 == "/" ? "" : v1, "/cpu.stat"));
    candidates.push_back(
        absl::StrCat(sources.cgroup_root, "/cpu,cpuacct", v1 == "/" ? "" : v1, "/cpu.stat"));
  }
  if (!v2.empty()) {
    candidates.push_back(absl::StrCat(sources.cgroup_root, v2 == "/" ? "" : v2, "/cpu.stat"));
  }
  // A container on cgroup v1 without a cgroup namespace (Kubernetes, Docker
  // on v1): /proc/PID/cgroup names the host's path, but the container has
  // its own cgroup mounted at the root of the hierarchy.
  if (!v1.empty() && v1 != "/") {
    candidates.push_back(absl::StrCat(sources.cgroup_root, "/cpu/cpu.stat"));
    candidates.push_back(absl::StrCat(sources.cgroup_root, "/cpu,cpuacct/cpu.stat"));
  }
  if (!v2.empty() && v2 != "/")
    candidates.push_back(absl::StrCat(sources.cgroup_root, "/cpu.stat"));
  for (const std::string& path : candidates) {
    if (ParseCpuStat(ReadSmallFile(path, kMaxFileBytes)).has_value()) return path;
  }
  return "";
}

CpuSample TakeCpuSample(const CpuSampleSources& sources, const std::string& cpu_stat,
                        const std::vector<pid_t>& pids, absl::Time now) {
  CpuSample s;
  s.at = now;
  for (pid_t pid : pids) {
    if (pid <= 0) continue;
    std::optional<ProcessCpu> p = ParseSchedstat(
        ReadSmallFile(absl::StrCat(sources.proc_root, "/", pid, "/schedstat"), kMaxFileBytes), pid);
    if (p.has_value()) s.processes.push_back(*p);
  }
  if (!cpu_stat.empty()) s.cgroup = ParseCpuStat(ReadSmallFile(cpu_stat, kMaxFileBytes));
  return s;
}

double CpuShares::max_waited() const {
  double m = 0;
  for (const Process& p : processes) m = std::max(m, p.waited);
  return m;
}

CpuShares Compare(const CpuSample& before, const CpuSample& after) {
  CpuShares out;
  out.interval = after.at - before.at;
  if (out.interval <= absl::ZeroDuration()) return out;
  const double secs = absl::ToDoubleSeconds(out.interval);
  for (const ProcessCpu& a : after.processes) {
    for (const ProcessCpu& b : before.processes) {
      // A counter that went back is another process with the pid reused.
      if (a.pid != b.pid || a.ran < b.ran || a.waited < b.waited) continue;
      out.processes.push_back({a.pid, absl::ToDoubleSeconds(a.ran - b.ran) / secs,
                               absl::ToDoubleSeconds(a.waited - b.waited) / secs});
    }
  }
  if (before.cgroup.has_value() && after.cgroup.has_value() &&
      after.cgroup->throttled >= before.cgroup->throttled) {
    out.throttled =
        absl::ToDoubleSeconds(after.cgroup->throttled - before.cgroup->throttled) / secs;
  }
  return out;
}

}  // namespace trainlet::agent

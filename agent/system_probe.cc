#include "agent/system_probe.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainlet::agent {
namespace {

std::string UnderRoot(const std::string& root, absl::string_view path) {
  absl::string_view r = root;
  while (absl::ConsumeSuffix(&r, "/")) {
  }
  return absl::StrCat(r, path);  // `path` starts with '/'.
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string FindFqdnInHosts(absl::string_view hosts_text, absl::string_view hostname) {
  if (hostname.empty()) return "";
  std::string prefix = absl::StrCat(hostname, ".");
  for (absl::string_view line : absl::StrSplit(hosts_text, '\n')) {
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.size() < 2) continue;
    bool lists_hostname = std::find(fields.begin() + 1, fields.end(), hostname) != fields.end();
    if (!lists_hostname) continue;
    for (size_t i = 1; i < fields.size(); ++i) {
      if (absl::StartsWith(fields[i], prefix) && fields[i].size() > prefix.size()) {
        return std::string(absl::StripSuffix(fields[i], "."));
      }
    }
  }
  return "";
}

std::optional<int> ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (fields.empty() || fields[0] == "max") return std::nullopt;
  int64_t quota = 0;
  int64_t period = 100000;  // The kernel's default when only the quota is given.
  if (!absl::SimpleAtoi(fields[0], &quota) || quota <= 0) return std::nullopt;
  if (fields.size() > 1 && (!absl::SimpleAtoi(fields[1], &period) || period <= 0)) {
    return std::nullopt;
  }
  int64_t cpus = (quota + period - 1) / period;
  return static_cast<int>(std::clamp<int64_t>(cpus, 1, INT_MAX));
}

std::optional<int> CgroupCpuLimit(const std::string& root) {
  // Candidate directories, leaf first: our own cgroup (from the v2 "0::" line
  // of /proc/self/cgroup) and each ancestor, then the mount root, which is
  // our cgroup when the container has its own cgroup namespace.
  std::vector<std::string> dirs;
  if (std::optional<std::string> self = ReadFile(UnderRoot(root, "/proc/self/cgroup"))) {
    for (absl::string_view line : absl::StrSplit(*self, '\n')) {
      if (!absl::ConsumePrefix(&line, "0::")) continue;
      std::string path(absl::StripAsciiWhitespace(line));
      while (!path.empty() && path != "/") {
        dirs.push_back(path);
        size_t slash = path.rfind('/');
        path = slash == std::string::npos ? "" : path.substr(0, slash);
      }
    }
  }
  dirs.push_back("");
  std::optional<int> limit;
  for (const std::string& dir : dirs) {
    std::optional<std::string> text =
        ReadFile(UnderRoot(root, "/sys/fs/cgroup" + dir + "/cpu.max"));
    if (!text.has_value()) continue;
    std::optional<int> cpus = ParseCpuMax(*text);
    if (cpus.has_value()) limit = limit.has_value() ? std::min(*limit, *cpus) : *cpus;
  }
  return limit;
}

int CountNvidiaDevices(const std::string& root) {
  DIR* dir = opendir(UnderRoot(root, "/dev").c_str());
  if (dir == nullptr) return 0;
  int count = 0;
  while (struct dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    if (!absl::ConsumePrefix(&name, "nvidia") || name.empty()) continue;
    if (std::all_of(name.begin(), name.end(),
                    [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
      ++count;
    }
  }
  closedir(dir);
  return count;
}

int AffinityCpuCount() {
  // Sized for machines beyond CPU_SETSIZE (1024) CPUs.
  for (int ncpus = 1024; ncpus <= (1 << 16); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) break;
    size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      return std::max(count, 1);
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

SystemInfo ProbeSystem(const std::string& root) {
  SystemInfo info;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) info.hostname = name;
  if (std::optional<std::string> hosts = ReadFile(UnderRoot(root, "/etc/hosts"))) {
    info.fqdn = FindFqdnInHosts(*hosts, info.hostname);
  }
  info.cpu_count = AffinityCpuCount();
  if (std::optional<int> limit = CgroupCpuLimit(root)) {
    info.cpu_count = std::max(1, std::min(info.cpu_count, *limit));
  }
  info.gpu_count = CountNvidiaDevices(root);
  return info;
}

}  // namespace trainlet::agent

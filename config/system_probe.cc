#include "config/system_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/net_interfaces.h"
#include "topology/sysfs.h"
#include "topology/visibility.h"
#include "trainlet/v1/topology.pb.h"

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

GpuVisibility VisibleGpus(int devices, const std::map<std::string, std::string>& env) {
  // The node probe's reading of the two variables (topology/visibility.h),
  // over `devices` GPUs known only by their ordinals.
  v1::NodeProbe probe;
  for (int i = 0; i < std::clamp(devices, 0, 1024); ++i) {
    v1::Gpu* gpu = probe.add_gpus();
    gpu->set_index(i);
    gpu->set_vendor_id("0x10de");
    gpu->set_visible(true);
  }
  topology::ApplyVisibility(env, &probe);
  GpuVisibility v;
  v.count = probe.visible_gpu_count();
  v.note = absl::StrReplaceAll(probe.visibility_note(),
                               {{"GPUs in this container's view", "/dev/nvidia* devices"}});
  return v;
}

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
  // Rounded up without overflow (quota + period may exceed int64).
  int64_t cpus = quota / period + (quota % period != 0 ? 1 : 0);
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
  return topology::CountNvidiaDevices(UnderRoot(root, "/dev"));
}

std::vector<int> AffinityCpus() {
  std::vector<int> cpus;
  // Sized for machines beyond CPU_SETSIZE (1024) CPUs.
  for (int ncpus = 1024; ncpus <= (1 << 16); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) break;
    size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      for (int c = 0; c < ncpus; ++c) {
        if (CPU_ISSET_S(c, size, set)) cpus.push_back(c);
      }
      CPU_FREE(set);
      return cpus;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  return cpus;
}

int AffinityCpuCount() {
  const size_t n = AffinityCpus().size();
  if (n > 0) return static_cast<int>(n);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::vector<std::string> LocalInterfaceAddresses() {
  std::vector<std::string> out;
  for (const InterfaceAddress& a : ListInterfaceAddresses()) {
    if (std::find(out.begin(), out.end(), a.addr) == out.end()) out.push_back(a.addr);
  }
  return out;
}

namespace {

std::optional<ResolvedHost> ResolveHostBlocking(const std::string& host) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_CANONNAME;
  struct addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return std::nullopt;
  ResolvedHost out;
  if (result != nullptr && result->ai_canonname != nullptr) {
    out.canonical_name = result->ai_canonname;
  }
  for (struct addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = nullptr;
    if (ai->ai_family == AF_INET) {
      addr = &reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr;
    } else if (ai->ai_family == AF_INET6) {
      addr = &reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr;
    } else {
      continue;
    }
    if (inet_ntop(ai->ai_family, addr, text, sizeof(text)) == nullptr) continue;
    if (std::find(out.addrs.begin(), out.addrs.end(), text) == out.addrs.end()) {
      out.addrs.push_back(text);
    }
  }
  freeaddrinfo(result);
  return out;
}

// One lookup's result, shared by the caller and the lookup thread (which may
// outlive the caller's wait).
struct PendingLookup {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  std::optional<ResolvedHost> result ABSL_GUARDED_BY(mu);
};

}  // namespace

std::optional<ResolvedHost> ResolveHostBounded(const std::string& host, absl::Duration timeout) {
  auto pending = std::make_shared<PendingLookup>();
  try {
    std::thread([pending, host] {
      std::optional<ResolvedHost> r = ResolveHostBlocking(host);
      absl::MutexLock lock(&pending->mu);
      pending->result = std::move(r);
      pending->done = true;
    }).detach();
  } catch (const std::system_error&) {
    return std::nullopt;  // No thread: treat the name as unresolved.
  }
  absl::MutexLock lock(&pending->mu);
  pending->mu.AwaitWithTimeout(absl::Condition(&pending->done), timeout);
  if (!pending->done) return std::nullopt;
  return pending->result;
}

namespace {
struct CachedAddresses {
  std::once_flag once;
  std::vector<std::string> addrs;
};
}  // namespace

SystemInfo ProbeSystem(const std::map<std::string, std::string>& env, const std::string& root) {
  SystemInfo info;
  info.root = root;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) info.hostname = name;
  if (std::optional<std::string> hosts = ReadFile(UnderRoot(root, "/etc/hosts"))) {
    info.fqdn = FindFqdnInHosts(*hosts, info.hostname);
  }
  info.allowed_cpus = AffinityCpus();
  info.cpu_count =
      info.allowed_cpus.empty() ? AffinityCpuCount() : static_cast<int>(info.allowed_cpus.size());
  if (std::optional<int> limit = CgroupCpuLimit(root)) {
    info.cpu_count = std::max(1, std::min(info.cpu_count, *limit));
  }
  info.gpu_devices = CountNvidiaDevices(root);
  GpuVisibility gpus = VisibleGpus(info.gpu_devices, env);
  info.gpu_count = gpus.count;
  info.gpu_note = std::move(gpus.note);
  info.local_addrs = [cached = std::make_shared<CachedAddresses>()] {
    std::call_once(cached->once, [&] { cached->addrs = LocalInterfaceAddresses(); });
    return cached->addrs;
  };
  info.resolve = [](const std::string& host) { return ResolveHostBounded(host, kResolveTimeout); };
  return info;
}

}  // namespace trainlet::agent

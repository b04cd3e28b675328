#include "agent/k8s_discovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/options.h"
#include "common/host_names.h"

namespace trainlet::agent {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

std::optional<Discovered> FromEnv(const std::map<std::string, std::string>& env,
                                  const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return Discovered{it->second, name};
}

std::string UnderRoot(absl::string_view root, absl::string_view path) {
  while (absl::ConsumeSuffix(&root, "/")) {
  }
  return absl::StrCat(root, path);
}

// A regular file's contents, or an error when it is not one or is larger
// than `max_bytes`.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError("cannot be opened");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError("is not a regular file");
  }
  std::string text;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      close(fd);
      return absl::OutOfRangeError(absl::StrCat("is larger than ", max_bytes, " bytes"));
    }
  }
  close(fd);
  if (n < 0) return absl::DataLossError("cannot be read");
  return text;
}

// The names of the *.host files in `dir`, sorted; at most kMaxVolcanoHostFiles.
std::vector<std::string> VolcanoHostFileNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (name.size() > 5 && name.size() <= 255 && absl::EndsWith(name, ".host") && name[0] != '.') {
      names.emplace_back(name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  if (names.size() > static_cast<size_t>(kMaxVolcanoHostFiles)) {
    names.resize(kMaxVolcanoHostFiles);
  }
  return names;
}

// "my-task" -> "MY_TASK", as the svc plugin spells VC_<TASK>_NUM.
std::string VolcanoEnvTaskName(absl::string_view task) {
  std::string out = absl::AsciiStrToUpper(task);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseVolcanoHostFile(absl::string_view text,
                                                              absl::string_view origin) {
  std::vector<std::string> hosts;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (!IsValidHost(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", line_number, ": \"", absl::CEscape(line.substr(0, 64)),
                       "\" is not a host name (Volcano's svc plugin writes one "
                       "<job>-<task>-<index>.<job> a line)"));
    }
    if (hosts.size() >= static_cast<size_t>(kMaxNodes)) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": more than ", kMaxNodes, " hosts"));
    }
    hosts.emplace_back(line);
  }
  return hosts;
}

std::optional<VolcanoPod> DiscoverVolcano(const std::map<std::string, std::string>& env,
                                          const SystemInfo& sys) {
  std::optional<Discovered> index = FromEnv(env, "VK_TASK_INDEX");
  if (!index.has_value()) index = FromEnv(env, "VC_TASK_INDEX");
  if (!index.has_value() || !AllDigits(index->text)) return std::nullopt;
  VolcanoPod pod;
  if (!absl::SimpleAtoi(index->text, &pod.index)) return std::nullopt;
  pod.index_origin = index->origin;
  // The svc plugin's hostname: <job>-<task>-<index>.
  const std::string suffix = absl::StrCat("-", pod.index);
  absl::string_view job_task = sys.hostname;
  if (!absl::ConsumeSuffix(&job_task, suffix) || job_task.empty() ||
      !absl::StrContains(job_task.substr(1), "-")) {
    return std::nullopt;
  }
  pod.job_task = std::string(job_task);
  pod.subdomain = SubdomainFromFqdn(sys.hostname, sys.fqdn);

  // The task's host file: the one whose line <index> is this pod.
  const std::string dir = UnderRoot(sys.root, kVolcanoHostDir);
  for (const std::string& name : VolcanoHostFileNames(dir)) {
    // The name goes into logs: escaped.
    const std::string origin = absl::StrCat(kVolcanoHostDir, "/", absl::CEscape(name));
    absl::StatusOr<std::string> text =
        ReadBoundedFile(absl::StrCat(dir, "/", name), kMaxVolcanoHostFileBytes);
    if (!text.ok()) {
      pod.notes.push_back(absl::StrCat("an unusable Volcano host file, skipped: ", origin, " ",
                                       text.status().message()));
      continue;
    }
    absl::StatusOr<std::vector<std::string>> hosts = ParseVolcanoHostFile(*text, origin);
    if (!hosts.ok()) {
      pod.notes.push_back(
          absl::StrCat("an unusable Volcano host file, skipped: ", hosts.status().message()));
      continue;
    }
    if (static_cast<size_t>(pod.index) >= hosts->size()) continue;
    absl::string_view mine = (*hosts)[pod.index];
    if (!absl::ConsumePrefix(&mine, sys.hostname)) continue;
    if (!mine.empty() && !absl::ConsumePrefix(&mine, ".")) continue;
    pod.task = std::string(absl::StripSuffix(name, ".host"));
    if (pod.subdomain.empty() && !mine.empty()) {
      pod.subdomain = std::string(mine.substr(0, mine.find('.')));
    }
    pod.hosts = *std::move(hosts);
    pod.hosts_origin = origin;
    return pod;
  }
  // No host file (no svc plugin): the task from the subdomain (the job name).
  absl::string_view task = job_task;
  if (!pod.subdomain.empty() && absl::ConsumePrefix(&task, absl::StrCat(pod.subdomain, "-")) &&
      !task.empty()) {
    pod.task = std::string(task);
  }
  return pod;
}

std::optional<JobSetHostname> ParseJobSetHostname(absl::string_view hostname) {
  size_t last = hostname.rfind('-');
  if (last == absl::string_view::npos || last == 0) return std::nullopt;
  size_t second = hostname.rfind('-', last - 1);
  if (second == absl::string_view::npos || second == 0) return std::nullopt;
  absl::string_view prefix = hostname.substr(0, second);
  absl::string_view job = hostname.substr(second + 1, last - second - 1);
  absl::string_view pod = hostname.substr(last + 1);
  // <jobset>-<rjob>: both parts non-empty.
  size_t dash = prefix.rfind('-');
  if (dash == absl::string_view::npos || dash == 0 || dash + 1 == prefix.size()) {
    return std::nullopt;
  }
  JobSetHostname out;
  if (!AllDigits(job) || !AllDigits(pod) || !absl::SimpleAtoi(job, &out.job_index) ||
      !absl::SimpleAtoi(pod, &out.pod_index)) {
    return std::nullopt;
  }
  out.prefix = std::string(prefix);
  return out;
}

std::string SubdomainFromFqdn(absl::string_view hostname, absl::string_view fqdn) {
  if (hostname.empty() || !absl::ConsumePrefix(&fqdn, hostname) ||
      !absl::ConsumePrefix(&fqdn, ".")) {
    return "";
  }
  std::vector<absl::string_view> labels = absl::StrSplit(fqdn, '.');
  if (labels.size() < 3 || labels[0].empty() || labels[1].empty() || labels[2] != "svc") {
    return "";
  }
  return std::string(labels[0]);
}

namespace {

void ApplyVolcano(const VolcanoPod& pod, const std::map<std::string, std::string>& env,
                  const SystemInfo& sys, KubernetesDiscovery* d) {
  for (const std::string& note : pod.notes) d->notes.push_back(note);
  const std::string hostname_origin = absl::StrCat("Volcano hostname ", sys.hostname);
  if (!d->node_rank.has_value()) {
    d->node_rank = Discovered{absl::StrCat(pod.index), pod.index_origin};
  }
  if (!pod.hosts.empty()) {
    if (!d->nnodes.has_value()) {
      d->nnodes = Discovered{absl::StrCat(pod.hosts.size()),
                             absl::StrCat(pod.hosts_origin, " (its line count)")};
    }
    if (!d->coordinator_host.has_value()) {
      d->coordinator_host =
          Discovered{pod.hosts[0], absl::StrCat(pod.hosts_origin, " (its first line)")};
    }
  } else {
    if (!d->nnodes.has_value() && !pod.task.empty()) {
      d->nnodes = FromEnv(env, absl::StrCat("VC_", VolcanoEnvTaskName(pod.task), "_NUM"));
    }
    if (!d->coordinator_host.has_value()) {
      std::string host = absl::StrCat(pod.job_task, "-0");
      if (!pod.subdomain.empty()) {
        absl::StrAppend(&host, ".", pod.subdomain);
        d->coordinator_host =
            Discovered{host, absl::StrCat(hostname_origin, " and FQDN ", sys.fqdn)};
      } else {
        d->coordinator_host = Discovered{host, hostname_origin};
      }
    }
  }
  d->job_id = Discovered{pod.job_task, hostname_origin};
}

}  // namespace

KubernetesDiscovery DiscoverKubernetes(const std::map<std::string, std::string>& env,
                                       const SystemInfo& sys) {
  KubernetesDiscovery d;
  d.nnodes = FromEnv(env, "PET_NNODES");
  d.master_port = FromEnv(env, "PET_MASTER_PORT");
  d.nproc_per_node = FromEnv(env, "PET_NPROC_PER_NODE");
  d.max_restarts = FromEnv(env, "PET_MAX_RESTARTS");
  d.node_rank = FromEnv(env, "PET_NODE_RANK");
  if (!d.node_rank.has_value()) d.node_rank = FromEnv(env, "JOB_COMPLETION_INDEX");
  d.coordinator_host = FromEnv(env, "PET_MASTER_ADDR");

  const bool in_kubernetes = FromEnv(env, "KUBERNETES_SERVICE_HOST").has_value();
  d.in_kubernetes = in_kubernetes;
  std::optional<VolcanoPod> volcano = in_kubernetes ? DiscoverVolcano(env, sys) : std::nullopt;
  std::optional<JobSetHostname> jobset =
      in_kubernetes && !volcano.has_value() ? ParseJobSetHostname(sys.hostname) : std::nullopt;
  if (in_kubernetes) {
    if (std::optional<Discovered> index = FromEnv(env, "JOB_COMPLETION_INDEX")) {
      d.job_pod_signs.push_back(
          absl::StrCat("JOB_COMPLETION_INDEX=", absl::CEscape(index->text.substr(0, 16))));
    }
    for (const char* name : {"VK_TASK_INDEX", "VC_TASK_INDEX"}) {
      if (std::optional<Discovered> index = FromEnv(env, name)) {
        d.job_pod_signs.push_back(
            absl::StrCat(name, "=", absl::CEscape(index->text.substr(0, 16))));
        break;
      }
    }
    if (jobset.has_value())
      d.job_pod_signs.push_back(absl::StrCat("JobSet hostname ", sys.hostname));
    for (const auto& [name, value] : env) {  // std::map: sorted, so the list is stable.
      if (absl::StartsWith(name, "PET_") && !value.empty()) {
        d.job_pod_signs.push_back(absl::CEscape(name.substr(0, 64)));
      }
    }
  }
  if (volcano.has_value()) ApplyVolcano(*volcano, env, sys, &d);
  if (jobset.has_value()) {
    std::string origin = absl::StrCat("JobSet hostname ", sys.hostname);
    if (!d.node_rank.has_value() && jobset->job_index == 0) {
      d.node_rank = Discovered{absl::StrCat(jobset->pod_index), origin};
    }
    if (!d.coordinator_host.has_value()) {
      std::string host = absl::StrCat(jobset->prefix, "-0-0");
      std::string subdomain = SubdomainFromFqdn(sys.hostname, sys.fqdn);
      if (!subdomain.empty()) {
        absl::StrAppend(&host, ".", subdomain);
        d.coordinator_host = Discovered{host, absl::StrCat(origin, " and FQDN ", sys.fqdn)};
      } else {
        d.coordinator_host = Discovered{host, origin};
      }
    }
    d.job_id = Discovered{jobset->prefix, origin};
  }
  return d;
}

void ApplyMpiConventions(MpiRole role, const SystemInfo& sys, KubernetesDiscovery* d) {
  if (role == MpiRole::kLauncher) {
    d->node_rank.reset();
    d->coordinator_host.reset();
  }
  std::optional<JobSetHostname> jobset =
      d->in_kubernetes ? ParseJobSetHostname(sys.hostname) : std::nullopt;
  if (!jobset.has_value()) return;
  const size_t dash = jobset->prefix.rfind('-');
  if (dash == std::string::npos || dash == 0) return;
  const std::string name = jobset->prefix.substr(0, dash);
  const std::string origin = absl::StrCat("JobSet hostname ", sys.hostname);
  d->job_id = Discovered{name, origin};
  if (role == MpiRole::kWorker) {
    // PET_MASTER_ADDR or <jobset>-node-0-0 would name a torch master.
    std::string host = absl::StrCat(name, "-launcher-0-0");
    std::string subdomain = SubdomainFromFqdn(sys.hostname, sys.fqdn);
    if (!subdomain.empty()) {
      absl::StrAppend(&host, ".", subdomain);
      d->coordinator_host = Discovered{host, absl::StrCat(origin, " and FQDN ", sys.fqdn)};
    } else {
      d->coordinator_host = Discovered{host, origin};
    }
  }
}

}  // namespace trainlet::agent

#include "config/k8s_discovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/host_names.h"
#include "config/options.h"

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

// The contents of `path`, a regular file that is, once symbolic links are
// followed, still inside `dir_real` (a realpath): Kubernetes mounts a
// ConfigMap key as a link (worker.host -> ..data/worker.host, ..data ->
// ..2026_11_23_...). An error, with errno's text where there is one, when it
// is not such a file or is larger than `max_bytes`.
absl::StatusOr<std::string> ReadBoundedFileUnder(const std::string& dir_real,
                                                 const std::string& path, size_t max_bytes) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot be resolved: ", strerror(errno)));
  }
  if (!absl::StartsWith(resolved, absl::StrCat(dir_real, "/"))) {
    return absl::PermissionDeniedError(
        absl::StrCat("links outside ", kVolcanoHostDir, " (to ",
                     absl::CEscape(absl::string_view(resolved).substr(0, 128)), ")"));
  }
  // The resolved path, its last part no link: what was checked is what is read.
  int fd = open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot be opened: ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError("is not a regular file");
  }
  if (st.st_size > static_cast<off_t>(max_bytes)) {
    close(fd);
    return absl::OutOfRangeError(absl::StrCat("is larger than ", max_bytes, " bytes"));
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
  const int read_errno = errno;
  close(fd);
  if (n < 0) return absl::DataLossError(absl::StrCat("cannot be read: ", strerror(read_errno)));
  return text;
}

// The names of the *.host files in `dir`, sorted: the first
// kMaxVolcanoHostFiles that readdir() returns; `*truncated` says whether
// there were more.
std::vector<std::string> VolcanoHostFileNames(const std::string& dir, bool* truncated) {
  std::vector<std::string> names;
  *truncated = false;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (name.size() > 5 && name.size() <= 255 && absl::EndsWith(name, ".host") && name[0] != '.') {
      if (names.size() >= static_cast<size_t>(kMaxVolcanoHostFiles)) {
        *truncated = true;
        break;
      }
      names.emplace_back(name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
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

namespace {

// The task whose pods this hostname's "<job>-<task>" names, from a host file
// name ("my_task") or a VC_<TASK>_NUM spelling ("MY_TASK"): Kubernetes names
// have no '_', so the svc plugin's '_' is a '-'.
bool JobTaskEndsWithTask(absl::string_view job_task, absl::string_view task) {
  std::string dashed = absl::AsciiStrToLower(task);
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return !dashed.empty() && job_task.size() > dashed.size() + 1 &&
         absl::EndsWith(job_task, absl::StrCat("-", dashed));
}

// VC_TASK_INDEX's value when VK_TASK_INDEX is missing, not a number or not
// this hostname's index: the first of them that is "<job>-<task>-<it>".
std::optional<Discovered> VolcanoIndex(const std::map<std::string, std::string>& env,
                                       absl::string_view hostname, int* index,
                                       std::string* job_task) {
  for (const char* name : {"VK_TASK_INDEX", "VC_TASK_INDEX"}) {
    std::optional<Discovered> v = FromEnv(env, name);
    int i = 0;
    if (!v.has_value() || !AllDigits(v->text) || !absl::SimpleAtoi(v->text, &i)) continue;
    absl::string_view rest = hostname;
    if (!absl::ConsumeSuffix(&rest, absl::StrCat("-", i)) || rest.empty() ||
        !absl::StrContains(rest.substr(1), "-")) {
      continue;
    }
    *index = i;
    *job_task = std::string(rest);
    return v;
  }
  return std::nullopt;
}

}  // namespace

std::optional<VolcanoPod> DiscoverVolcano(const std::map<std::string, std::string>& env,
                                          const SystemInfo& sys) {
  VolcanoPod pod;
  std::optional<Discovered> index = VolcanoIndex(env, sys.hostname, &pod.index, &pod.job_task);
  if (!index.has_value()) return std::nullopt;
  pod.index_origin = index->origin;
  pod.subdomain = SubdomainFromFqdn(sys.hostname, sys.fqdn);

  // Every task's host file: this pod's task is the one whose line <index> is
  // this pod; the others count as other tasks when they list any host.
  const std::string dir = UnderRoot(sys.root, kVolcanoHostDir);
  char dir_real[PATH_MAX];
  bool truncated = false;
  std::vector<std::string> names;
  if (realpath(dir.c_str(), dir_real) != nullptr) names = VolcanoHostFileNames(dir, &truncated);
  if (truncated) {
    pod.notes.push_back(absl::StrCat("more than ", kMaxVolcanoHostFiles, " *.host files in ",
                                     kVolcanoHostDir, ": only ", kMaxVolcanoHostFiles,
                                     " were read"));
  }
  for (const std::string& name : names) {
    // The name goes into logs: escaped.
    const std::string origin = absl::StrCat(kVolcanoHostDir, "/", absl::CEscape(name));
    const absl::string_view task = absl::StripSuffix(name, ".host");
    absl::StatusOr<std::string> text =
        ReadBoundedFileUnder(dir_real, absl::StrCat(dir, "/", name), kMaxVolcanoHostFileBytes);
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
    if (hosts->empty()) continue;  // A task with no pods.
    bool mine = false;
    std::string why_not;
    if (static_cast<size_t>(pod.index) >= hosts->size()) {
      why_not = absl::StrCat("has ", hosts->size(), " lines, none for ", pod.index_origin, "=",
                             pod.index);
    } else {
      absl::string_view line = (*hosts)[pod.index];
      mine = absl::ConsumePrefix(&line, sys.hostname) &&
             (line.empty() || absl::ConsumePrefix(&line, "."));
      if (mine && !pod.hosts.empty()) {
        pod.notes.push_back(
            absl::StrCat("a second Volcano host file that lists this pod, skipped: ", origin, " (",
                         pod.hosts_origin, " came first)"));
        continue;
      }
      if (mine) {
        pod.task = std::string(task);
        if (pod.subdomain.empty() && !line.empty()) {
          pod.subdomain = std::string(line.substr(0, line.find('.')));
        }
        pod.hosts = *std::move(hosts);
        pod.hosts_origin = origin;
        continue;
      }
      why_not =
          absl::StrCat("line ", pod.index + 1, " is \"",
                       absl::CEscape((*hosts)[pod.index].substr(0, 64)), "\", not ", sys.hostname);
    }
    if (!mine && JobTaskEndsWithTask(pod.job_task, task)) {
      // Named for this pod's task, yet it does not list this pod.
      pod.notes.push_back(absl::StrCat(
          "a Volcano host file that does not list this pod, skipped: ", origin, " ", why_not));
      continue;
    }
    if (pod.other_tasks.size() < static_cast<size_t>(kMaxVolcanoHostFiles)) {
      pod.other_tasks.push_back(
          VolcanoTask{std::string(task), static_cast<int>(hosts->size()), (*hosts)[0], origin});
    }
  }
  // No host file (no svc plugin): the task from the subdomain (the job name),
  // else from the VC_<TASK>_NUM that the hostname ends with.
  if (pod.task.empty()) {
    absl::string_view task = pod.job_task;
    if (!pod.subdomain.empty() && absl::ConsumePrefix(&task, absl::StrCat(pod.subdomain, "-")) &&
        !task.empty()) {
      pod.task = std::string(task);
    }
  }
  // The other tasks the svc plugin's variables name (VC_<TASK>_NUM > 0).
  for (const auto& [name, value] : env) {
    absl::string_view task = name;
    if (!absl::ConsumePrefix(&task, "VC_") || !absl::ConsumeSuffix(&task, "_NUM") || task.empty() ||
        !AllDigits(value) || value.find_first_not_of('0') == std::string::npos) {
      continue;
    }
    if (pod.task.empty() && JobTaskEndsWithTask(pod.job_task, task)) {
      pod.task = absl::AsciiStrToLower(task);
      continue;
    }
    if (!pod.task.empty() && VolcanoEnvTaskName(pod.task) == task) continue;
    if (std::any_of(pod.other_tasks.begin(), pod.other_tasks.end(),
                    [&](const VolcanoTask& t) { return VolcanoEnvTaskName(t.name) == task; })) {
      continue;
    }
    if (pod.other_tasks.size() >= static_cast<size_t>(kMaxVolcanoHostFiles)) break;
    VolcanoTask other;
    other.name = absl::AsciiStrToLower(task.substr(0, 64));
    absl::SimpleAtoi(value, &other.hosts);
    other.origin = absl::CEscape(name.substr(0, 80));
    auto hosts = env.find(absl::StrCat("VC_", task, "_HOSTS"));
    if (hosts != env.end()) {
      absl::string_view first = hosts->second;  // a view of the map's string, not a temporary
      first = first.substr(0, first.find(','));
      if (IsValidHost(first)) other.first_host = std::string(first);
    }
    pod.other_tasks.push_back(std::move(other));
  }
  // The job: "<job>-<task>" without its task, else the subdomain.
  if (!pod.task.empty() && JobTaskEndsWithTask(pod.job_task, pod.task)) {
    pod.job = pod.job_task.substr(0, pod.job_task.size() - pod.task.size() - 1);
  } else {
    pod.job = pod.subdomain;
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

// "worker (3 hosts, /etc/volcano/worker.host)"; `label` is escaped.
std::string DescribeTask(absl::string_view label, size_t hosts, absl::string_view origin) {
  return absl::StrCat(label, " (", hosts, hosts == 1 ? " host, " : " hosts, ", origin, ")");
}

std::string EscapedTaskName(absl::string_view name) { return absl::CEscape(name.substr(0, 64)); }

// "worker, this pod's (2 hosts, ...), master (1 host, ...)".
std::string DescribeTasks(const VolcanoPod& pod) {
  std::vector<std::string> tasks;
  const std::string own =
      pod.task.empty() ? std::string("this pod's task") : EscapedTaskName(pod.task);
  if (!pod.hosts.empty()) {
    tasks.push_back(
        DescribeTask(absl::StrCat(own, ", this pod's"), pod.hosts.size(), pod.hosts_origin));
  } else {
    tasks.push_back(absl::StrCat(own, " (this pod's)"));
  }
  for (const VolcanoTask& t : pod.other_tasks) {
    tasks.push_back(DescribeTask(EscapedTaskName(t.name), static_cast<size_t>(t.hosts), t.origin));
  }
  return absl::StrJoin(tasks, ", ");
}

void ApplyVolcano(const VolcanoPod& pod, const std::map<std::string, std::string>& env,
                  const SystemInfo& sys, KubernetesDiscovery* d) {
  for (const std::string& note : pod.notes) d->notes.push_back(note);
  d->volcano = pod;
  const std::string hostname_origin = absl::StrCat("Volcano hostname ", sys.hostname);
  if (!pod.other_tasks.empty()) {
    // Several tasks with pods (master + worker, ps + worker, launcher +
    // workers): one task's count, index and first host would split the job.
    // Only the job name is the same in every task's pods.
    d->volcano_tasks = DescribeTasks(pod);
    if (!pod.job.empty()) {
      d->job_id = Discovered{pod.job, absl::StrCat(hostname_origin, " (the Volcano job)")};
    }
    return;
  }
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

// The MPI commands in a Volcano job of two tasks (the mpi plugin's master
// and worker, or an example's mpimaster and mpiworker): the launcher is the
// pod of its own one-pod task, the workers are the other task's pods.
void ApplyVolcanoMpi(MpiRole role, const std::map<std::string, std::string>& env,
                     KubernetesDiscovery* d) {
  const VolcanoPod& pod = *d->volcano;
  const std::string job_origin = absl::StrCat("Volcano job of ", pod.job_task);
  std::optional<Discovered> own_count;
  if (!pod.hosts.empty()) {
    own_count = Discovered{absl::StrCat(pod.hosts.size()),
                           absl::StrCat(pod.hosts_origin, " (its line count)")};
  } else if (!pod.task.empty()) {
    own_count = FromEnv(env, absl::StrCat("VC_", VolcanoEnvTaskName(pod.task), "_NUM"));
  }
  if (pod.other_tasks.empty()) {
    // One task: its count and first host are not the launcher's workers and
    // address; the user says which (TRAINLET_NNODES, TRAINLET_COORDINATOR).
    if (role == MpiRole::kLauncher && d->nnodes.has_value() && d->nnodes->origin != "PET_NNODES") {
      d->nnodes.reset();
    }
    if (role == MpiRole::kWorker && d->coordinator_host.has_value() &&
        d->coordinator_host->origin != "PET_MASTER_ADDR") {
      d->coordinator_host.reset();
    }
    return;
  }
  if (pod.other_tasks.size() != 1 || pod.job.empty()) return;  // refused (volcano_tasks).
  const VolcanoTask& other = pod.other_tasks[0];
  const bool own_single = own_count.has_value() && own_count->text == "1";
  if (role == MpiRole::kLauncher) {
    if (!own_single) return;  // The launcher's task has one pod: this one.
    if (!d->nnodes.has_value()) {
      d->nnodes = Discovered{absl::StrCat(other.hosts),
                             absl::StrCat(other.origin, " (the worker task's host count)")};
    }
  } else {
    if (other.hosts != 1 || other.first_host.empty()) return;
    if (!d->coordinator_host.has_value()) {
      d->coordinator_host = Discovered{
          other.first_host, absl::StrCat(other.origin, " (the launcher task's first host)")};
    }
    if (!d->nnodes.has_value() && own_count.has_value()) d->nnodes = own_count;
    if (!d->node_rank.has_value()) {
      d->node_rank = Discovered{absl::StrCat(pod.index), pod.index_origin};
    }
  }
  d->job_id = Discovered{pod.job, job_origin};
  d->volcano_tasks.clear();
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

void ApplyMpiConventions(MpiRole role, const std::map<std::string, std::string>& env,
                         const SystemInfo& sys, KubernetesDiscovery* d) {
  if (role == MpiRole::kLauncher) {
    d->node_rank.reset();
    d->coordinator_host.reset();
  }
  if (role != MpiRole::kNone && d->volcano.has_value()) {
    ApplyVolcanoMpi(role, env, d);
    if (role == MpiRole::kLauncher) d->node_rank.reset();
    return;
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

// Reads a pod's Kubernetes conventions into option texts, so that `trainlet
// run -- python train.py` needs no flags inside a Kubeflow Trainer / JobSet /
// training-operator / Volcano pod. Which variable, hostname or file gives
// which value, in which order, and how a Volcano job of several tasks is
// refused: docs/configuration.md, "Kubernetes discovery" and "Volcano jobs".
// ApplyMpiConventions() maps a two-task Volcano job (a one-pod launcher task
// and a worker task).
//
// It also says whether this is a pod of a JobSet or Kubeflow job, whose node
// count must then come from somewhere (ParseRunConfig() refuses to guess 1),
// and where the job's token Secret is mounted. The hostname is read as a
// JobSet hostname only inside Kubernetes (KUBERNETES_SERVICE_HOST is set).
// Empty variables count as unset. Values are returned as text with the
// variable they came from; the config layer parses them and names that
// variable in its errors.
//
// Reads only the Volcano host files (below SystemInfo::root, bounded, and
// only in a Volcano pod); otherwise a function of its inputs.
// Thread-compatible.
#ifndef TRAINLET_CONFIG_K8S_DISCOVERY_H_
#define TRAINLET_CONFIG_K8S_DISCOVERY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/system_probe.h"

namespace trainlet::agent {

// Which trainlet command reads the pod (run_config.h, RunConfigMode).
enum class MpiRole { kNone, kLauncher, kWorker };

// A hostname of the form <jobset>-<rjob>-<jobIdx>-<podIdx>.
struct JobSetHostname {
  std::string prefix;  // "<jobset>-<rjob>", also the child Job name minus "-<jobIdx>".
  int job_index = 0;
  int pod_index = 0;
};
// nullopt unless `hostname` is a prefix with at least one '-' of its own,
// then "-<digits>-<digits>".
std::optional<JobSetHostname> ParseJobSetHostname(absl::string_view hostname);

// The subdomain in "<hostname>.<subdomain>.<ns>.svc[.<cluster domain>]";
// empty when `fqdn` does not have that shape.
std::string SubdomainFromFqdn(absl::string_view hostname, absl::string_view fqdn);

// Volcano's svc plugin: /etc/volcano/<task>.host, one host a line.
inline constexpr char kVolcanoHostDir[] = "/etc/volcano";
inline constexpr size_t kMaxVolcanoHostFileBytes = 8 << 20;
inline constexpr int kMaxVolcanoHostFiles = 64;

// The hosts of one host file text, one a line, whitespace trimmed and blank
// lines skipped; an error naming `origin` for a line that is not a host name
// (common/host_names.h) or for more than kMaxNodes lines.
absl::StatusOr<std::vector<std::string>> ParseVolcanoHostFile(absl::string_view text,
                                                              absl::string_view origin);

// Another task of a pod's Volcano job that has pods.
struct VolcanoTask {
  std::string name;        // "master" (the host file's spelling, or VC_<TASK>_NUM's lowered).
  int hosts = 0;           // its pods: lines, or VC_<TASK>_NUM.
  std::string first_host;  // its first line (or of VC_<TASK>_HOSTS); may be empty.
  std::string origin;      // "/etc/volcano/master.host", "VC_MASTER_NUM".
};

// What a Volcano pod says about its task.
struct VolcanoPod {
  int index = 0;                         // VK_TASK_INDEX, else VC_TASK_INDEX (the first that fits).
  std::string index_origin;              // "VK_TASK_INDEX".
  std::string job_task;                  // "<job>-<task>": the hostname without "-<index>".
  std::string task;                      // the task name; empty when unknown.
  std::string job;                       // the Volcano job's name; empty when unknown.
  std::vector<VolcanoTask> other_tasks;  // the job's other tasks with pods.
  std::string subdomain;                 // from the FQDN or the host file; may be empty.
  std::vector<std::string> hosts;        // the task's host file; empty without one.
  std::string hosts_origin;              // "/etc/volcano/worker.host".
  std::vector<std::string> notes;        // host files that could not be used, and why.
};

// nullopt unless `env` has VK_TASK_INDEX (or VC_TASK_INDEX) and the hostname
// is "<job>-<task>-<that index>". At most kMaxVolcanoHostFiles host files are
// read (a note says when there were more).
std::optional<VolcanoPod> DiscoverVolcano(const std::map<std::string, std::string>& env,
                                          const SystemInfo& sys);

struct Discovered {
  std::string text;    // the value, unparsed.
  std::string origin;  // the input to name in errors and notes: "PET_NNODES",
                       // "JobSet hostname job-node-0-1".
};

// Where a pod finds the job's token when no --token-file is given: a Secret
// volume mounted at /var/run/secrets/trainlet with the key "token" (read
// below SystemInfo::root).
inline constexpr char kKubernetesTokenPath[] = "/var/run/secrets/trainlet/token";

struct KubernetesDiscovery {
  bool in_kubernetes = false;  // KUBERNETES_SERVICE_HOST is set.
  // Inside Kubernetes, why this looks like a pod of a multi-pod JobSet or
  // Kubeflow job: "JOB_COMPLETION_INDEX=3", "JobSet hostname t-node-0-1",
  // "PET_MASTER_ADDR" (values escaped and bounded); empty outside one.
  std::vector<std::string> job_pod_signs;
  std::optional<Discovered> nnodes;
  std::optional<Discovered> node_rank;
  std::optional<Discovered> coordinator_host;
  std::optional<Discovered> master_port;
  std::optional<Discovered> nproc_per_node;
  std::optional<Discovered> max_restarts;
  std::optional<Discovered> job_id;
  // What discovery skipped and why (an unusable Volcano host file), for the
  // startup log; values escaped and bounded.
  std::vector<std::string> notes;
  // A Volcano pod's reading (nullopt outside one).
  std::optional<VolcanoPod> volcano;
  // Non-empty when this pod's Volcano job has several tasks with pods that
  // discovery cannot map: them, this pod's first, for the error ("master,
  // this pod's (1 host, /etc/volcano/master.host), worker (2 hosts, ...)").
  std::string volcano_tasks;
};

KubernetesDiscovery DiscoverKubernetes(const std::map<std::string, std::string>& env,
                                       const SystemInfo& sys);

// The MPI commands' reading of a JobSet pod (Kubeflow Trainer's MPI runtime:
// replicated jobs `launcher` and `node`): the job id is <jobset>, the
// hostname prefix without its replicated-job name, the same in both pods;
// a worker's coordinator is <jobset>-launcher-0-0.<subdomain>; the launcher
// takes no node rank and no coordinator address (it hosts it).
// In a Volcano pod: with two tasks, one of one pod and the other of N, the
// launcher is the one-pod task's pod, its nnodes N (the worker task's host
// count); a worker's coordinator is the launcher task's first host, its node
// rank hint its index; the job id is the Volcano job's name in both; that
// clears volcano_tasks. In a one-task job the task's count (launcher) and
// first host (worker) are dropped: they are not the workers' or the
// launcher's.
void ApplyMpiConventions(MpiRole role, const std::map<std::string, std::string>& env,
                         const SystemInfo& sys, KubernetesDiscovery* d);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_K8S_DISCOVERY_H_

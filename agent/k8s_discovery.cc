#include "agent/k8s_discovery.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

}  // namespace

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
  std::optional<JobSetHostname> jobset =
      in_kubernetes ? ParseJobSetHostname(sys.hostname) : std::nullopt;
  if (in_kubernetes) {
    if (std::optional<Discovered> index = FromEnv(env, "JOB_COMPLETION_INDEX")) {
      d.job_pod_signs.push_back(
          absl::StrCat("JOB_COMPLETION_INDEX=", absl::CEscape(index->text.substr(0, 16))));
    }
    if (jobset.has_value())
      d.job_pod_signs.push_back(absl::StrCat("JobSet hostname ", sys.hostname));
    for (const auto& [name, value] : env) {  // std::map: sorted, so the list is stable.
      if (absl::StartsWith(name, "PET_") && !value.empty()) {
        d.job_pod_signs.push_back(absl::CEscape(name.substr(0, 64)));
      }
    }
  }
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

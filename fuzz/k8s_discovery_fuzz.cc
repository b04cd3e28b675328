// Fuzz target: Kubernetes discovery. Input: lines; the first is the hostname,
// the second the FQDN, every other "NAME=VALUE" line an environment variable.
// Checks: a JobSet hostname parses into a non-empty prefix and indices >= 0
// that rebuild the hostname; a subdomain is a label of the FQDN; nothing
// discovered is empty (empty variables count as unset).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/k8s_discovery.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

namespace {

void CheckDiscovered(const std::optional<agent::Discovered>& d, const char* what) {
  if (d.has_value()) FUZZ_CHECK(!d->text.empty() && !d->origin.empty(), what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines = trainlet::fuzz::SplitLines(trainlet::fuzz::AsText(data, size));
  agent::SystemInfo sys;
  sys.hostname = lines.size() > 0 ? lines[0] : "";
  sys.fqdn = lines.size() > 1 ? lines[1] : "";
  std::map<std::string, std::string> env;
  for (size_t i = 2; i < lines.size(); ++i) {
    size_t eq = lines[i].find('=');
    if (eq != std::string::npos) env[lines[i].substr(0, eq)] = lines[i].substr(eq + 1);
  }
  if (auto js = agent::ParseJobSetHostname(sys.hostname)) {
    FUZZ_CHECK(!js->prefix.empty() && js->job_index >= 0 && js->pod_index >= 0, sys.hostname);
    // Leading zeros may be accepted, so compare numerically through a re-parse.
    auto again = agent::ParseJobSetHostname(
        absl::StrCat(js->prefix, "-", js->job_index, "-", js->pod_index));
    FUZZ_CHECK(again && again->prefix == js->prefix && again->job_index == js->job_index &&
                   again->pod_index == js->pod_index,
               sys.hostname);
  }
  std::string subdomain = agent::SubdomainFromFqdn(sys.hostname, sys.fqdn);
  if (!subdomain.empty()) {
    FUZZ_CHECK(sys.fqdn.find(absl::StrCat(".", subdomain, ".")) != std::string::npos, sys.fqdn);
  }
  agent::KubernetesDiscovery d = agent::DiscoverKubernetes(env, sys);
  CheckDiscovered(d.nnodes, "nnodes");
  CheckDiscovered(d.node_rank, "node_rank");
  CheckDiscovered(d.coordinator_host, "coordinator_host");
  CheckDiscovered(d.master_port, "master_port");
  CheckDiscovered(d.nproc_per_node, "nproc_per_node");
  CheckDiscovered(d.max_restarts, "max_restarts");
  CheckDiscovered(d.job_id, "job_id");
  return 0;
}

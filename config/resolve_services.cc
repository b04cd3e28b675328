// ResolveServices (run_resolvers.h): the ports this node's workers and
// servers use, and where its health reports go.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

// Ports this agent may listen on must differ from each other (0 = any free
// port never clashes).
absl::Status CheckPortClash(absl::string_view a_flag, int a, absl::string_view b_flag, int b) {
  if (a != b || a == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: port %d is also %s; this node would listen on it twice, pick another",
                      a_flag, a, b_flag));
}

}  // namespace

absl::Status ResolveServices(RunInputs* in, RunConfig* c) {
  if (std::optional<OptionValue> master = Pick(in->parsed, "master-port", in->k8s.master_port)) {
    absl::StatusOr<int> port = ParseIntValue(*master, 1, 65535);
    if (!port.ok()) return port.status();
    c->master_port = *port;
    NoteDiscovered(*master, "master port", c);
  } else {
    // 0: the agent picks a free port at start.
    c->master_port = in->single_local ? 0 : kDefaultMasterPort;
  }
  if (const OptionValue* path = in->parsed.Find("preflight-path"); path != nullptr) {
    if (path->text.empty() || path->text.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path->origin, ": expected a directory, e.g. the checkpoint directory"));
    }
    c->preflight_path = path->text;
  }
  absl::StatusOr<bool> preflight_gpu =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "preflight-gpu"));
  if (!preflight_gpu.ok()) return preflight_gpu.status();
  c->preflight_gpu = *preflight_gpu;
  if (const OptionValue* busbw = in->parsed.Find("preflight-min-gpu-busbw")) {
    absl::StatusOr<int> gbps = ParseIntValue(*busbw, 0, 100000);
    if (!gbps.ok()) return gbps.status();
    c->preflight_min_gpu_busbw = *gbps;
  }
  if (const OptionValue* port = in->parsed.Find("preflight-port")) {
    absl::StatusOr<int> value = ParseIntValue(*port, 0, 65535);
    if (!value.ok()) return value.status();
    c->preflight_port = *value;
  }
  absl::StatusOr<bool> agent_store =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "agent-store"));
  if (!agent_store.ok()) return agent_store.status();
  c->agent_store = *agent_store;
  if (const OptionValue* store = in->parsed.Find("agent-store-port")) {
    absl::StatusOr<int> port = ParseIntValue(*store, 1, 65535);
    if (!port.ok()) return port.status();
    c->agent_store_port = *port;
  }
  if (const OptionValue* health = in->parsed.Find("health-port")) {
    absl::StatusOr<int> port = ParseIntValue(*health, 0, 65535);
    if (!port.ok()) return port.status();
    c->health_port = *port;
  } else {
    // The health server is for kubelet probes.
    c->health_port = in->k8s.in_kubernetes ? kKubernetesHealthPort : 0;
  }
  if (const OptionValue* controller = in->parsed.Find("controller")) {
    absl::StatusOr<HostPort> hp = ParseHostPortValue(*controller, kDefaultControllerPort);
    if (!hp.ok()) return hp.status();
    c->controller = JoinHostPort(hp->host, hp->port);
  }
  if (absl::Status s =
          ParseDurationOptions(in->parsed, in->table,
                               {{"report-interval", absl::Milliseconds(100), &c->report_interval}});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<bool> kubeflow_progress =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "kubeflow-progress"));
  if (!kubeflow_progress.ok()) return kubeflow_progress.status();
  c->kubeflow_progress = *kubeflow_progress;
  if (c->report_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ValueOrDefault(in->parsed, in->table, "report-interval").origin,
                     ": at most 1h, got ", absl::FormatDuration(c->report_interval)));
  }
  if (absl::Status s =
          CheckPortClash("--health-port", c->health_port, "--master-port", c->master_port);
      !s.ok()) {
    return s;
  }
  if (c->agent_store) {
    // 0: --master-port - 1, known only once the agent picked a free one.
    const int store_port = c->agent_store_port > 0 ? c->agent_store_port
                           : c->master_port > 1    ? c->master_port - 1
                                                   : 0;
    for (const auto& [flag, port] :
         {std::pair<const char*, int>{"--master-port", c->master_port},
          {"--health-port", c->health_port},
          {"the coordinator port",
           c->host_coordinator == HostCoordinator::kNo ? 0 : c->coordinator_port}}) {
      if (absl::Status s = CheckPortClash("--agent-store-port", store_port, flag, port); !s.ok()) {
        return s;
      }
    }
  }
  if (c->host_coordinator == HostCoordinator::kNo) return absl::OkStatus();
  if (absl::Status s = CheckPortClash("--health-port", c->health_port, "the coordinator port",
                                      c->coordinator_port);
      !s.ok()) {
    return s;
  }
  return CheckPortClash("--master-port", c->master_port, "the coordinator port",
                        c->coordinator_port);
}

}  // namespace trainlet::agent

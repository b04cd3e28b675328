// ResolveIdentity (run_resolvers.h): who this node is in the job, and the
// address its peers reach it at.
#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/addresses.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

absl::Status ValidateNodeId(const OptionValue& v) {
  bool ok = !v.text.empty() && v.text.size() <= 253 &&
            std::all_of(v.text.begin(), v.text.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected 1 to 253 printable ASCII characters without spaces, got \"%s\"", v.origin,
        absl::CEscape(v.text)));
  }
  return absl::OkStatus();
}

// --job-id, else torchrun's --rdzv-id (a flag too), else the variable,
// discovery, the default.
absl::Status ResolveJobId(const RunInputs& in, RunConfig* c) {
  const OptionValue* rdzv_id = in.parsed.Find("rdzv-id");
  std::optional<OptionValue> given;
  if (const OptionValue* v = in.parsed.Find("job-id");
      v != nullptr && v->source == ValueSource::kFlag) {
    given = *v;
    if (rdzv_id != nullptr && rdzv_id->text != v->text) {
      c->notes.push_back(absl::StrCat(rdzv_id->origin, "=", SafeForLog(rdzv_id->text, 64),
                                      " ignored: ", v->origin, "=", SafeForLog(v->text, 128),
                                      " is the job id"));
    }
  } else if (rdzv_id != nullptr) {
    given = *rdzv_id;
    c->notes.push_back(absl::StrCat(rdzv_id->origin, "=", SafeForLog(rdzv_id->text, 128),
                                    " (torchrun's): the job id"));
  }
  const OptionValue job = given.has_value()
                              ? *given
                              : Pick(in.parsed, "job-id", in.k8s.job_id)
                                    .value_or(ValueOrDefault(in.parsed, in.table, "job-id"));
  if (absl::Status s = ValidateJobId(job); !s.ok()) return s;
  c->job_id = job.text;
  NoteDiscovered(job, "job id", c);
  return absl::OkStatus();
}

// The address peers reach this node at: every address variable must be the
// same on every node and reachable from every node (docs/environment.md).
absl::Status ResolveAdvertiseAddr(const RunInputs& in, RunConfig* c) {
  const SystemInfo& sys = in.sys;
  const bool k8s_multi_node = in.k8s.in_kubernetes && in.multi_node;
  if (const OptionValue* addr = in.parsed.Find("advertise-addr")) {
    absl::StatusOr<std::string> host = ParseHostValue(*addr);
    if (!host.ok()) return host.status();
    c->advertise_addr = *host;
    if (k8s_multi_node && IsThisHostOnly(c->advertise_addr)) {
      c->warnings.push_back(absl::StrCat(
          addr->origin, "=", c->advertise_addr,
          " is a loopback address in a multi-node Kubernetes job: pods on other nodes cannot "
          "reach it; leave it unset to advertise the pod's FQDN"));
    }
  } else if (in.mpi_worker()) {
    // The name the launcher's hostfiles and known_hosts carry for this pod.
    c->advertise_addr = OwnReachableName(sys);
  } else if (c->host_coordinator != HostCoordinator::kNo) {
    if (in.coordinator_configured && !IsThisHostOnly(c->coordinator_host)) {
      c->advertise_addr = c->coordinator_host;  // Exactly what the peers dial.
    } else if ((in.coordinator_configured || !in.multi_node) && !k8s_multi_node) {
      c->advertise_addr = LoopbackLike(c->coordinator_host);  // The whole job is on this host.
    } else {
      c->advertise_addr = OwnReachableName(sys);
      if (c->advertise_addr.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot find an address the other nodes can reach this node at (it hosts the "
            "coordinator): the hostname \"",
            absl::CEscape(sys.hostname.substr(0, 64)),
            "\" is not a usable host name and no FQDN was found; pass --advertise-addr=ADDR "
            "(or TRAINLET_ADVERTISE_ADDR)"));
      }
    }
  }
  if (in.launcher() && !in.coordinator_configured && in.parsed.Find("advertise-addr") == nullptr &&
      in.k8s.in_kubernetes) {
    // Workers find the launcher as <hostname>.<subdomain> (ApplyMpiConventions,
    // Volcano's host files): its certificate is checked for that name.
    const std::string subdomain = SubdomainFromFqdn(sys.hostname, c->advertise_addr);
    if (!subdomain.empty()) {
      c->coordinator_dialled_name = absl::StrCat(sys.hostname, ".", subdomain);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveIdentity(RunInputs* in, RunConfig* c) {
  if (absl::Status s = ResolveJobId(*in, c); !s.ok()) return s;
  if (const OptionValue* node_id = in->parsed.Find("node-id")) {
    if (absl::Status s = ValidateNodeId(*node_id); !s.ok()) return s;
    c->node_id = node_id->text;
  } else if (in->sys.hostname.empty()) {
    return absl::FailedPreconditionError(
        "cannot determine the hostname for the node id: pass --node-id (or TRAINLET_NODE_ID)");
  } else {
    c->node_id = in->sys.hostname;
  }
  return ResolveAdvertiseAddr(*in, c);
}

}  // namespace trainlet::agent

// ResolveCoordinatorAddress and ResolveCoordinatorHost (run_resolvers.h):
// where the job's coordinator is, and whether this agent runs it.
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/addresses.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

// Every node but the one that hosts the coordinator must know where it is.
absl::Status CheckCoordinatorFindable(const RunInputs& in, const OptionValue& host_value,
                                      const RunConfig& c) {
  constexpr absl::string_view kWhereIsIt =
      "pass --coordinator=HOST:PORT (or TRAINLET_COORDINATOR, PET_MASTER_ADDR)";
  if (in.mpi_worker() && !in.coordinator_configured) {
    return absl::InvalidArgumentError(
        "cannot find the MPI launcher: pass --coordinator=LAUNCHER_HOST[:PORT] (or "
        "TRAINLET_COORDINATOR); in a JobSet pod it is <jobset>-launcher-0-0.<subdomain>");
  }
  if (in.coordinator_configured || in.launcher()) return absl::OkStatus();
  if (c.node_rank_hint > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot find the coordinator: node rank ", c.node_rank_hint, " (",
                     OriginPhrase(*in.rank_value),
                     ") joins the coordinator hosted by node rank 0, and no coordinator address is "
                     "configured; ",
                     kWhereIsIt, " with node rank 0's address"));
  }
  if (host_value.text == "no") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot find the coordinator: ", host_value.origin,
        "=no joins a coordinator elsewhere, and no coordinator address is configured; ",
        kWhereIsIt));
  }
  if (c.node_rank_hint < 0 && in.multi_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot find the coordinator: ", kWhereIsIt,
                     ", or --node-rank=0 on the node that hosts it; nnodes is ",
                     NnodesToString(c.nnodes), " (", OriginPhrase(in.nnodes_value), ")"));
  }
  return absl::OkStatus();
}

// --host-coordinator, checked.
absl::StatusOr<OptionValue> HostCoordinatorValue(const RunInputs& in) {
  OptionValue v = ValueOrDefault(in.parsed, in.table, "host-coordinator");
  if (v.text != "auto" && v.text != "yes" && v.text != "no") {
    return absl::InvalidArgumentError(
        absl::StrCat(v.origin, ": expected auto, yes or no, got \"", absl::CEscape(v.text), "\""));
  }
  return v;
}

}  // namespace

absl::Status ResolveCoordinatorAddress(RunInputs* in, RunConfig* c) {
  const KubernetesDiscovery& k8s = in->k8s;
  // The node rank hint (an MPI launcher takes none: it is the extra node).
  if (!in->launcher()) in->rank_value = Pick(in->parsed, "node-rank", k8s.node_rank);
  if (in->rank_value.has_value()) {
    absl::StatusOr<int> rank = ParseIntValue(*in->rank_value, 0, kMaxNodes - 1);
    if (!rank.ok()) return rank.status();
    c->node_rank_hint = *rank;
    NoteDiscovered(*in->rank_value, "node rank", c);
  }

  std::optional<OptionValue> coord = Pick(in->parsed, "coordinator", k8s.coordinator_host);
  c->coordinator_port = kDefaultCoordinatorPort;
  if (coord.has_value() && coord->source == ValueSource::kDiscovery) {
    // Kubernetes gives a host only; the coordinator port stays ours.
    absl::StatusOr<std::string> host = ParseHostValue(*coord);
    if (!host.ok()) {
      if (coord->origin == "PET_MASTER_ADDR" &&
          absl::StrContains(host.status().message(), "without a port")) {
        return absl::InvalidArgumentError(absl::StrCat(
            host.status().message(),
            "; PET_MASTER_ADDR names a host: the workers' port belongs in PET_MASTER_PORT, and "
            "the coordinator's in --coordinator=HOST:PORT (TRAINLET_COORDINATOR)"));
      }
      return host.status();
    }
    c->coordinator_host = *host;
    NoteDiscovered(*coord, "coordinator host", c);
  } else if (coord.has_value()) {
    absl::StatusOr<HostPort> hp = ParseHostPortValue(*coord, kDefaultCoordinatorPort);
    if (!hp.ok()) return hp.status();
    c->coordinator_host = hp->host;
    c->coordinator_port = hp->port;
  }
  in->coordinator_configured = coord.has_value();
  // In a Volcano job of several tasks, the pod whose own host-file line is
  // the configured coordinator hosts it: node rank 0.
  if (!k8s.volcano_tasks.empty() && !in->rank_value.has_value() && in->coordinator_configured &&
      k8s.volcano.has_value() &&
      static_cast<size_t>(k8s.volcano->index) < k8s.volcano->hosts.size() &&
      SameHostName(c->coordinator_host, k8s.volcano->hosts[k8s.volcano->index])) {
    c->node_rank_hint = 0;
    c->discovery_notes.push_back(absl::StrCat("node rank 0: the coordinator host ",
                                              c->coordinator_host, " is this pod's line of ",
                                              k8s.volcano->hosts_origin));
  }

  absl::StatusOr<OptionValue> host_value = HostCoordinatorValue(*in);
  if (!host_value.ok()) return host_value.status();
  if (absl::Status s = CheckCoordinatorFindable(*in, *host_value, *c); !s.ok()) return s;
  if (c->node_rank_hint >= c->nnodes.max && !in->mpi_worker()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: node rank %d must be below nnodes %s (%s); --nnodes is the number of nodes in the "
        "job",
        in->rank_value.has_value() ? in->rank_value->origin : "--node-rank", c->node_rank_hint,
        NnodesToString(c->nnodes), OriginPhrase(in->nnodes_value)));
  }
  return absl::OkStatus();
}

absl::Status ResolveCoordinatorHost(RunInputs* in, RunConfig* c) {
  absl::StatusOr<OptionValue> host_value = HostCoordinatorValue(*in);
  if (!host_value.ok()) return host_value.status();
  const bool configured = in->coordinator_configured;
  // Nothing configured: a local single-node run, like torchrun --standalone,
  // on free loopback ports so that two of them on one machine do not clash.
  in->single_local = !configured && !in->multi_node;
  if (in->single_local) {
    if (c->node_rank_hint < 0) c->node_rank_hint = 0;
    c->coordinator_host = "127.0.0.1";
    c->coordinator_port = 0;
    c->in_process_coordinator = !in->launcher() && !in->mpi_worker();
    c->discovery_notes.push_back(
        c->in_process_coordinator
            ? "single-node run: no coordinator configured, running it inside this agent (no "
              "network)"
            : "single-node run: no coordinator configured, hosting one on 127.0.0.1 (a free port)");
  } else if (!configured) {
    c->coordinator_host = "127.0.0.1";  // Node rank 0 of several hosts it; peers dial it.
  }

  // Who hosts the coordinator.
  if (in->mpi_worker()) {
    c->host_coordinator = HostCoordinator::kNo;
  } else if (in->launcher() && !configured && host_value->text != "no") {
    c->host_coordinator = HostCoordinator::kYes;
  } else if (host_value->text == "yes") {
    c->host_coordinator = HostCoordinator::kYes;
  } else if (host_value->text == "no") {
    c->host_coordinator = HostCoordinator::kNo;
  } else if (c->node_rank_hint >= 0) {
    c->host_coordinator = c->node_rank_hint == 0 ? HostCoordinator::kYes : HostCoordinator::kNo;
  } else if (IsLocalCoordinator(c->coordinator_host, in->sys)) {
    // Several agents on this host could host it: the one that binds the
    // port does, the others join it (torchrun's c10d does the same).
    c->host_coordinator = in->multi_node ? HostCoordinator::kIfPortFree : HostCoordinator::kYes;
  } else {
    c->host_coordinator = HostCoordinator::kNo;
  }

  // Listening addresses.
  if (const OptionValue* bind = in->parsed.Find("bind-addr")) {
    absl::StatusOr<std::string> addr = ParseIpAddressValue(*bind);
    if (!addr.ok()) return addr.status();
    c->bind_addr = *addr;
    c->health_bind_addr = *addr;
  } else {
    const bool loopback_only =
        !in->multi_node || (configured && IsThisHostOnly(c->coordinator_host));
    c->bind_addr = loopback_only ? LoopbackLike(c->coordinator_host) : "0.0.0.0";
    c->health_bind_addr = in->k8s.in_kubernetes ? "0.0.0.0" : c->bind_addr;
  }
  return absl::OkStatus();
}

}  // namespace trainlet::agent

// ResolveTopology (run_resolvers.h): what the job is made of.
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

// --standalone: a single-node run on this host; flags or TRAINLET_*
// variables that describe another job are a usage error.
absl::Status CheckStandaloneConflicts(const ParsedOptions& parsed) {
  auto conflict = [](const OptionValue& v) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--standalone runs a single-node job on this host; it conflicts with %s=%s (drop one "
        "of them)",
        v.origin, absl::CEscape(v.text.substr(0, 64))));
  };
  if (const OptionValue* v = parsed.Find("nnodes")) {
    absl::StatusOr<NnodesRange> n = ParseNnodesValue(*v);
    if (!n.ok()) return n.status();
    if (n->max != 1) return conflict(*v);
  }
  if (const OptionValue* v = parsed.Find("coordinator")) return conflict(*v);
  if (const OptionValue* v = parsed.Find("node-rank")) {
    absl::StatusOr<int> rank = ParseIntValue(*v, 0, kMaxNodes - 1);
    if (!rank.ok()) return rank.status();
    if (*rank != 0) return conflict(*v);
  }
  if (const OptionValue* v = parsed.Find("host-coordinator"); v != nullptr && v->text == "no") {
    return conflict(*v);
  }
  return absl::OkStatus();
}

// torchrun's --rdzv-backend: trainlet's rendezvous does what c10d and
// static do; an etcd server is nothing it could use.
absl::Status CheckRendezvousBackend(const ParsedOptions& parsed, RunConfig* c) {
  const OptionValue* backend = parsed.Find("rdzv-backend");
  if (backend == nullptr) return absl::OkStatus();
  const std::string b = absl::AsciiStrToLower(absl::StripAsciiWhitespace(backend->text));
  if (b != "c10d" && b != "static") {
    return absl::InvalidArgumentError(absl::StrCat(
        backend->origin,
        ": expected c10d or static (torchrun's backends trainlet's own "
        "rendezvous replaces), got \"",
        SafeForLog(backend->text, 64),
        "\"; trainlet cannot use an etcd server: drop the flag and point --coordinator "
        "(or --rdzv-endpoint) at the node that hosts trainlet's coordinator"));
  }
  c->notes.push_back(absl::StrCat(
      backend->origin, "=", b,
      " (torchrun's): trainlet's own rendezvous serves it, at --coordinator (--rdzv-endpoint)"));
  return absl::OkStatus();
}

// A Volcano job of several tasks (master + worker, ps + worker): no task
// alone is the job, so the user says what it is.
absl::Status CheckVolcanoTasks(const RunInputs& in) {
  if (in.k8s.volcano_tasks.empty()) return absl::OkStatus();
  const bool nnodes_set = in.parsed.Find("nnodes") != nullptr || in.k8s.nnodes.has_value();
  const bool coordinator_set =
      in.parsed.Find("coordinator") != nullptr || in.k8s.coordinator_host.has_value();
  if ((nnodes_set || in.mpi_worker()) && (coordinator_set || in.launcher())) {
    return absl::OkStatus();
  }
  std::string what;
  if (in.launcher()) {
    what =
        "set TRAINLET_NNODES (or --nnodes) to the number of worker pods; a two-task job "
        "whose launcher task has one pod (this one) needs nothing";
  } else if (in.mpi_worker()) {
    what =
        "set TRAINLET_COORDINATOR (or --coordinator) to the launcher pod's host, e.g. the "
        "first line of its task's host file; a two-task job whose launcher task has one pod "
        "needs nothing";
  } else {
    what =
        "set TRAINLET_NNODES (the pods of every task that trains) and TRAINLET_COORDINATOR "
        "(the host of the pod that hosts the coordinator, e.g. the first line of the master "
        "task's host file) in every task's template, and TRAINLET_NODE_RANK where the order "
        "of the pods matters (or --nnodes, --coordinator, --node-rank)";
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "this pod's Volcano job has several tasks with pods: ", in.k8s.volcano_tasks,
      "; trainlet does not guess which of them train together, in what order, nor where "
      "their coordinator runs (one task alone would train apart from the others): ",
      what));
}

}  // namespace

absl::Status ResolveTopology(RunInputs* in, RunConfig* c) {
  in->k8s = DiscoverKubernetes(in->env, in->sys);
  if (in->mode.mpi != MpiRole::kNone) ApplyMpiConventions(in->mode.mpi, in->env, in->sys, &in->k8s);
  for (const std::string& note : in->k8s.notes) c->discovery_notes.push_back(note);

  // --standalone: torchrun's single-node mode; what the pod says about other
  // nodes does not apply.
  absl::StatusOr<bool> standalone =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "standalone"));
  if (!standalone.ok()) return standalone.status();
  if (*standalone) {
    if (absl::Status s = CheckStandaloneConflicts(in->parsed); !s.ok()) return s;
    in->k8s.nnodes.reset();
    in->k8s.node_rank.reset();
    in->k8s.coordinator_host.reset();
    in->k8s.job_pod_signs.clear();
    in->k8s.volcano_tasks.clear();
  }
  if (absl::Status s = CheckRendezvousBackend(in->parsed, c); !s.ok()) return s;
  if (absl::Status s = CheckVolcanoTasks(*in); !s.ok()) return s;

  // nnodes. A JobSet or Kubeflow pod must say how many pods the job has:
  // guessing 1 would train alone while the peers wait and fail.
  std::optional<OptionValue> nnodes_given = Pick(in->parsed, "nnodes", in->k8s.nnodes);
  if (!nnodes_given.has_value() && !in->k8s.job_pod_signs.empty() && !in->mpi_worker()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this is a pod of a JobSet or Kubeflow job (", absl::StrJoin(in->k8s.job_pod_signs, ", "),
        ") but no node count is set: set TRAINLET_NNODES (or --nnodes, PET_NNODES) to the "
        "number of pods in the job, the same in every pod (TRAINLET_NNODES=1 for a job of one "
        "pod)"));
  }
  in->nnodes_value = nnodes_given.value_or(ValueOrDefault(in->parsed, in->table, "nnodes"));
  absl::StatusOr<NnodesRange> nnodes = ParseNnodesValue(in->nnodes_value);
  if (!nnodes.ok()) return nnodes.status();
  c->nnodes = *nnodes;
  NoteDiscovered(in->nnodes_value, "nnodes", c);
  if (in->mode.mpi != MpiRole::kNone && c->nnodes.elastic()) {
    return absl::InvalidArgumentError(absl::StrCat(
        in->nnodes_value.origin, ": an MPI job has a fixed number of worker pods, got \"",
        absl::CEscape(in->nnodes_value.text), "\" (use --max-restarts to replace lost workers)"));
  }
  if (in->launcher()) {
    // The job's nodes: the workers and the launcher itself.
    if (c->nnodes.max >= kMaxNodes) {
      return absl::InvalidArgumentError(
          absl::StrCat(in->nnodes_value.origin, ": at most ", kMaxNodes - 1, " worker pods"));
    }
    c->nnodes.min = c->nnodes.max = c->nnodes.max + 1;
  }
  in->multi_node = c->nnodes.elastic() || c->nnodes.max > 1;
  return absl::OkStatus();
}

}  // namespace trainlet::agent

// ResolveRoundPolicy (run_resolvers.h): timeouts, restarts and output, and
// the warnings about the job as a whole.
#include "config/run_resolvers.h"

namespace trainlet::agent {

absl::Status ResolveRoundPolicy(RunInputs* in, RunConfig* c) {
  if (absl::Status s =
          ParseDurationOptions(in->parsed, in->table,
                               {
                                   {"grace-period", absl::ZeroDuration(), &c->grace_period},
                                   {"join-timeout", absl::Milliseconds(1), &c->join_timeout},
                                   {"hang-timeout", absl::ZeroDuration(), &c->hang_timeout},
                               });
      !s.ok()) {
    return s;
  }
  absl::StatusOr<bool> prefix =
      ParseBoolValue(ValueOrDefault(in->parsed, in->table, "prefix-output"));
  if (!prefix.ok()) return prefix.status();
  c->prefix_output = *prefix;
  // Validated here, so that a bad regex is a usage error at start-up.
  const OptionValue progress = ValueOrDefault(in->parsed, in->table, "progress-from-output");
  absl::StatusOr<OutputProgressSpec> spec = ParseOutputProgressSpec(progress.text);
  if (!spec.ok()) return spec.status();
  c->progress_from_output = *spec;
  // Asked for by the user, progress from output needs the output: the
  // agent relays it, unchanged. The default auto reads only what is relayed
  // anyway (--prefix-output), so that a user who asked for nothing gets the
  // worker writing straight to the pod's stdout, as before.
  c->relay_output = !c->prefix_output && progress.source != ValueSource::kDefault &&
                    spec->format != OutputFormat::kOff;
  absl::StatusOr<LogLevel> level =
      ParseLogLevelValue(ValueOrDefault(in->parsed, in->table, "log-level"));
  if (!level.ok()) return level.status();
  c->log_level = *level;
  std::optional<OptionValue> restarts = Pick(in->parsed, "max-restarts", in->k8s.max_restarts);
  absl::StatusOr<RoundPolicy> policy = ParseRoundPolicy(in->parsed, in->table, c->nnodes, restarts);
  if (!policy.ok()) return policy.status();
  c->policy = *policy;
  if (restarts.has_value()) NoteDiscovered(*restarts, "max restarts", c);

  if (in->mode.mpi == MpiRole::kNone &&
      (in->env.count("WORKER_ADDRS") != 0 || in->env.count("WORKER_PORT") != 0)) {
    // A v1 XGBoostJob pod's: its machine list goes with its MASTER_ADDR and
    // RANK, which trainlet replaces (worker_env.h).
    c->warnings.push_back(
        "WORKER_ADDRS/WORKER_PORT are set in this pod (a Kubeflow v1 XGBoostJob's) and are "
        "replaced in the workers' environment, with MASTER_ADDR and RANK, by trainlet's own "
        "(or left out where trainlet sets none: several workers per node, or one node), so that "
        "the machine list and the rank describe the same job");
  }
  return absl::OkStatus();
}

}  // namespace trainlet::agent

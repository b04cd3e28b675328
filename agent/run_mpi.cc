#include "agent/run_mpi.h"

#include <memory>

#include "agent/mpi_plans.h"
#include "agent/run_agent.h"
#include "common/clock.h"
#include "common/logging.h"
#include "config/options.h"
#include "launcher/signals.h"
#include "mpi/state_dir.h"

namespace trainlet::agent {

int RunMpi(const MpiConfig& config, const std::map<std::string, std::string>& env) {
  absl::StatusOr<std::string> state_dir =
      mpi::PrepareStateDir(config.state_dir, config.run.job_id, config.run.node_id, env);
  if (!state_dir.ok()) {
    TLOG(kError) << state_dir.status().message();
    return ExitCodeForConfigError(state_dir.status());
  }
  TLOG(kDebug) << "state directory " << *state_dir;
  std::unique_ptr<LaunchPlan> plan;
  PlanSetup setup = [&](launcher::Supervisor* supervisor,
                        RoundOptions* options) -> absl::StatusOr<LaunchPlan*> {
    // The placement check rides on the periodic Reports (round.h).
    options->quiet_when_acked = false;
    if (config.role == MpiRole::kLauncher) {
      auto p = MpiLauncherPlan::Create(config, env, *state_dir, Clock::Monotonic(),
                                       launcher::StdinIsForegroundTerminal(), supervisor, options);
      if (!p.ok()) return p.status();
      plan = *std::move(p);
    } else {
      auto p = MpiWorkerPlan::Create(config, env, *state_dir, supervisor, options);
      if (!p.ok()) return p.status();
      plan = *std::move(p);
    }
    return plan.get();
  };
  return RunAgent(config.run, env, setup);
}

}  // namespace trainlet::agent

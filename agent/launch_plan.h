// LaunchPlan: how a round's local processes come to be, the one seam between
// the agent's executor (agent.h) and what kind of pod this is.
//
//   `trainlet run`           the workers, built at once from the assignment
//                            (TorchrunPlan below: RANK, WORLD_SIZE, ...).
//   `trainlet mpi-launcher`  COMMAND (mpirun ...), once hostfiles and
//                            known_hosts are written and every worker's sshd
//                            is really reachable: seconds, on a thread
//                            (agent/mpi_plans.h).
//   `trainlet mpi-worker`    nothing: ranks arrive through the supervised
//                            sshd; at the round's end the sessions are killed.
//
// The round machine (round.h) decides when; the plan only says what. The
// executor calls Prepare() on StartWorkers and starts what it yields, unless
// the round was stopped meanwhile (CancelPrepare()).
//
// Threading: every method is called from the executor's thread, except
// OnReportResponse() (the rendezvous client's sender thread) and the
// `ready` callback, which may run on any thread.
#ifndef TRAINLET_AGENT_LAUNCH_PLAN_H_
#define TRAINLET_AGENT_LAUNCH_PLAN_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"  // ExitCodeForPlanError
#include "config/run_config.h"
#include "launcher/worker.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

class LaunchPlan {
 public:
  using Ready = std::function<void(absl::StatusOr<std::vector<launcher::ProcessSpec>>)>;
  virtual ~LaunchPlan() = default;

  // Prepares the processes of the round `assignment` describes. `ready` runs
  // exactly once unless CancelPrepare() came first: at once, or later on
  // another thread. Its error fails the round with ExitCodeForPlanError().
  virtual void Prepare(const ::trainlet::v1::Assignment& assignment, Ready ready) = 0;
  // The round stops before `ready` ran; when this returns it will not run.
  virtual void CancelPrepare() {}
  // The round is over (stopped, finished, or about to re-join): clean up
  // what it left (the MPI worker kills its sessions).
  virtual void EndRound() {}
  // Adds plan-specific facts to every report (heartbeats included).
  virtual void DecorateReport(::trainlet::v1::ReportRequest* report) {}
  virtual void OnReportResponse(const ::trainlet::v1::ReportResponse& response) {}
  // Called on every turn of the executor's loop. A non-OK status fails the
  // round like a failed local worker, with ExitCodeForPlanError()'s code:
  // reported to the coordinator, processes stopped (SIGTERM, SIGKILL after
  // the grace period). Return it once per round.
  virtual absl::Status Tick(absl::Time now) { return absl::OkStatus(); }
};

// `trainlet run`: COMMAND x local world size, with the framework env.
class TorchrunPlan : public LaunchPlan {
 public:
  TorchrunPlan(const RunConfig& config, std::map<std::string, std::string> base_env,
               bool give_terminal)
      : config_(config), base_env_(std::move(base_env)), give_terminal_(give_terminal) {}
  void Prepare(const ::trainlet::v1::Assignment& assignment, Ready ready) override;

 private:
  const RunConfig& config_;
  const std::map<std::string, std::string> base_env_;
  const bool give_terminal_;
  bool said_placement_ = false;  // loop thread only.
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_LAUNCH_PLAN_H_

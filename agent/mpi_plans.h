// The launch plans (launch_plan.h) of `trainlet mpi-launcher` and `trainlet
// mpi-worker` (docs/mpi.md).
//
// The launcher's round, one file's worth of state machine:
//
//   assignment --> write files ------> READY CHECK -------> COMMAND runs --+
//   (round N)      hostfiles,          every worker:          |            |
//                  known_hosts,        DNS, port, host key,   | after      |
//                  ssh_config,         job key, `true`        | placement- |
//                  discover script,    (mpi/readiness.h,      | timeout:   |
//                  the ssh gate        on a thread; bounded   | unplaced   |
//                  (names validated    by --ready-timeout)    | workers?   |
//                   first)                  |                 v            |
//                     |                     | bound: round    warn, or with|
//                     | bad name: exit 78   v  fails (Tick)   --require-   |
//                     v                   (69, or a restart)  placement:   |
//                   round fails                               stop, exit 78|
//   lost worker + restarts left: Rejoin -> round N+1 (files rewritten) <---+
//
// --early-command (auto: mpirun/mpiexec whose ssh is trainlet's wrapper)
// starts COMMAND as soon as the files are written, beside the check: the
// wrapper's gate (a FIFO, <state>/ssh-gate) holds every ssh COMMAND starts
// until the check passes and the launcher opens the FIFO, so mpirun's own
// start-up (about 60 ms) overlaps the check and no session reaches a worker
// that has not passed. A check that fails (early or not) fails the round
// through Tick(), like a failed worker: the coordinator's verdict (69, or
// a restart) reaches every worker at once; COMMAND, if early, is stopped
// with its waiting ssh processes. The placement timeout counts from the
// gate's opening. EndRound() stops a check still running; the next round
// makes a new, closed gate.
//
// The worker (docs/mpi.md, "What happens"): sshd as a helper before the
// join; each round writes authorized_keys from the launcher's job key and
// resets the session count its heartbeats carry; the round's end kills
// every process its sshd's sessions left (orted, ranks) and every orphan.
//
// Threading: as LaunchPlan. The launcher's readiness check runs on a thread
// of its own; CancelPrepare() stops and joins it.
#ifndef TRAINLET_AGENT_MPI_PLANS_H_
#define TRAINLET_AGENT_MPI_PLANS_H_

#include <sys/types.h>

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/launch_plan.h"
#include "agent/round.h"
#include "common/clock.h"
#include "config/mpi_config.h"
#include "launcher/supervisor.h"
#include "mpi/flavor.h"
#include "mpi/hosts.h"
#include "mpi/readiness.h"
#include "mpi/ssh_probe.h"

namespace trainlet::agent {

// The hosts the launcher's files list for `assignment`: the launcher first
// when it hosts slots, then every MPI worker in node-rank order.
std::vector<mpi::MpiHost> MpiHostsFor(const ::trainlet::v1::Assignment& assignment);

class MpiLauncherPlan : public LaunchPlan {
 public:
  // Reads or generates the job key, decides the MPI flavour, writes the
  // static files; fills `options` (role, job key, one local process).
  // `supervisor` spares the SSH multiplexing masters at round ends.
  static absl::StatusOr<std::unique_ptr<MpiLauncherPlan>> Create(
      const MpiConfig& config, const std::map<std::string, std::string>& base_env,
      const std::string& state_dir, Clock* clock, bool give_terminal,
      launcher::Supervisor* supervisor, RoundOptions* options);
  ~MpiLauncherPlan() override;

  void Prepare(const ::trainlet::v1::Assignment& assignment, Ready ready) override;
  void CancelPrepare() override;
  void EndRound() override;
  void OnReportResponse(const ::trainlet::v1::ReportResponse& response) override;
  absl::Status Tick(absl::Time now) override;

 private:
  MpiLauncherPlan(const MpiConfig& config, std::map<std::string, std::string> base_env,
                  std::string state_dir, Clock* clock, bool give_terminal);
  absl::Status WriteRoundFiles(const std::vector<mpi::MpiHost>& hosts);
  std::vector<launcher::ProcessSpec> CommandSpec(const ::trainlet::v1::Assignment& assignment,
                                                 const std::vector<mpi::MpiHost>& hosts) const;
  std::string File(const std::string& name) const { return state_dir_ + "/" + name; }
  // Stops the SSH masters whose sockets are not in `keep`.
  void StopMultiplexing(const std::set<std::string>& keep);
  // --early-command: a new, closed gate for this round (false: no FIFO
  // could be made; COMMAND then starts after the check).
  bool CloseGate();
  // The flavour settled (`COMMAND --version` awaited when it ran on a
  // thread), logged, and --early-command decided. Once, before the first
  // round's files.
  void KnowFlavor();
  // Every worker passed: ssh processes waiting at the gate go on.
  void OpenGate();
  // The gate's FIFO removed (the launcher ends: a later ssh must not wait).
  void RemoveGate();

  const MpiConfig& config_;
  const std::map<std::string, std::string> base_env_;
  const std::string state_dir_;
  Clock* const clock_;
  const bool give_terminal_;
  mpi::Flavor flavor_ = mpi::Flavor::kUnknown;
  std::future<mpi::Flavor> detecting_;  // --mpi=auto: `COMMAND --version` on a thread
  bool flavor_known_ = false;
  std::string real_ssh_;  // "" when no ssh client is in PATH.
  std::shared_ptr<mpi::SshProber> prober_;
  // --ssh-multiplex: the readiness probe that leaves OpenSSH masters for
  // COMMAND's ssh (mpi/ssh_master.h), their sockets in mux_base_ (empty: no
  // multiplexing).
  std::shared_ptr<mpi::SshProber> master_prober_;
  std::string mux_base_;
  bool mux_base_is_temp_ = false;  // made under /tmp: removed at the end
  std::unique_ptr<mpi::ReadinessWaiter> waiter_;
  std::thread ready_thread_;
  launcher::Supervisor* supervisor_ = nullptr;  // Wake()s the loop for Tick()
  // --early-command decided at Create; the gate's read-write descriptor
  // while open (-1: closed or none). Only the thread that runs the check
  // (or the executor, between rounds, once it is joined) touches it.
  bool early_ = false;
  int gate_fd_ = -1;

  absl::Mutex mu_;
  // When COMMAND of the current round was started (InfiniteFuture: not yet).
  absl::Time command_started_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool placement_checked_ ABSL_GUARDED_BY(mu_) = false;
  // Warned at the deadline; watching for the sessions arriving late.
  bool placement_late_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time placement_warned_at_ ABSL_GUARDED_BY(mu_);
  // The last answer to the launcher's heartbeat, and when it came.
  std::vector<std::string> unplaced_ ABSL_GUARDED_BY(mu_);
  absl::Time unplaced_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The check failed (or the gate would not open): Tick() returns it once,
  // failing the round whether COMMAND started early or not.
  absl::Status check_failure_ ABSL_GUARDED_BY(mu_);
};

class MpiWorkerPlan : public LaunchPlan {
 public:
  // Host key, sshd files, and sshd started as a helper of `supervisor`;
  // fills `options` (role, host key and port, no local processes).
  static absl::StatusOr<std::unique_ptr<MpiWorkerPlan>> Create(
      const MpiConfig& config, const std::map<std::string, std::string>& base_env,
      const std::string& state_dir, launcher::Supervisor* supervisor, RoundOptions* options);

  void Prepare(const ::trainlet::v1::Assignment& assignment, Ready ready) override;
  void EndRound() override;
  void DecorateReport(::trainlet::v1::ReportRequest* report) override;

 private:
  MpiWorkerPlan(std::string state_dir, launcher::Supervisor* supervisor)
      : state_dir_(std::move(state_dir)), supervisor_(supervisor) {}
  std::string File(const std::string& name) const { return state_dir_ + "/" + name; }
  const std::string state_dir_;
  launcher::Supervisor* const supervisor_;  // runs sshd; knows its pid.
  // --ssh-key-dir: the only job key this worker lets in (empty: the
  // launcher's, whatever it is).
  std::string pinned_job_key_;
  std::string authorized_key_;  // the launcher's job key of the current round.
};

// Kills (SIGKILL, repeatedly: killing one may orphan another) every
// descendant of `sshd_pid` and every child of this process other than
// `keep` and sshd's own per-connection processes (named sshd*: the
// launcher's multiplexing master connections stay for the next round);
// returns how many it killed. Bounded to about a second.
int KillSessions(pid_t sshd_pid, const std::vector<pid_t>& keep);

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_MPI_PLANS_H_

// The agent's executor: drives the round state machine (round.h) and does
// what it asks through AgentSeams, twelve of them: six interfaces with a
// fake in the tests (the worker group, launcher/worker_group.h; the
// rendezvous client, rendezvous/rendezvous_client.h; the clock; the launch
// plan, launch_plan.h; the status reporter, reporter.h; the slow-node
// sampler, progress/slow_signals.h), two places in the
// filesystem (the progress directory and the /proc root), three callbacks
// (health serving, the node's GPU health, the first idle wait) and one fact
// (stdin is a terminal). It holds no policy of its own: every decision is
// the machine's. It never blocks on the network: joins, reports and leaves
// run on the client's threads and come back as events through an inbox.
//
// With a ProgressDir (AgentSeams::progress) it gives each worker
// TRAINLET_PROGRESS_FILE and TRAINLET_TRACEBACK_FILE, watches the directory
// through the worker group's poll (WatchFd) and feeds ProgressReported
// events; on RequestTraceback it sends SIGUSR1 to a worker that opted in; on
// CollectHangEvidence it reads /proc, each worker's output tail and stacks,
// logs the evidence (`hang evidence:` lines) and answers with each worker's
// summary; on HangJudged it keeps the suspect's evidence for status() and
// reports the hang, the suspect's evidence first (docs/progress.md).
//
// With a SlowSignalsSampler (AgentSeams::slow) and an assignment that asks
// (slow_signals_interval_ms), it samples the round's workers while the
// round runs and sends each interval's SlowSignals on a RUNNING Report
// (docs/slow-nodes.md).
//
// Threading: Run() owns the calling thread, which must outlive the workers
// (PDEATHSIG is tied to the forking thread). Client callbacks run on other
// threads; they only queue events in the inbox and Wake() the worker group.
// status() may be called from any thread.
#ifndef TRAINLET_AGENT_AGENT_H_
#define TRAINLET_AGENT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/launch_plan.h"
#include "agent/preflight_runner.h"
#include "agent/reporter.h"
#include "agent/round.h"
#include "agent/warm_workers.h"
#include "common/clock.h"
#include "config/run_config.h"
#include "launcher/worker_group.h"
#include "progress/output_progress.h"
#include "progress/progress.h"
#include "progress/slow_signals.h"
#include "rendezvous/rendezvous_client.h"

namespace trainlet::agent {

struct AgentSeams {
  launcher::WorkerGroup* workers = nullptr;
  rendezvous::RendezvousClient* client = nullptr;
  Clock* clock = nullptr;  // monotonic in production.
  // Health: ready while the workers of a round run. May be empty.
  std::function<void(bool)> set_serving;
  // The agent's stdin is a terminal whose foreground group it is: a single
  // local worker is then given the terminal (tini-like), so pdb works.
  bool stdin_is_terminal = false;
  // What the round's local processes are; null: `run`'s workers
  // (TorchrunPlan).
  LaunchPlan* plan = nullptr;
  // The workers' progress files; null: none (no progress, no hang
  // detection).
  ProgressDir* progress = nullptr;
  // --progress-from-output: progress read from the workers' output (the
  // worker group feeds it as it reads; progress/output_progress.h); null:
  // none. A worker whose progress file has spoken this round is read from
  // its file only.
  OutputProgress* output_progress = nullptr;
  // Where /proc is (hang evidence); tests may point elsewhere.
  std::string proc_root = "/proc";
  // Re-checks this node's GPU health (bounded in time) before an elastic
  // re-join after a local failure: the reasons it is fatal, or none. May be
  // empty (no check).
  std::function<std::vector<std::string>()> node_health;
  // Called once, on the agent's thread, the first time it waits out a whole
  // wait with nothing to do after a round's local processes started:
  // start-up is over, and a job that ends at once never gets here
  // (run_agent.cc drops the start-up code pages, common/code_pages.h). May
  // be empty.
  std::function<void()> idle_with_workers;
  // Health reports to the controller (reporter.h): every new status is
  // handed to it (Update), and events such as a hang with its evidence
  // (AddEvent); neither blocks. Null: no reports.
  StatusReporter* reporter = nullptr;
  // Kubeflow Trainer's TrainJob progress (kubeflow/trainer_status.h): every
  // new status is handed to it too; never blocks. Null: not sent.
  StatusReporter* trainjob_status = nullptr;
  // Called with each round's assignment before its local processes are
  // prepared (--agent-store: AgentStore::OnRound). May be empty.
  std::function<void(const v1::Assignment&)> round_starting;
  // --preflight: when this node's checks run and where their reports go
  // (preflight_runner.h). Null: no checks.
  PreflightRunner* preflight = nullptr;
  // --slow-nodes: samples the round's workers every
  // Assignment.slow_signals_interval_ms (progress/slow_signals.h); each
  // interval's signals go on a RUNNING Report. Null, or an interval of 0:
  // nothing is sampled.
  SlowSignalsSampler* slow = nullptr;
};

// The round's options from the run configuration. `master_port` is the one
// resolved at start (RunConfig::master_port may be 0 = pick one).
RoundOptions RoundOptionsFrom(const RunConfig& config, uint64_t incarnation, int master_port);

// The local workers of a round: COMMAND with the framework environment of
// `assignment` (worker_env.h) on top of `base_env`. Every address variable
// is taken from the assignment unchanged, so it is byte-identical on every
// node.
// With a node probe (config.node_probe): each worker's GPU, CUDA_VISIBLE_DEVICES
// and NUMA placement (gpu_placement.h), and the NCCL/CUDA advice
// (topology/env_advice.h: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, CUDA_DEVICE_ORDER,
// the coordinator's NCCL_HOSTID), none of it over a variable `base_env` has.
// `notes` (may be null) gets one line per placement and piece of advice.
std::vector<launcher::ProcessSpec> WorkerSpecsFor(
    const RunConfig& config, const std::map<std::string, std::string>& base_env,
    const v1::Assignment& assignment, bool give_terminal,
    std::vector<std::string>* notes = nullptr);

class Agent {
 public:
  Agent(const RunConfig& config, std::map<std::string, std::string> base_env, RoundOptions options,
        AgentSeams seams);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs rounds until the machine finishes; returns the exit code. Queued
  // reports and leaves are flushed (bounded) before it returns.
  int Run();

  // The round's state, each local worker's latest progress (age:
  // seams.clock->Now() - WorkerProgress::updated) and the latest hung
  // worker's evidence. Any thread; a copy, refreshed on every turn of Run()'s
  // loop (at least once a second).
  AgentStatus status() const;

 private:
  void Feed(const RoundEvent& event);
  void Execute(const std::vector<RoundAction>& actions);
  void Post(RoundEvent event);
  void DrainInbox();
  void PublishStatus();
  // A plan's Prepare() answered (any thread).
  void PostPrepared(uint64_t round, absl::StatusOr<std::vector<launcher::ProcessSpec>> specs);
  // Starts the prepared processes of the current round, if they are ready.
  void StartPrepared();
  // Feeds what changed in the progress directory.
  void CollectProgress();
  // --slow-nodes: starts sampling the round's workers that just started
  // (when the assignment asks), and stops once the round no longer runs.
  void StartSlowSampling();
  void StopSlowSamplingUnlessRunning();
  void RequestTracebackOf(int local_rank);
  // CollectHangEvidence: every local worker's evidence, logged, kept until
  // the hang is judged; answers with HangEvidenceCollected.
  void CollectEvidence(std::vector<HangEvidence> evidence);
  void OnHangJudged(const HangJudged& judged);

  const RunConfig& config_;
  const std::map<std::string, std::string> base_env_;
  const AgentSeams seams_;
  RoundMachine machine_;
  std::unique_ptr<TorchrunPlan> default_plan_;
  LaunchPlan* plan_;
  // --warm-workers, for `run`'s own plan only.
  std::unique_ptr<WarmWorkers> warm_;
  // --slow-nodes: the coordinator's slow-node lines already logged
  // (Directive.slow_nodes).
  std::shared_ptr<PreflightLines> slow_lines_ = std::make_shared<PreflightLines>("slow node");
  // --preflight=warn: a finished report for the next Report; and the
  // warning lines of the round already logged.
  std::optional<v1::PreflightReport> preflight_report_;
  // exclude|fail: a failed report that could not ride on a re-join by
  // datagram; the Join call it falls back to carries it.
  std::optional<v1::PreflightReport> join_preflight_;
  std::shared_ptr<PreflightLines> preflight_lines_ = std::make_shared<PreflightLines>();
  // --slow-nodes: the round's sampling interval (zero: none), whether the
  // sampler runs, and an interval's signals for the next RUNNING Report.
  absl::Duration slow_interval_;
  bool slow_sampling_ = false;
  std::optional<v1::SlowSignals> slow_report_;
  uint64_t watch_id_ = 0;  // the latest OpenWatch's
  std::unique_ptr<rendezvous::WatchStream> watch_;
  int exit_code_ = -1;
  bool round_started_ = false;  // a round's processes were asked for.
  // seams_.idle_with_workers: before any start, due, called.
  enum class IdleHook { kNotYet, kDue, kDone } idle_hook_ = IdleHook::kNotYet;
  // The round whose Prepare() is in flight (0: none).
  uint64_t preparing_round_ = 0;
  // The pid each worker's progress lines name (pid=N), by local rank: where
  // SIGUSR1 goes when it is in the worker's process group.
  std::map<int, int> progress_pids_;
  // The local ranks whose progress file has changed this round: their
  // output's progress is ignored (the file wins).
  std::set<int> file_progress_;
  // This round's local workers, by local rank (for status()).
  std::map<int, WorkerStatus> workers_;
  // What RequestTraceback did, by local rank, for the evidence: a note, and
  // the process it signalled.
  std::map<int, std::string> traceback_notes_;
  std::map<int, pid_t> traceback_pids_;
  // This round's hang evidence, by local rank, until the hang is judged.
  std::vector<HangEvidence> evidence_;
  // Progress is read at most every kProgressMinInterval: until then the
  // inotify fd is not watched (a worker writing in a tight loop costs the
  // agent at most 10 reads a second).
  absl::Time progress_quiet_until_ = absl::InfinitePast();
  bool progress_fd_watched_ = false;
  // The liveness socket in the worker group's poll (WatchFd slot
  // kLivenessFdSlot), so that a REJOIN datagram wakes the loop at once.
  int liveness_fd_watched_ = -1;

  std::vector<rendezvous::LivenessBytes> acks_;   // the main thread's, reused each turn.
  std::vector<std::string> directive_datagrams_;  // likewise.
  absl::Mutex inbox_mu_;
  std::deque<RoundEvent> inbox_ ABSL_GUARDED_BY(inbox_mu_);
  struct Prepared {
    uint64_t round = 0;
    absl::StatusOr<std::vector<launcher::ProcessSpec>> specs;
  };
  std::optional<Prepared> prepared_ ABSL_GUARDED_BY(inbox_mu_);

  // ReportResponse.udp_heard of the last answered Report: written by the
  // response handler, read by the same Report's callback (same thread).
  std::shared_ptr<std::atomic<bool>> udp_heard_ = std::make_shared<std::atomic<bool>>(false);
  mutable absl::Mutex status_mu_;
  AgentStatus status_ ABSL_GUARDED_BY(status_mu_);
  std::shared_ptr<const HangEvidence> last_hang_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_AGENT_H_

// The agent's round as a pure state machine: events in, actions out. It owns
// every policy decision of `trainlet run` (when to join, start, stop, kill,
// report, leave, re-join, and with which exit code to finish) and performs no
// I/O; the executor (agent.h) turns its actions into calls on the worker
// group, the rendezvous client and the health server, and feeds back what
// happens as events. Time comes from an injected Clock (monotonic in
// production, simulated in tests); every deadline is a point on that clock.
//
//                 start
//                   |  Join
//                   v
//   +--------->  JOINING  --- join failed / signal ------------------+
//   |               |  join answered: OpenWatch, StartWorkers         |
//   |               v                                                 |
//   |            RUNNING  -- every local worker exited 0:             |
//   |               |        Report(SUCCEEDED) --> AWAITING_VERDICT --+--+
//   |               |                               (workers done;   |  |
//   |               |                                no timeout; a    |  |
//   |               |                                Rejoin or signal |  |
//   |               |                                goes on through  |  |
//   |               |                                STOPPING)        |  |
//   |               |  worker failed (Report FAILED), signal            |  |
//   |               |  (forward, Leave), directive (verdict, Rejoin,    |  |
//   |               |  StopWorkers), fenced, coordinator lost          |  |
//   |               v                                                 |  |
//   |            STOPPING until deadline: SIGTERM (or the signal),    |  |
//   |               |   SIGKILL at the deadline or on a second signal  |  |
//   |               |   wait for: every worker process group gone      |  |
//   |               |             AND an outcome (a verdict, or the    |  |
//   |               |             verdict timeout after a failure)     |  |
//   +-- Rejoin -----+                                                 v  v
//                   +-- exit code (ExitCodeFor) ------------------->  DONE
//
// A Rejoin that allows it (ready_by_datagram; docs/protocol.md, "Re-join on
// the stream") keeps the stream open through STOPPING: back in JOINING the
// machine sends READY datagrams for the next round every heartbeat interval
// instead of a Join call (StartJoin.on_stream), and takes the assignment
// that comes down the same stream, which then serves the new round. The
// stream ending, or bringing anything else (a verdict), falls back to the
// Join call; a signal leaves (Leave) at once.
//
// A join answered PREFLIGHT_EXCLUDED (--preflight=exclude left this node
// out for a failed check) stays in JOINING: the machine waits out the
// quarantine the answer names, then joins again with StartJoin.recheck
// (the executor re-runs the checks first).
//
// There is one STOPPING state for every cause. While its outcome is not
// known yet (a local failure waits for the coordinator's verdict) it keeps
// heartbeating and listening; a terminating signal makes the outcome "exit
// with the signal's code" and a second one kills the workers at once.
//
// The round composes two machines of its own, each fed the events that
// are theirs and adding their actions:
//  - CoordinatorContact (coordinator_contact.h): the directive stream, the
//    Report cadence, UDP liveness and acks, the released stream, and the
//    silence limit. The heartbeat carries this node's state (RUNNING,
//    SUCCEEDED, or its FAILED report), so a terminal report that got lost
//    is repeated; once the verdict is out, the coordinator answers
//    heartbeats with it. A lost coordinator (nothing answered for the
//    silence limit; a broken stream is only re-opened) ends a static job
//    with 69 and makes an elastic agent re-join (a restarted coordinator
//    rebuilds the job from the re-joins); after this node's workers all
//    succeeded it means exit 0. A released node's directives come by
//    datagram (REJOIN, DIRECTIVE; a verdict is confirmed with TAKEN).
//  - HangWatch (hang_watch.h): --hang-timeout while RUNNING. The Rejoin or
//    JobFailed that ends a hang carries the job's HangVerdict: the
//    suspect's node fails with 80 (kExitWorkerHung), as does a node that
//    declared a hang and got no verdict in time (judged here).
//
// Threading: not thread-safe; the executor drives it from one thread.
#ifndef TRAINLET_AGENT_ROUND_H_
#define TRAINLET_AGENT_ROUND_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/coordinator_contact.h"
#include "agent/hang_watch.h"
#include "agent/round_io.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "launcher/worker.h"
#include "progress/hang_evidence.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

namespace v1 = ::trainlet::v1;

// A re-join by datagram falls back to the Join call when this many READY
// datagrams in a row (one per heartbeat interval: half the heartbeat
// timeout) got no ack: UDP to or from the coordinator does not get through,
// or the coordinator is gone without closing the stream.
inline constexpr int kReadiesBeforeJoin = 5;

// The exit policy (Ending, EndingFacts, ExitCodeFor) is common/exit_codes.h's.

// ---- The machine.

struct RoundOptions {
  v1::Member me;
  std::string job_id;
  int rank_hint = -1;
  std::string advertise_addr;
  int local_world_size = 1;
  int master_port = 0;
  // --agent-store: the port of this agent's store, listening before the
  // first Join (JoinRequest.agent_store_port); 0: none.
  int agent_store_port = 0;
  bool want_nodes = true;  // ask for the member list (TF_CONFIG).
  // Offer UDP liveness datagrams (JoinRequest.udp_liveness).
  bool udp_liveness = true;
  // While the coordinator acks the datagrams, report only on a change and
  // every kAckedReportInterval. False where the plan's state rides on the
  // periodic Reports (the MPI launcher's placement check: each worker's
  // session count goes up in its Reports, the unplaced list comes down in
  // the launcher's answers).
  bool quiet_when_acked = true;
  v1::Role role = v1::ROLE_NODE;
  v1::SshInfo ssh;        // MPI: this node's sshd, or the launcher's job key.
  v1::Topology topology;  // what this node has (its probe's summary), sent in every join.
  // Where it sits, widest first, and how it asks ranks to be ordered
  // (JoinRequest.domains, .rank_order, .scheduler_placement,
  // .rank_hint_from_index; docs/topology.md, "Rank order").
  std::vector<v1::TopologyDomain> domains;
  v1::RankOrder rank_order = v1::RANK_ORDER_AUTO;
  std::string scheduler_placement;
  bool rank_hint_from_index = false;
  // Processes the round starts here: -1 = the assignment's local world size
  // (`run`); 1 = the MPI launcher's COMMAND; 0 = none (an MPI worker: its
  // ranks arrive through sshd, and it holds until the job's verdict).
  int local_processes = -1;
  bool elastic = false;         // max_restarts > 0: lost coordinator -> re-join.
  absl::Duration grace_period;  // RunConfig's (RoundOptionsFrom)
  absl::Duration join_timeout;
  // How long a stop whose outcome is the coordinator's to decide (a local
  // failure, a StopWorkers directive) waits for the verdict.
  absl::Duration verdict_timeout = absl::Seconds(10);
  // After SIGKILL, how long to wait for the process groups to empty before
  // giving up on them (uninterruptible sleep in a driver).
  absl::Duration kill_timeout = absl::Seconds(10);
  // Re-opening a broken Watch stream: backoff from min to max.
  absl::Duration reopen_min_backoff = absl::Milliseconds(20);
  absl::Duration reopen_max_backoff = absl::Seconds(1);
  // At most one "still waiting" line per this while joining.
  absl::Duration progress_log_interval = absl::Seconds(10);
  // --hang-timeout: zero is off.
  absl::Duration hang_timeout;
  // How long to wait at most for a hung worker's Python stacks after
  // SIGUSR1; the wait ends earlier once the traceback file grew and then
  // did not grow for traceback_quiet (faulthandler has written every
  // thread), checked every traceback_poll.
  absl::Duration traceback_wait = absl::Seconds(2);
  absl::Duration traceback_quiet = absl::Milliseconds(100);
  absl::Duration traceback_poll = absl::Milliseconds(20);
  // How long a node that reported its hang evidence waits for the job's
  // verdict before it judges by its own workers (the coordinator judges
  // within rendezvous::kHangEvidenceWait of the declaration).
  absl::Duration hang_verdict_wait = absl::Seconds(10);
};

enum class RoundState { kJoining, kRunning, kAwaitingVerdict, kStopping, kDone };
absl::string_view RoundStateName(RoundState state);

// A local worker's latest progress in the current round.
struct WorkerProgress {
  int local_rank = 0;
  int global_rank = 0;
  std::string line;  // the last progress line (validated, < 1.6 KiB); "" for touches only.
  // When it last reported, on the agent's clock (AgentSeams::clock): its
  // age is clock->Now() - updated.
  absl::Time updated = absl::InfinitePast();
  int64_t updates = 0;  // reports this round.
  // Its first line of the round with a step, and when (the controller's
  // goodput: where start-up or re-warm ends, docs/goodput.md).
  std::string first_line;
  absl::Time first_updated = absl::InfinitePast();
};

// One of this round's local workers, as the executor last saw it (for the
// controller's reports; Agent::status() fills these in).
struct WorkerStatus {
  int local_rank = 0;
  int global_rank = -1;
  pid_t pid = 0;  // 0 once it exited.
  bool exited = false;
  int exit_code = 0;  // once exited: shell style (128+N for signal N).
};

// What the agent is doing, for logs, health and later reports.
struct AgentStatus {
  RoundState state = RoundState::kJoining;
  uint64_t round = 0;  // the current (or last) round; 0 before the first.
  int node_rank = -1;
  int nnodes = 0;
  int world_size = 0;
  int workers_running = 0;
  int restart_count = 0;
  std::string last_failure;  // human-readable; empty when none.
  int exit_code = -1;        // once kDone.
  // Once kDone: the ending and why ("job failed: worker local rank 1 (global
  // rank 3) on node n1 exited with code 3"), as the exit line says it.
  std::string exit_reason;
  // This round's local workers that reported progress, by local rank.
  std::vector<WorkerProgress> progress;
  int hangs = 0;  // workers declared hung since the agent started.
  // The evidence of the latest hung worker (Agent::status() fills it in;
  // the machine's own status leaves it empty).
  std::shared_ptr<const HangEvidence> last_hang;
  // This round's local workers (Agent::status() fills them in).
  std::vector<WorkerStatus> workers;
};

class RoundMachine {
 public:
  RoundMachine(RoundOptions options, Clock* clock);

  // The first actions: join round 1.
  std::vector<RoundAction> Start();
  std::vector<RoundAction> Handle(const RoundEvent& event);

  // When Handle(Tick{}) has something to do next (heartbeat, deadline,
  // re-open, progress line); InfiniteFuture when nothing is scheduled.
  absl::Time NextDeadline() const;

  RoundState state() const { return state_; }
  bool done() const { return state_ == RoundState::kDone; }
  const AgentStatus& status() const { return status_; }

 private:
  enum class Outcome { kUndecided, kExit, kRejoin };
  using Actions = std::vector<RoundAction>;

  // `stream_open`: the assignment came down the open stream (a re-join by
  // datagram), which stays open for the new round.
  void OnJoinAnswered(const JoinAnswered& e, Actions* out, bool stream_open = false);
  // How a join's answer ends the agent (a signal while joining, a verdict,
  // an error); nullopt: the assignment starts the round.
  std::optional<EndingFacts> JoinEnding(const JoinAnswered& e, Actions* out);
  // A fresh round of `assignment`: nothing of the previous one counts.
  void BeginRound(const v1::Assignment& assignment, bool stream_open, Actions* out);
  void LogRound(const v1::Assignment& assignment) const;
  void OnWorkersStarted(const WorkersStarted& e, Actions* out);
  void OnWorkerExited(const WorkerExited& e, Actions* out);
  void OnWorkersGone(Actions* out);
  void OnSignal(int sig, Actions* out);
  void OnDirective(const DirectiveReceived& e, Actions* out);
  // A directive of this round's coordinator, from the stream or a datagram.
  void ApplyDirective(const v1::Directive& d, Actions* out);
  void OnStreamEnded(const StreamEnded& e, Actions* out);
  void OnReportAnswered(const ReportAnswered& e, Actions* out);
  void OnDatagram(const DatagramReceived& e, Actions* out);
  // A DIRECTIVE datagram: taken (as the stream's directive) when it is this
  // node's own and its coordinator's; a verdict is confirmed with TAKEN.
  void OnDirectiveDatagram(const DirectiveDatagramReceived& e, Actions* out);
  void OnLivenessAcked(const rendezvous::LivenessDatagram& ack);
  // A REJOIN datagram: the Rejoin (ready_by_datagram) for round
  // rejoin.round, taken as the stream's would be when it is this node's and
  // for a round above its own.
  void OnRejoinDatagram(const rendezvous::LivenessDatagram& rejoin, Actions* out);
  // The Rejoin `d` (ready_by_datagram) that came by datagram while running:
  // taken as the stream's, for a round above this node's, and confirmed.
  void TakeRejoinByDatagram(const v1::Directive& d, Actions* out);
  void OnTick(Actions* out);
  // JOINING: the "still waiting" line; READYs while re-joining by datagram.
  void TickJoining(absl::Time now, Actions* out);
  // STOPPING: SIGKILL at the grace period's end; giving up on the groups.
  void TickStopping(absl::Time now, Actions* out);
  // What a heartbeat says with no terminal report to repeat: RUNNING, and
  // the hang's report while its verdict is awaited.
  v1::ReportRequest HeartbeatReport() const;
  void OnLocalFailure(const LocalFailure& e, Actions* out);
  void OnProgress(const ProgressReported& e);
  void OnNodeUnhealthy(const NodeUnhealthy& e, Actions* out);
  // RUNNING: the hang watch's turn; a hang judged here fails the round.
  void TickHangWatch(absl::Time now, Actions* out);
  // A Rejoin's or JobFailed's HangVerdict (`hang`, may be empty): the
  // suspect's node fails with 80. Returns what the directive's log line
  // adds (where this node's evidence is).
  std::string TakeHangVerdict(const v1::HangVerdict& hang, Actions* out);

  // `recheck`: after a quarantine (StartJoin::recheck).
  void Join(Actions* out, bool recheck = false);
  // The part of a join that both ways share; true after a local failure.
  bool BeginJoining();
  // Re-joins with READY datagrams, keeping the stream (Rejoin.
  // ready_by_datagram): no Join call, the assignment comes down the stream.
  void JoinByDatagram(Actions* out);
  // A re-join by datagram that cannot finish (its stream ended, or brought
  // something other than the assignment): the Join call instead.
  void FallBackToJoin(absl::string_view why, Actions* out);
  // A directive on the stream while re-joining by datagram.
  void OnDirectiveWhileReady(const v1::Directive& d, Actions* out);
  // The round closed with this node and restarted again before its
  // assignment came: READYs for `round` from now on.
  void RetargetReadies(uint64_t round, absl::string_view why);
  // No more READYs: the re-join by datagram is over (answered or not).
  void StopReadies();
  // How a job verdict (JobFailed, JobFinished) ends this agent.
  static EndingFacts FactsOfVerdict(const v1::Directive& d);
  // Leaves RUNNING/AWAITING for STOPPING: signals the workers (SIGTERM, or
  // `forward_signal`) unless they are all gone already.
  void BeginStop(absl::string_view why, int forward_signal, Actions* out);
  // The coordinator's answer (stream end or RPC status) says this agent
  // must go: fenced, job over, round moved on. True when handled.
  bool HandleFinalError(const absl::Status& status, Actions* out);
  void CoordinatorLost(absl::string_view why, Actions* out);
  // Finishes or re-joins when the stop is complete.
  void MaybeComplete(Actions* out);
  void FinishWith(Actions* out);
  int LocalProcesses() const;
  bool OutcomePending() const;
  v1::ReportRequest NewReport(v1::ReportRequest::State state) const;
  void SetState(RoundState state);
  std::string WorkerName(const launcher::ProcessExit& exit) const;

  const RoundOptions options_;
  Clock* const clock_;
  // The two machines the round composes (see above).
  CoordinatorContact contact_;
  HangWatch hang_watch_;

  RoundState state_ = RoundState::kJoining;
  AgentStatus status_;

  // The round's assignment (valid from RUNNING on).
  v1::Assignment assignment_;
  uint64_t last_round_ = 0;
  int last_restart_count_ = 0;

  // Joining.
  absl::Time join_started_;
  absl::Time next_progress_log_ = absl::InfiniteFuture();
  bool join_cancelled_ = false;
  // The last Rejoin said this node may re-join round rejoin_round_ by
  // datagram (cleared by every assignment).
  bool rejoin_by_datagram_ = false;
  uint64_t rejoin_round_ = 0;
  // Re-joining by datagram now: READY every heartbeat interval until the
  // assignment comes down the stream, or the join timeout.
  bool ready_join_ = false;
  absl::Time next_ready_ = absl::InfiniteFuture();
  absl::Time join_deadline_ = absl::InfiniteFuture();
  // Left out of a round for a failed preflight check: joins again then.
  absl::Time quarantined_until_ = absl::InfiniteFuture();
  // READYs sent since the last ack of one (the coordinator acks each it
  // holds): kReadiesBeforeJoin of them and the Join call takes over.
  int readies_unacked_ = 0;
  bool ready_acked_ = false;  // the coordinator acked a READY: it holds the re-join.
  // A verdict on the kept stream while a fallback Join was in flight: the
  // Join is cancelled and its answer ends the agent with this.
  std::optional<EndingFacts> join_verdict_;

  // Workers of the round. What the heartbeats repeat once every local
  // worker exited 0 (SUCCEEDED) or one failed (its FAILED report) is the
  // contact's (CoordinatorContact::Repeat).
  int workers_running_ = 0;
  int workers_ok_ = 0;
  bool workers_gone_ = true;
  int running_failure_ = 0;
  int any_failure_ = 0;

  // Stopping.
  Outcome outcome_ = Outcome::kUndecided;
  EndingFacts facts_;
  int terminating_signals_ = 0;  // how many the user sent (2nd: kill now).
  int signal_ = 0;               // the first terminating signal.
  absl::Time kill_at_ = absl::InfiniteFuture();
  absl::Time give_up_at_ = absl::InfiniteFuture();
  absl::Time verdict_deadline_ = absl::InfiniteFuture();
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_ROUND_H_

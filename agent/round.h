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
// There is one STOPPING state for every cause. While its outcome is not
// known yet (a local failure waits for the coordinator's verdict) it keeps
// heartbeating and listening; a terminating signal makes the outcome "exit
// with the signal's code" and a second one kills the workers at once.
//
// Liveness (docs/protocol.md): when the Assignment offers UDP liveness, the
// machine asks for a liveness datagram (SendLiveness, signed with the
// member's key, seq strictly increasing) every heartbeat interval from its
// tick, so that an agent whose loop hangs stops proving it is alive. Its
// Report heartbeat goes every interval (the first after the Assignment's
// first_report_delay_ms, which spreads a large round's first Reports) until
// an answer says the coordinator hears the datagrams (udp_heard), then every
// Assignment.report_interval_ms (timeout - interval, longer in rounds of more
// than ~2,000 nodes; it still tells the agent the coordinator is alive and
// repeats its state), and back
// to every interval as soon as an answer says it does not: a network that
// drops UDP costs more Reports, not a false loss. While the coordinator acks
// the datagrams (DatagramReceived: an ack, every timeout/4: it lives and hears this
// node), a running node reports only every kAckedReportInterval; acks that
// stop for 0.6 timeouts put it back on the Reports above at once.
//
// Released streams (docs/protocol.md): in a large round the coordinator may
// end this node's stream with a Release once it acks the datagrams. Taken
// while acks flow (else refused: the stream is re-opened, and no release is
// taken until acks have flowed for kReleaseRetryAfter), the node then runs
// without a stream: no re-open, no periodic
// Report; a Rejoin comes as a REJOIN datagram (or, reason and all, as a
// DIRECTIVE datagram), the next assignment and the
// verdict as DIRECTIVE datagrams (a verdict is confirmed with a TAKEN
// datagram), and acks that stop (or do not come within the ack silence of a
// new round) bring the stream back:
//
//   RUNNING, acked --Release--> released --acks stop--> OpenWatch (refusing
//   releases) --acks for kReleaseRetryAfter--> OpenWatch accepting one again
//
// The coordinator is "lost" when nothing it answered (join, directive,
// heartbeat answer, ack) has arrived for 1.05 heartbeat timeouts plus, while
// no acks come, the part of the Report interval above timeout/10, not when a
// stream breaks:
// a broken Watch stream is re-opened with backoff while heartbeats go on
// (the coordinator waits kStreamLossGrace for it before counting the node as
// lost). A lost coordinator ends a static job with 69 and makes an elastic
// agent re-join (a restarted coordinator rebuilds the job from the
// re-joins); after this node's workers all succeeded it means exit 0.
//
// The heartbeat carries this node's state (RUNNING, SUCCEEDED, or its FAILED
// report), so a terminal report that got lost is repeated; once the verdict
// is out, the coordinator answers heartbeats with it.
//
// Hang detection (--hang-timeout, docs/progress.md): while RUNNING, a local
// worker that reported progress (ProgressReported) and then stays silent
// for the hang timeout is declared hung at that deadline. The one declared
// hung is often a victim, waiting in a collective for the real culprit, so
// nothing is stopped until the job has judged (docs/progress.md, "Who
// hung"): the machine tells the coordinator (a Report whose HangReport
// declares it), which asks every other node for its evidence
// (CollectEvidence), and takes the evidence of every local worker. It asks
// each for its Python stacks (RequestTraceback; for each signalled one it
// waits until its traceback file, once it grew, has not grown for
// traceback_quiet, checked every traceback_poll through CheckTraceback;
// at most traceback_wait in all), then for the evidence (CollectHangEvidence,
// answered with each worker's summary: HangEvidenceCollected), which it
// reports. The coordinator names the suspect job-wide and fails the round
// for it: the Rejoin or JobFailed carries the HangVerdict. The suspect's
// node fails with exit code 80 (kExitWorkerHung) and reports the hang
// (HangJudged); the others are its victims. Without a verdict within
// hang_verdict_wait, a node that declared a hang judges its own workers
// (the same rules) and fails the round as a failed worker with code 80.
//
//   RUNNING --silence >= hang_timeout: Report(hang declared)--+
//      |     --CollectEvidence directive--------------------+ |
//      |                                                    v v
//      |   collecting: RequestTraceback for every running local worker;
//      |     TracebackRequested / TracebackSize until each settled, or
//      |     traceback_wait
//      |                      | CollectHangEvidence
//      |                      v
//      |   summarizing --HangEvidenceCollected: Report(hang collected)-->
//      |   awaiting the verdict (heartbeats repeat the report)
//      |       | Rejoin / JobFailed with a HangVerdict: the verdict line;
//      |       |   the suspect's node: running failure 80, HangJudged
//      |       |   --> STOPPING (as any Rejoin / JobFailed)
//      |       | nothing within hang_verdict_wait: declared here? judged
//      |       |   here, HangJudged, Report(FAILED, 80) --> STOPPING;
//      |       |   else: judged (nothing more this round)
//      +-- progress resets the timer while nothing is declared
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
#include "common/clock.h"
#include "launcher/worker.h"
#include "progress/hang_evidence.h"
#include "rendezvous/liveness_datagram.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

namespace v1 = ::trainlet::v1;

// The longest Report interval the agent takes from an Assignment
// (report_interval_ms, which grows with the round: 20 s at 10,000 nodes);
// a larger value is clamped, so a bad answer cannot silence the agent.
inline constexpr absl::Duration kMaxHeardReportInterval = absl::Minutes(5);
// A re-join by datagram falls back to the Join call when this many READY
// datagrams in a row (one per heartbeat interval: half the heartbeat
// timeout) got no ack: UDP to or from the coordinator does not get through,
// or the coordinator is gone without closing the stream.
inline constexpr int kReadiesBeforeJoin = 5;
// While the coordinator acknowledges this node's liveness datagrams
// (rendezvous::AckInterval: every timeout/4), the acks prove both that it
// lives and that it hears the node, so a running node with nothing new to
// say reports only this often (state changes still go at once). Acks that
// stop for kAckSilenceFraction of the timeout put the node back on the
// Report interval of the Assignment.
inline constexpr absl::Duration kAckedReportInterval = absl::Minutes(5);
inline constexpr double kAckSilenceFraction = 0.6;
// A node that refused a release (or ended one: its acks stopped) accepts one
// again once acks have come this long since, with a new stream.
inline constexpr absl::Duration kReleaseRetryAfter = absl::Minutes(2);

// ---- Exit policy: one table from how the agent's run ended to its exit code
// (docs/exit-codes.md is the user copy).

enum class Ending {
  kJobFinished,                  // the coordinator: every worker of the job exited 0.
  kJobFailed,                    // the coordinator: the job failed.
  kSignal,                       // a terminating signal stopped the agent.
  kFenced,                       // the coordinator declared this incarnation lost.
  kCoordinatorLost,              // nothing from the coordinator for its silence limit.
  kCoordinatorLostAfterSuccess,  // ... after every local worker exited 0.
  kNoVerdict,                    // no verdict within the verdict timeout after a stop.
  kJoinFailed,                   // the rendezvous failed (code decided by the error).
  kSpawnFailed,                  // COMMAND could not be started (126/127/71...).
  kNodeUnhealthy,                // elastic: this node's GPU health is fatal (81).
};
absl::string_view EndingName(Ending ending);

struct EndingFacts {
  Ending ending = Ending::kJobFinished;
  // The first worker that failed while the round ran (not one stopped by
  // us), or 0.
  int running_failure = 0;
  // The first worker that exited non-zero at all, stops included, or 0.
  int any_failure = 0;
  int signal = 0;                   // the terminating signal, or 0.
  bool restarts_exhausted = false;  // kJobFailed: the budget ran out.
  int given_code = 0;               // kJoinFailed, kSpawnFailed.
  // What happened, for a person: the coordinator's reason for a verdict,
  // the error of a failed join, ...; empty when the ending says it all.
  std::string why;
};

// The exit code for `facts` by the exit policy table.
int ExitCodeFor(const EndingFacts& facts);

// ---- Events the executor feeds in.

struct JoinAnswered {
  absl::StatusOr<v1::Assignment> result;
};
struct WorkersStarted {
  absl::Status status;
  // The exit code a failure means; 0: launcher::ExitCodeForSpawnError.
  int exit_code = 0;
};
struct WorkerExited {
  launcher::ProcessExit exit;
};
struct WorkersGone {};  // every worker process group of the round is empty.
struct SignalReceived {
  int signal = 0;
};
struct DirectiveReceived {
  uint64_t watch_id = 0;
  v1::Directive directive;
};
struct StreamEnded {
  uint64_t watch_id = 0;
  absl::Status status;
};
struct ReportAnswered {
  uint64_t round = 0;
  v1::ReportRequest::State state = v1::ReportRequest::STATE_UNSPECIFIED;
  absl::Status status;
  bool udp_heard = false;  // ReportResponse.udp_heard of a successful answer.
};
// A datagram that came in on the liveness socket (only the coordinator's
// address reaches it: the socket is connected), not yet checked (kind,
// slot, incarnation, round, seq, MAC): an ack of this node's datagrams, or
// a REJOIN (the Rejoin directive, ready_by_datagram, as a datagram).
struct DatagramReceived {
  rendezvous::LivenessBytes bytes{};
};
// A longer datagram on the liveness socket, not yet checked: a DIRECTIVE
// datagram (rendezvous/liveness_datagram.h, kind 4) once this node's stream
// was released.
struct DirectiveDatagramReceived {
  std::string bytes;
};
struct Tick {};  // time passed; the machine reads the clock.
// The launch plan found the round cannot go on (the MPI launcher's
// placement check with --require-placement): handled like a failed local
// worker with `exit_code`.
struct LocalFailure {
  int exit_code = 0;
  std::string message;
};

// A local worker's progress file changed (progress/progress.h). `line`: its
// validated last line; empty for a touch.
struct ProgressReported {
  int local_rank = 0;
  std::string line;
};
// The executor's answer to RequestTraceback: whether it signalled the
// worker (it opted in), so that the machine waits for the stacks.
struct TracebackRequested {
  int local_rank = 0;
  bool sent = false;
  // The traceback file's size just before the signal (-1: none), so that
  // only what the worker writes after it counts.
  int64_t bytes = -1;
};
// The executor's answer to CheckTraceback: the traceback file's size now
// (-1: none).
struct TracebackSize {
  int local_rank = 0;
  int64_t bytes = -1;
};
// The executor's answer to CollectHangEvidence: each local worker's
// summary (HangReport.workers; `collected` set).
struct HangEvidenceCollected {
  v1::HangReport report;
};
// The executor found this node's GPU health fatal (node_probe.h's
// FatalGpuHealth) before a re-join: an elastic agent leaves with 81.
struct NodeUnhealthy {
  std::string why;
};

using RoundEvent =
    std::variant<JoinAnswered, WorkersStarted, WorkerExited, WorkersGone, SignalReceived,
                 DirectiveReceived, StreamEnded, ReportAnswered, DatagramReceived, Tick,
                 LocalFailure, ProgressReported, TracebackRequested, NodeUnhealthy, TracebackSize,
                 DirectiveDatagramReceived, HangEvidenceCollected>;

// ---- Actions it asks the executor to perform.

struct StartJoin {
  v1::JoinRequest request;
  absl::Duration timeout;
  // A re-join after a local failure (a worker failed or hung): the executor
  // re-checks the node's health first (NodeUnhealthy instead of joining).
  bool after_local_failure = false;
  // A re-join by datagram (RoundMachine: the machine sends READY datagrams
  // and takes the assignment from the open stream): no Join call.
  bool on_stream = false;
};
struct CancelJoin {};
// Open the directive stream of `round` (closing any older one); its events
// carry `watch_id`, so that those of an older stream can be told apart.
struct OpenWatch {
  v1::WatchRequest request;
  uint64_t watch_id = 0;
};
struct CloseWatch {};
struct StartWorkers {
  v1::Assignment assignment;  // the executor builds the workers' environment.
};
struct SignalWorkers {
  int signal = 0;
};
struct SendReport {
  v1::ReportRequest request;
};
struct SendLeave {
  v1::LeaveRequest request;
};
// One UDP liveness datagram to the coordinator (best effort, never blocks).
struct SendLiveness {
  rendezvous::LivenessBytes datagram;
};
struct SetServing {
  bool serving = false;
};
struct Finish {
  int exit_code = 0;
};

// A local worker was declared hung: if it opted in (docs/progress.md), send
// it SIGUSR1 for its Python stacks; answer with TracebackRequested.
struct RequestTraceback {
  int local_rank = 0;
};
// While the stacks are awaited: answer with TracebackSize (a stat()).
struct CheckTraceback {
  int local_rank = 0;
};
// Save every local worker's evidence (hang_evidence.h) now, before
// anything is stopped, and log it; `evidence` holds what the machine knows
// of each (rank, round, silence, last progress, whether it was declared
// hung here), by local rank; the executor adds the rest and answers with
// HangEvidenceCollected.
struct CollectHangEvidence {
  std::vector<HangEvidence> evidence;
};
// The hang is judged: `summary` ("suspect rank 2 on node-b (...)") names the
// suspect, local rank `suspect_local_rank` of this node (-1: another
// node's). The suspect's node keeps its evidence for status() and reports
// the hang to the controller, the suspect's first.
struct HangJudged {
  int suspect_local_rank = -1;
  std::string summary;
};

using RoundAction =
    std::variant<StartJoin, CancelJoin, OpenWatch, CloseWatch, StartWorkers, SignalWorkers,
                 SendReport, SendLeave, SendLiveness, SetServing, Finish, RequestTraceback,
                 CollectHangEvidence, CheckTraceback, HangJudged>;

// ---- The machine.

struct RoundOptions {
  v1::Member me;
  std::string job_id;
  int rank_hint = -1;
  std::string advertise_addr;
  int local_world_size = 1;
  int master_port = 29500;
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
  // Processes the round starts here: -1 = the assignment's local world size
  // (`run`); 1 = the MPI launcher's COMMAND; 0 = none (an MPI worker: its
  // ranks arrive through sshd, and it holds until the job's verdict).
  int local_processes = -1;
  bool elastic = false;  // max_restarts > 0: lost coordinator -> re-join.
  absl::Duration grace_period = absl::Seconds(25);  // as RunConfig's
  absl::Duration join_timeout = absl::Minutes(10);
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
  absl::Duration hang_timeout = absl::ZeroDuration();
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
  // The release is over (acks stopped, or never came): the stream again,
  // and no release for the rest of this agent's life.
  void Unrelease(absl::string_view why);
  // Whether to open a stream that accepts a release again (see above).
  bool ReleaseRetryDue(absl::Time now) const;
  void OnLivenessAcked(const rendezvous::LivenessDatagram& ack);
  // A REJOIN datagram: the Rejoin (ready_by_datagram) for round
  // rejoin.round, taken as the stream's would be when it is this node's and
  // for a round above its own.
  void OnRejoinDatagram(const rendezvous::LivenessDatagram& rejoin, Actions* out);
  // The Rejoin `d` (ready_by_datagram) that came by datagram while running:
  // taken as the stream's, for a round above this node's, and confirmed.
  void TakeRejoinByDatagram(const v1::Directive& d, Actions* out);
  // After a Report failed (a state change among them): the next one at
  // most an interval from now, whatever the acks allowed.
  void ReportSoon();
  absl::Duration AckSilence() const;
  void OnTick(Actions* out);
  void OnLocalFailure(const LocalFailure& e, Actions* out);
  void OnProgress(const ProgressReported& e);
  void OnTracebackRequested(const TracebackRequested& e, Actions* out);
  void OnTracebackSize(const TracebackSize& e, Actions* out);
  void OnNodeUnhealthy(const NodeUnhealthy& e, Actions* out);
  void OnHangEvidenceCollected(const HangEvidenceCollected& e, Actions* out);
  // The earliest point a running worker would be declared hung, a stack is
  // to be checked, or the stacks' or the verdict's wait ends; InfiniteFuture
  // when none.
  absl::Time HangDeadline() const;
  // RUNNING: declares a silent worker hung; moves the evidence along.
  void CheckHang(absl::Time now, Actions* out);
  // Takes the evidence of every running local worker (declared here, or
  // asked by the coordinator: `why`).
  void StartCollecting(absl::string_view why, Actions* out);
  // Every stack settled (or the wait is over): CollectHangEvidence.
  void MaybeFinishCollecting(bool wait_over, Actions* out);
  // No verdict in time: judges this node's workers.
  void JudgeLocally(Actions* out);
  // A Rejoin's or JobFailed's HangVerdict (`hang`, may be empty): the
  // suspect's node fails with 80. Returns what the directive's log line
  // adds (where this node's evidence is).
  std::string TakeHangVerdict(const v1::HangVerdict& hang, Actions* out);

  void Join(Actions* out);
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
  v1::WatchRequest NewWatchRequest(uint64_t round) const;
  // An ack of one of this node's recent datagrams of `round`, under its key
  // (and newer than the last one taken, which it then becomes).
  bool TakeOwnAck(const rendezvous::LivenessDatagram& ack, uint64_t round);
  // Leaves RUNNING/AWAITING for STOPPING: signals the workers (SIGTERM, or
  // `forward_signal`) unless they are all gone already.
  void BeginStop(absl::string_view why, int forward_signal, Actions* out);
  // Decides how the round ends once the workers are gone.
  void Decide(Outcome outcome, Ending ending, Actions* out);
  // The coordinator's answer (stream end or RPC status) says this agent
  // must go: fenced, job over, round moved on. True when handled.
  bool HandleFinalError(const absl::Status& status, Actions* out);
  void CoordinatorLost(absl::string_view why, Actions* out);
  // Finishes or re-joins when the stop is complete.
  void MaybeComplete(Actions* out);
  void FinishWith(Actions* out);
  void Heartbeat(Actions* out);
  // The Report interval now: the heartbeat interval, or timeout - interval
  // while the coordinator hears this node's datagrams.
  absl::Duration ReportInterval() const;
  void NoteContact();
  int LocalProcesses() const;
  bool OutcomePending() const;
  v1::ReportRequest NewReport(v1::ReportRequest::State state) const;
  void SetState(RoundState state);
  absl::Duration SilenceLimit() const;
  std::string WorkerName(const launcher::ProcessExit& exit) const;

  const RoundOptions options_;
  Clock* const clock_;

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
  // READYs sent since the last ack of one (the coordinator acks each it
  // holds): kReadiesBeforeJoin of them and the Join call takes over.
  int readies_unacked_ = 0;
  bool ready_acked_ = false;  // the coordinator acked a READY: it holds the re-join.
  // A verdict on the kept stream while a fallback Join was in flight: the
  // Join is cancelled and its answer ends the agent with this.
  std::optional<EndingFacts> join_verdict_;

  // Workers of the round.
  int workers_running_ = 0;
  int workers_ok_ = 0;
  bool workers_gone_ = true;
  int running_failure_ = 0;
  int any_failure_ = 0;
  bool reported_success_ = false;
  // What the heartbeat says: RUNNING, then SUCCEEDED once every local worker
  // exited 0, or this FAILED report once one failed. A terminal report that
  // got lost is so repeated until the coordinator acts on it.
  std::optional<v1::ReportRequest> failure_report_;

  // The directive stream and contact with the coordinator.
  uint64_t watch_id_ = 0;
  bool watch_open_ = false;
  // The coordinator released the stream (a Release, taken while acked):
  // directives come by datagram; no stream to re-open, no periodic Report.
  bool stream_released_ = false;
  // A release was refused or ended: the stream stays (WatchRequest.
  // accepts_release off) until kReleaseRetryAfter after that, if acks flow.
  bool release_refused_ = false;
  absl::Time release_refused_at_ = absl::InfinitePast();
  // When the current round's assignment came (an ack is due within the
  // ack silence of it while released).
  absl::Time round_started_ = absl::InfinitePast();
  absl::Time reopen_at_ = absl::InfiniteFuture();
  absl::Duration reopen_backoff_;
  absl::Time last_contact_;
  absl::Time next_heartbeat_ = absl::InfiniteFuture();
  absl::Duration heartbeat_interval_ = absl::ZeroDuration();
  // The coordinator's heartbeat timeout (Assignment.heartbeat_timeout_ms, or
  // heartbeat_interval_ x 10 from an older coordinator).
  absl::Duration heartbeat_timeout_ = absl::ZeroDuration();
  std::string last_report_error_;
  // UDP liveness (from the Assignment; udp_port_ 0: none).
  int udp_port_ = 0;
  uint32_t liveness_slot_ = 0;
  rendezvous::LivenessKey liveness_key_{};
  absl::Time next_datagram_ = absl::InfiniteFuture();
  // Strictly increasing for this incarnation (the machine's lifetime).
  uint64_t liveness_seq_ = 0;
  // What the last Report answer said (nullopt: no answer yet this round).
  std::optional<bool> udp_heard_;
  // The coordinator's acks of this round's datagrams.
  bool acks_flowing_ = false;
  absl::Time last_ack_ = absl::InfinitePast();
  uint64_t last_acked_seq_ = 0;
  int64_t ignored_acks_ = 0;
  int64_t acks_stopped_ = 0;  // times the acks stopped (logged at INFO once).

  // Progress of this round's local workers, by local rank.
  struct Watched {
    absl::Time last = absl::InfiniteFuture();  // never reported
    bool running = true;
    std::string line;
  };
  std::vector<Watched> watched_;
  // Hang attribution this round (see above).
  enum class HangStep { kNone, kCollecting, kSummarizing, kAwaitingVerdict, kJudged };
  HangStep hang_step_ = HangStep::kNone;
  // The local worker this node declared hung (-1: none, or asked by the
  // coordinator), and what the machine knows of it.
  int hung_rank_ = -1;
  HangEvidence hang_;
  std::string hang_why_;  // why the evidence is taken
  // Collecting: the end of the stacks' wait; awaiting: of the verdict's.
  absl::Time hang_due_ = absl::InfiniteFuture();
  // Each local worker's traceback file while its stacks are awaited: its
  // size before the signal, its latest size and since when, and when to ask
  // for it next (InfiniteFuture: a CheckTraceback pending, or done).
  struct StackWait {
    bool done = true;
    int64_t before = -1;
    int64_t bytes = -1;
    absl::Time since = absl::InfinitePast();
    absl::Time check_at = absl::InfiniteFuture();
  };
  std::vector<StackWait> stacks_;
  // What this node reports of the hang (declared; then collected), repeated
  // by the heartbeats while the verdict is awaited.
  v1::HangReport hang_report_;

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

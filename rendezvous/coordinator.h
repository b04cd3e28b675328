// The rendezvous state machine: who is in the job, which rank each node has,
// and what every agent must do next. No gRPC here: the gRPC adapter
// (coordinator_service.h) turns calls into these methods, and tests drive it
// with a SimulatedClock. The design, message by message: docs/protocol.md.
//
//                 join x MIN, then last call / MAX,
//                 or (restart) every survivor back
//   +-----------+ --------------------------------> +---------+
//   | GATHERING |                                   | RUNNING |
//   +-----------+ <-------------------------------- +---------+
//      |   ^        member lost / worker failed        |    |
//      |   |        (restarts left): Rejoin(N+1)       |    | every member
//      |   +-------- scale-up join (elastic, < MAX) ---+    | SUCCEEDED
//      |                                                    v
//      | too few nodes for          +--------+        +-----------+
//      +--------------------------> | FAILED | <----- | SUCCEEDED |
//        --min-nodes-timeout        +--------+  (no)  +-----------+
//                                       ^
//           member lost / worker failed, no restarts left (from RUNNING)
//
// Members are (node_id, incarnation); a member declared lost is fenced
// ("Identity, generations, authentication"). Inside RUNNING, three smaller
// machines, each drawn in docs/protocol.md: a closed stream probed over UDP
// ("Stream loss"), re-joins and Rejoins by datagram ("Re-join on the
// stream"), released streams ("Released streams"); and a hang's
// investigation (docs/progress.md, "Who hung"; the suspect:
// coordinator_hang.h). While a round runs, the members' SlowSignals feed the
// slow-node judge (docs/slow-nodes.md; slow_nodes.h), at most once per
// interval, from Report or Tick. Everything from the network is validated and bounded
// (the kMax constants; "Field bounds").
//
// Cost: every call is O(log n) in the members but closing or re-opening a
// round (O(n log n)) and answers with the member list; a datagram is O(1);
// Tick scans a flat slot array once ("Limits at scale").
//
// Threading: every public method is thread-safe. Callbacks (JoinDone,
// DirectiveSink) run after the lock is released, on the calling thread,
// except that a call that sets off kSplitActionsFrom or more of them runs
// half on a second thread (RunActions): they must be thread-safe. Time only
// moves through Tick(), which the owner calls (the service's ticker thread).
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_H_

#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/logging.h"
#include "rendezvous/coordinator_hang.h"
#include "rendezvous/keepalive.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/network_check.h"
#include "rendezvous/preflight_policy.h"
#include "rendezvous/protocol.h"
#include "rendezvous/slow_nodes.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// A parked Join is answered DEADLINE_EXCEEDED this long before its deadline
// (at most a quarter of the time it had), so the answer says what is missing.
inline constexpr absl::Duration kJoinAnswerMargin = absl::Milliseconds(250);
// Gathering progress at INFO, at most this often.
inline constexpr absl::Duration kProgressLogEvery = absl::Seconds(10);
// What GetSnapshot keeps of the job's past (the controller's CoordinatorView
// has the same bounds: controller/report_limits.h).
inline constexpr int kSnapshotLostNodes = 64;
inline constexpr int kSnapshotRestarts = 16;

// The last call of a restart is re-armed by each survivor that comes back,
// up to this many last calls after min_nodes were back (CoordinatorOptions).
inline constexpr int kMaxLastCalls = 10;

// --preflight=warn: the links measured beside a round's workers are judged
// once every measurer's Report brought them, or after their budget
// (NetworkCheckBudget) and this much for the workers' start and the node
// checks that come first.
inline constexpr absl::Duration kWarnCheckSlack = absl::Seconds(10);

// --slow-nodes=exclude: a node left out again within this long of the end of
// its last quarantine waits twice as long as then, up to kMaxSlowQuarantine
// (or --quarantine, when longer).
inline constexpr absl::Duration kSlowRepeatWithin = absl::Hours(1);
inline constexpr absl::Duration kMaxSlowQuarantine = absl::Hours(1);

struct CoordinatorOptions {
  std::string job_id;
  int min_nodes = 1;
  int max_nodes = 1;
  // Worker failures or lost nodes tolerated before the job fails.
  int max_restarts = 0;
  // The timeouts have no defaults here: `trainlet run` and `trainlet
  // coordinator` take them from their option tables (config/options.h's
  // RoundPolicy, config/coordinator_options.h).
  // Once min_nodes have joined, wait this long for more (until max_nodes).
  // After a restart it counts from the last survivor that came back, so that
  // survivors still arriving (thousands of them at once) are not left for a
  // scale-up restart of their own; at most kMaxLastCalls of it in all.
  absl::Duration last_call;
  // A member that sends nothing for this long is lost.
  absl::Duration heartbeat_timeout;
  // After a restart, fail if fewer than min_nodes re-join within this.
  absl::Duration min_nodes_timeout;
  // Random and non-zero; drawn by Create-ers (see NewIncarnation()).
  uint64_t incarnation = 0;
  // Release the streams of a round's members once it has this many (0:
  // never): see "Released streams" above. --release-streams-from in
  // `trainlet run` and `trainlet coordinator`, off with TLS (a DIRECTIVE
  // datagram is signed, not encrypted).
  int release_streams_from = 0;
  // How long a probed member has to answer after its stream closed ("Stream
  // loss" above): kStreamProbeWindow, widened only by tests whose host may
  // stall a thread for longer.
  absl::Duration stream_probe_window = kStreamProbeWindow;
  // Set by the agent that hosts this coordinator (`trainlet run` on node
  // rank 0): that agent logs the round it got, every failure (a worker's, a
  // node lost or gone) as the reason of the restart or verdict it causes
  // (every agent gets it, by datagram too), and a hang declared (its own, or
  // the CollectEvidence it takes), so the coordinator's lines for them (and
  // the timing of a round's answers) go to DEBUG and node 0's log says each
  // once. A standalone coordinator logs them at INFO (its log is their only
  // account).
  bool hosted_by_agent = false;
  // --preflight (docs/preflight.md, "The policy"): what a member's failed
  // check does. exclude: a failing joiner is left out of the round when at
  // least min_nodes passing ones close it (answered PREFLIGHT_EXCLUDED, to
  // try again after `quarantine`); while a round runs it is answered so at
  // once instead of causing a scale-up. Static jobs warn instead.
  v1::PreflightPolicy preflight = v1::PREFLIGHT_WARN;
  absl::Duration quarantine = absl::Minutes(5);
  // The network measurement (docs/preflight.md, "The network";
  // network_check.h): a link under this many bytes a second is bad (0:
  // only the job's median judges), and each link moves at most this much
  // for at most this long.
  double preflight_min_bandwidth = 0;
  uint64_t preflight_link_bytes = uint64_t{16} << 20;
  absl::Duration preflight_link_time = absl::Milliseconds(250);
  // --slow-nodes (docs/slow-nodes.md): off, warn (named everywhere) or
  // exclude (elastic: the round restarts without it; it waits `quarantine`,
  // doubled each time it is left out again within kSlowRepeatWithin).
  // A node is named once the job runs `slow_node_threshold` (0.10 = 10%)
  // slower for it, beyond the job's own noise, through `slow_node_window`;
  // the agents send their signals a third of the window apart.
  v1::SlowNodePolicy slow_nodes = v1::SLOW_NODES_WARN;
  double slow_node_threshold = 0.10;
  absl::Duration slow_node_window = absl::Seconds(30);
  Clock* clock = nullptr;  // Clock::Real() when null.
};

// Receives directives for one member's Watch stream. Must not block.
class DirectiveSink {
 public:
  virtual ~DirectiveSink() = default;
  // Queues `directive`; with `last` the stream ends after it (status OK).
  virtual void Send(const v1::Directive& directive, bool last) = 0;
  // Ends the stream without a directive.
  virtual void Close(const absl::Status& status) = 0;
};

enum class Phase { kGathering, kRunning, kSucceeded, kFailed };
absl::string_view PhaseName(Phase phase);

// A non-zero random 64-bit number for incarnations.
uint64_t NewIncarnation();

// What NoteLivenessBatch did with each datagram of a batch.
// An ack to send: for batch[index], to the address it came from.
struct LivenessAck {
  size_t index = 0;
  LivenessBytes bytes{};
};

// Where a batch of datagrams came from: which of the liveness receiver's
// sockets, and each datagram's source address, index for index.
struct LivenessOrigin {
  int socket = 0;
  absl::Span<const sockaddr_storage> from;
};

// A datagram the coordinator sends unasked (a REJOIN, a DIRECTIVE): on the
// receiver's socket `socket`, to `to`.
struct OutgoingDatagram {
  int socket = 0;
  sockaddr_storage to{};
  std::string bytes;
  // A stream-loss probe (see "Stream loss" above): whoever sends it calls
  // Coordinator::CheckProbes from now on, until it returns InfiniteFuture.
  bool probe = false;
};

// Sends the coordinator's own datagrams from the liveness sockets (the
// LivenessReceiver; a recording fake in tests). Called without the
// coordinator's lock, from whichever thread made them; must not block for
// long (a datagram the kernel cannot take is dropped: the member's next
// alive datagram brings another).
class DatagramSender {
 public:
  virtual ~DatagramSender() = default;
  virtual void Send(std::vector<OutgoingDatagram> datagrams) = 0;
};

// A REJOIN datagram not confirmed (an alive datagram of the new round, or
// a READY) is sent again this many times, kRejoinConfirmWithin apart or at
// once for an alive datagram of the old round (it was not taken); then the
// Rejoin goes down the member's stream instead (UDP from the coordinator
// does not get through). A lost REJOIN costs kRejoinConfirmWithin, not a
// heartbeat interval.
inline constexpr int kRejoinDatagramTries = 2;
inline constexpr absl::Duration kRejoinConfirmWithin = absl::Milliseconds(500);
// ... plus up to this much, spread over the members by slot, so that the
// repeats of a large restart (and their confirmations) do not come back as
// one burst into a receive buffer the kernel may cap at ~550 datagrams.
inline constexpr absl::Duration kRejoinRepeatSpread = absl::Milliseconds(250);

struct LivenessBatchStats {
  int accepted = 0;
  int acks = 0;               // acks added (NoteLivenessBatch's `acks`).
  int ready = 0;              // READY datagrams among the accepted.
  int rejoins = 0;            // REJOINs added to `acks` (a member still in the old round).
  int unknown_slot = 0;       // no member holds the slot (or UDP liveness is off).
  int bad_mac = 0;            // not signed with the slot's key (forged, or an old key).
  int wrong_incarnation = 0;  // a MAC-valid datagram of another incarnation.
  int stale_seq = 0;      // seq not above the last accepted one (replayed, reordered), or a probe
                          // answer for no probe out now (late, replayed, another nonce).
  int taken = 0;          // TAKEN datagrams among the accepted.
  int directives = 0;     // DIRECTIVE datagrams sent again in answer (released members).
  int probe_answers = 0;  // answers to a stream-loss probe out (among the accepted).
  int rejected() const { return unknown_slot + bad_mac + wrong_incarnation + stale_seq; }
};

// Runs callbacks the coordinator made (a round's answers: one per member),
// in order, or, from kSplitActionsFrom of them on and with a second CPU,
// half on a second thread; empties the vector. Each must be independent of
// the others (they are: one member each).
inline constexpr size_t kSplitActionsFrom = 1000;
void RunActions(std::vector<std::function<void()>>* actions);

class Coordinator {
 public:
  using JoinDone = std::function<void(absl::StatusOr<v1::Assignment>)>;

  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Admits the member to the gathering round. `done` runs exactly once: at
  // once with an error, or when the round closes, or on CancelJoin/Shutdown,
  // or with DEADLINE_EXCEEDED (naming what the round waits for) about
  // kJoinAnswerMargin before `deadline` (the caller's gRPC deadline, on the
  // coordinator's clock; InfiniteFuture for none). Returns a ticket for
  // CancelJoin (0 when `done` already ran). `peer_addr` is the address the
  // request came from (used when the member does not advertise one).
  uint64_t Join(const v1::JoinRequest& request, absl::string_view peer_addr, absl::Time deadline,
                JoinDone done);
  // The joiner went away before its round closed: drop it from the round.
  void CancelJoin(uint64_t ticket);
  // `who`'s answer for `round` has been handed to the transport: its
  // liveness clock starts again now. A member cannot send a heartbeat or a
  // datagram before it holds its assignment, and at 10,000 nodes the last
  // answers leave seconds after the round closed; without this they would
  // have that much less of --heartbeat-timeout. Stale calls (another round or
  // incarnation, a member gone) do nothing. O(log n).
  void AnswerSent(const v1::Member& who, uint64_t round);

  // Attaches the member's directive stream; returns a watch id for
  // WatchClosed. A stream that breaks while the job runs means the agent is
  // gone.
  absl::StatusOr<uint64_t> Watch(const v1::WatchRequest& request,
                                 std::shared_ptr<DirectiveSink> sink);
  void WatchClosed(uint64_t watch_id);

  // `response` (may be null) gets what the reporter is owed: for the MPI
  // launcher, the workers that host slots and have seen no SSH session yet.
  absl::Status Report(const v1::ReportRequest& request, v1::ReportResponse* response = nullptr);
  absl::Status Leave(const v1::LeaveRequest& request);

  // Applies timeouts: last call, heartbeats, min-nodes wait, join deadlines,
  // unconfirmed REJOIN datagrams; logs gathering progress.
  void Tick();

  // UDP liveness: the host has a UDP socket on `udp_port`; members that
  // offer udp_liveness get a slot and key for it in their Assignment. Call
  // before the first round closes (0: off, the default). With `sender`
  // (which must outlive every call into the coordinator), a restart tells
  // the members that accept it by REJOIN datagram.
  void EnableUdpLiveness(int udp_port, DatagramSender* sender = nullptr);
  // Applies a batch of parsed datagrams under one lock: each is checked
  // (slot held, MAC under the slot's key, incarnation, seq above the last)
  // and, if good, sets its member's last_heard to now. O(1) per datagram.
  // With `acks`, appends an ack for each accepted datagram whose member was
  // last acked AckInterval or more ago, while the round runs, the member is
  // in it, and Tick ran within 2 x AckInterval; and, while a round gathers,
  // the REJOIN again for an alive datagram of a member told by datagram to
  // re-join that is still in the old round (or, after kRejoinDatagramTries,
  // the Rejoin down its stream). `origin` (may be null: then no REJOIN
  // datagram can be sent to these members) says where the batch came from.
  // A READY that completes a round sets off its answers (a Join's answer,
  // a stream write per member: thousands at scale); with `deferred` they are
  // appended there for the caller to run, after it sent the acks (the
  // liveness thread), else they run before this returns.
  LivenessBatchStats NoteLivenessBatch(absl::Span<const LivenessDatagram> batch,
                                       std::vector<LivenessAck>* acks = nullptr,
                                       std::vector<std::function<void()>>* deferred = nullptr,
                                       const LivenessOrigin* origin = nullptr);

  // Stream-loss probes (see "Stream loss" above), for whoever sends the
  // core's datagrams (the liveness thread). `refused`: the PROBE datagrams
  // that ICMP port-unreachable messages quoted back to it, parsed; each that
  // is a probe out now (its member's slot, incarnation, nonce and MAC) makes
  // that member lost at once. Returns how many matched.
  int NoteProbesRefused(absl::Span<const LivenessDatagram> refused);
  // Sends the probes due again, and declares lost a member whose probe
  // window ended by `drained_at` unanswered: `drained_at` is the clock's time
  // (clock()) just before the caller last drained its sockets and applied
  // what it found, so every answer that arrived in time has been counted.
  // Returns when to call it next (InfiniteFuture: no probe is out).
  absl::Time CheckProbes(absl::Time drained_at);
  Clock* clock() const { return clock_; }

  // Fails pending joins and ends every stream with UNAVAILABLE.
  void Shutdown(absl::string_view reason);

  // Called (from whichever thread sent it, without the lock) for each
  // assignment sent by datagram to a released member, with its round and
  // size: the service counts it as it counts a Join's answer. Set before
  // the first round closes.
  void SetAnswerObserver(std::function<void(uint64_t round, int nnodes)> observer);

  struct Snapshot {
    Phase phase = Phase::kGathering;
    uint64_t round = 0;  // last closed round (0 before the first).
    int gathering = 0;   // joiners waiting for the next round.
    int members = 0;     // members of the current round.
    int watching = 0;    // members with an open directive stream.
    int released = 0;    // members whose stream was released (told by datagram).
    int restart_count = 0;
    std::string verdict;              // why the job failed, when it did.
    bool restarts_exhausted = false;  // it failed for lack of restarts or nodes.
    // Nodes declared lost (stream broken, heartbeat timeout, left while
    // running, replaced by a new incarnation) that have not joined again
    // since: the latest kSnapshotLostNodes, oldest first.
    std::vector<std::string> lost_nodes;
    struct Restart {
      uint64_t round = 0;  // the round the restart opened.
      std::string reason;  // at most kMaxMessageLength bytes.
    };
    // The latest kSnapshotRestarts restarts (re-opened rounds), oldest first.
    std::vector<Restart> restarts;
    int min_nodes = 0;  // the options'.
    int max_nodes = 0;
    // While a round after a restart gathers: how long until the job fails
    // for lack of nodes (min_nodes_timeout); InfiniteDuration otherwise.
    absl::Duration gives_up_in = absl::InfiniteDuration();
    // --slow-nodes: the current round's slow nodes (at most
    // kMaxSlowNodesNamed), by node id.
    std::vector<SlowNode> slow_nodes;
  };
  Snapshot GetSnapshot() const;

  // True once the job has a verdict and every member's stream has ended
  // (so node 0 may exit without cutting anyone off).
  bool Drained() const;
  // Waits up to `timeout` for Drained(); returns it.
  bool AwaitDrained(absl::Duration timeout);

  const CoordinatorOptions& options() const { return options_; }

  // How many times the core walked all its members (the member map or the
  // slot array) so far: coordinator_scale_test checks that a job's count
  // does not grow with its size (bench/coordinator_scale.cc has the CPU time).
  uint64_t MemberWalksForTest() const {
    absl::MutexLock lock(&mu_);
    return member_walks_;
  }

 private:
  struct Member {
    v1::JoinRequest join;
    std::string addr;
    uint64_t ticket = 0;  // non-zero while a Join is parked.
    JoinDone done;
    absl::Time answer_by = absl::InfiniteFuture();  // of the parked Join.
    bool in_round = false;
    // Valid while in_round; without the member list (see round_nodes_).
    v1::Assignment assignment;
    uint64_t watch_id = 0;
    std::shared_ptr<DirectiveSink> sink;
    // Its entry in slots_ (liveness, last heard, stream loss); every member
    // holds one from its first join until it is erased.
    uint32_t slot = 0;
    v1::ReportRequest::State state = v1::ReportRequest::STATE_UNSPECIFIED;
    int mpi_sessions = 0;  // the most an MPI worker reported this round.
    // Its stream takes the next round's assignment (WatchRequest.
    // accepts_assignment): a restart keeps the stream and lets it re-join
    // with a READY datagram.
    bool accepts_assignment = false;
    // ... and takes the Rejoin as a REJOIN datagram
    // (WatchRequest.accepts_rejoin_datagram).
    bool accepts_rejoin_datagram = false;
    // ... as a DIRECTIVE datagram, with its reason (accepts_rejoin_directive).
    bool accepts_rejoin_directive = false;
    // The parked join (ticket) came from a READY datagram; `done` pushes the
    // assignment down `sink`, or for a released member sends it by datagram.
    // Reset whenever the ticket is.
    bool ready_join = false;
    // Its Watch said accepts_release (kept while it has none).
    bool accepts_release = false;
    // Its stream was released: no sink, directives by datagram (SetReleasedLocked).
    bool released = false;
    // Released, the job has its verdict, and the member has not said TAKEN
    // yet (SetVerdictPendingLocked): Drained waits for it.
    bool verdict_pending = false;
    // Its latest preflight's failed checks (FailedChecks); "" when it
    // passed, or was not checked.
    std::string preflight_failed;
    // Its parked join counts in gathering_excludable_ (set with the ticket).
    bool excludable_ticket = false;
    // When its latest Join arrived (the clock-offset check's t2).
    absl::Time join_received;
  };
  using Actions = std::vector<std::function<void()>>;

  absl::Status ValidateJoinLocked(const v1::JoinRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateReportLocked(const v1::ReportRequest& request, const Member& member) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs a rejected request (escaped, rate-limited).
  void LogRejected(absl::string_view what, const v1::Member& who, const absl::Status& error);
  // Identity + round checks shared by Watch/Report/Leave.
  absl::StatusOr<Member*> FindMemberLocked(const v1::Member& who, absl::string_view job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsLiveLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int GatheringCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int RoundSizeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCloseRoundLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --preflight: a node's failed checks (FailedChecks of its validated report).
  // OK, or the error to answer the join with: the job failed (fail), or the
  // node is left out (exclude, while a round runs). Logs failures and keeps
  // the warnings (warn).
  absl::Status JudgePreflightLocked(const std::string& node_id, const std::string& failed,
                                    Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `m`'s failed preflight may leave it out of a round.
  bool ExcludableLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The network measurement before a round closes (--preflight=exclude|fail,
  // docs/preflight.md "The network"): when a parked Join call's links are
  // due, answers the measurers with Assignment.measure_first and returns
  // true (the round closes once they are back, FinishGateCheckLocked).
  bool StartGateCheckLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges what came back: a node blamed fails the job (fail), is left out
  // (exclude, elastic) or runs with a warning.
  void FinishGateCheckLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `m` as a member of a network measurement (whether it measures aside).
  static NetworkCheck::Candidate NetworkCandidate(const Member& m);
  // The answer that sends a Join caller to measure `plan` first.
  v1::Assignment MeasureFirstAnswerLocked(v1::NetworkPlan plan, absl::Time join_received) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A due joiner while the gate measures: it measures too (the gate waits
  // for it). Returns whether `done` was answered with its plan.
  bool ExtendGateCheckLocked(const v1::JoinRequest& request, const std::string& addr,
                             JoinDone& done, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // exclude|fail, an elastic round running: a newcomer whose links are due
  // measures to two running members before its join may restart the round
  // (scale-up); its re-join with the links is judged against the job's
  // median. Returns whether `done` was answered with a plan; `measured` is
  // set when this join brought the links, `error` when they blame it.
  bool MeasureNewcomerLocked(const v1::JoinRequest& request, const std::string& addr,
                             JoinDone& done, std::string* preflight_failed, bool* measured,
                             absl::Status* error, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // warn: the links measured beside the round's workers are all in (or
  // their time is up): a node blamed is named to every member.
  void FinishWarnCheckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The analysis of `check`'s links, the job's reference median kept; logs
  // the outcome. Returns the blamed nodes (id -> reason).
  std::map<std::string, std::string> JudgeLinksLocked(NetworkCheck& check, absl::string_view when)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `why` to m's failed checks (and its exclusion, when parked).
  void AddPreflightFailureLocked(Member& m, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round's warning lines to every member with a stream (warn).
  void BroadcastPreflightWarningsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PREFLIGHT_EXCLUDED for `node_id`, whose checks `failed`.
  absl::Status ExcludedError(const std::string& node_id, const std::string& failed) const;
  void CloseRoundLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failure while running: reopen if restarts are left, else fail the job.
  // `hang` (a hang's verdict) goes with the Rejoin or JobFailed.
  void HandleFailureLocked(const std::string& node_id, const std::string& reason, int exit_code,
                           bool remove_node, Actions* actions,
                           const v1::HangVerdict* hang = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReopenLocked(const std::string& reason, Actions* actions,
                    const v1::HangVerdict* hang = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `standalone`, or DEBUG when an agent hosts us and logs the same outcome
  // itself (CoordinatorOptions::hosted_by_agent).
  LogLevel OutcomeLevel(LogLevel standalone) const {
    return options_.hosted_by_agent ? LogLevel::kDebug : standalone;
  }
  void FailJobLocked(const std::string& reason, const std::string& node_id, int exit_code,
                     bool restarts_exhausted, Actions* actions,
                     const v1::HangVerdict* hang = nullptr, bool preflight = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hang attribution (see "Hangs" above): a member's HangReport; opens the
  // round's investigation when it declares a hang (CollectEvidence to every
  // other member still running), takes its evidence, and judges once every
  // member answered.
  void NoteHangLocked(Member& m, const v1::HangReport& hang, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member has nothing to add (its workers succeeded): answered.
  void HangAnsweredLocked(const Member& m, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every member answered, or kHangEvidenceWait passed: the suspect is
  // named (coordinator_hang.h) and the round fails for it with code 80.
  void JudgeHangLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishJobLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --slow-nodes (docs/slow-nodes.md). A running member's SlowSignals
  // (validated) go to the judge, which judges when due.
  void NoteSlowSignalsLocked(const Member& m, const v1::SlowSignals& s, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges if an interval passed since the last judgement: a node named is
  // logged once and told to every member (Directive.slow_nodes); exclude
  // restarts an elastic round without it while min_nodes remain.
  void JudgeSlowNodesLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // exclude: quarantines `node` and re-opens the round without it; false
  // when it is no member of the round (nothing done).
  bool ExcludeSlowNodeLocked(const SlowNode& node, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PREFLIGHT_EXCLUDED while `node_id` is quarantined as a slow node; OK
  // otherwise, and when a gathering round cannot reach min_nodes without it
  // (slow but working: the job must not fail for want of it). Its
  // retry_after is at most a quarter of --min-nodes-timeout, so that it asks
  // again before a round that needs it gives up.
  absl::Status SlowQuarantineLocked(const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Assignment.slow_signals_interval_ms for a round of `n` nodes (0:
  // --slow-nodes=off): a third of the window, stretched to the interval of
  // the Reports of heard members (HeardReportInterval) in a large round,
  // where each slow-signals Report stands for that heartbeat Report (the
  // agent's next one waits a whole interval after it): the Reports stay
  // within kMaxHeardReportsPerSecond. At most kMaxSlowIntervalMs.
  int32_t SlowSignalsIntervalMs(int n) const;
  // At the verdict: a released member is told by datagram (appended to
  // `out`), and Drained waits for its TAKEN.
  void TellReleasedVerdictLocked(Member& m, std::vector<OutgoingDatagram>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `datagrams` (an action: after the lock).
  void SendLocked(std::vector<OutgoingDatagram> datagrams, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round number the gathering round will get when it closes.
  uint64_t NextRoundLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "2/3 joined; waiting for rank 2" (what the gathering round lacks).
  std::string GatheringStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers parked joins whose deadline is near with DEADLINE_EXCEEDED.
  // O(1) until the earliest of those deadlines (a walk of the members then).
  void ExpireJoinsLocked(absl::Time now, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While a round gathers: withdraws the READY re-joins of released members
  // silent for the silence limit (no stream would withdraw them).
  void WithdrawSilentReadiesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls the answer observer (without the lock): an assignment went by
  // datagram.
  void NotifyAnswerSent(uint64_t round, int nnodes) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a parked join (CancelJoin, deadline) from the round.
  void WithdrawJoinLocked(std::map<std::string, Member>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to a request of `member` for `round` when that round is not
  // current: ROUND_RESTARTED with the restart's reason when it is the round
  // just restarted (the request crossed its Rejoin), else `stale`.
  absl::Status NotCurrentLocked(uint64_t round, const Member& member, absl::Status stale) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Directive NewDirectiveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when (node, incarnation) was declared lost.
  absl::Status CheckNotFencedLocked(const v1::Member& who) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION with reason JOB_SUCCEEDED / JOB_FAILED /
  // RESTARTS_EXHAUSTED (error_reason.h).
  absl::Status JobOverErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DrainedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round's MPI workers with slots and no SSH session yet (rank order).
  void UnplacedWorkersLocked(v1::ReportResponse* response) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member re-joins with a READY datagram for `round` (NoteLivenessBatch):
  // parks a join whose answer goes down its stream, if its stream accepts
  // it, it is a survivor of the restart and the round still gathers. True
  // when the coordinator holds the re-join (parked now or before, or the
  // round closed with it): the READY is then acked.
  bool ReadyJoinLocked(Member& m, uint64_t round, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At a restart: whether to tell the member it may re-join by datagram
  // (its stream accepts an assignment and its datagrams were heard lately).
  bool MayRejoinByDatagramLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether to release the member's stream now (see "Released streams").
  bool MayReleaseLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends its stream with a Release (the write an action, after the lock).
  void ReleaseLocked(Member& m, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `d` as a DIRECTIVE datagram to where the member's datagrams come from;
  // nullopt when it does not fit or no address is known.
  std::optional<OutgoingDatagram> DirectiveDatagramLocked(const Member& m,
                                                          const v1::Directive& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "node n2 (rank 2)", "node n2 (ranks 4-5)": how a restart's or a
  // verdict's reason names a node (its global ranks while it is in the round).
  static std::string NodeLabel(const Member& m);
  // The verdict as a DIRECTIVE datagram to a released member that has not
  // said TAKEN yet; nullopt otherwise.
  std::optional<OutgoingDatagram> VerdictDatagramLocked(const Member& m) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The only places that change Member::ticket, in_round, sink and state of
  // a round member, or remove a member: they keep the counters and indexes
  // below in step.
  void SetTicketLocked(Member& m, uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetInRoundLocked(Member& m, bool in_round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetSinkLocked(Member& m, std::shared_ptr<DirectiveSink> sink, uint64_t watch_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetReleasedLocked(Member& m, bool released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetVerdictPendingLocked(Member& m, bool pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetSucceededLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseMemberLocked(std::map<std::string, Member>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts toward the job's success: in the round, and not an MPI worker of
  // a round with a launcher (those never report SUCCEEDED).
  bool MustSucceedLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to a member of the closed round: its assignment, with the
  // round's member list when it asked for it.
  v1::Assignment AnswerLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Fenced {
    uint64_t incarnation = 0;
    std::string why;
  };

  // One per member, in a flat array indexed by Member::slot, so that a
  // datagram finds its member in O(1) and Tick scans deadlines without
  // walking the member map. A slot is reused once its member is erased.
  struct Slot {
    Member* member = nullptr;  // null: free. std::map nodes do not move.
    uint64_t incarnation = 0;
    LivenessKey key{};
    uint64_t last_seq = 0;  // the highest seq accepted from this incarnation.
    absl::Time last_heard;  // datagram, Report, join, watch: anything from it.
    absl::Time last_datagram = absl::InfinitePast();
    absl::Time last_ack = absl::InfinitePast();  // the last ack made for it.
    // When its stream closed while it ran (InfiniteFuture: it did not, or it
    // re-opened it or reported since); lost at + kStreamLossGrace unless
    // probed (probe_nonce), see "Stream loss".
    absl::Time stream_lost_at = absl::InfiniteFuture();
    // What its datagrams say of the way back to it ("Stream loss"): its
    // latest alive datagram was ALIVE_ACKED (the coordinator's acks reach
    // it, so a probe would too), or a plain ALIVE came after one of its
    // datagrams was acked (they do not). Neither: not known yet (its first
    // datagrams, or an agent older than probes that was never acked).
    bool acks_reach = false;
    bool acks_lost = false;
    uint64_t acked_seq = 0;  // the highest seq an ack was made for.
    // The probe out since its stream closed: its nonce (0: none), when it
    // goes again, and the end of its window (lost then, unanswered).
    uint64_t probe_nonce = 0;
    absl::Time probe_next = absl::InfiniteFuture();
    absl::Time probe_until = absl::InfiniteFuture();
    // Where its last accepted datagram came from (socket -1: none yet).
    int socket = -1;
    sockaddr_storage from{};
    // The round a REJOIN datagram asked it to re-join (0: none, or
    // confirmed), and how many times it was sent again.
    uint64_t rejoin_round = 0;
    int rejoin_repeats = 0;
    absl::Time rejoin_due = absl::InfiniteFuture();  // unconfirmed by then: again
    // Copies of the member's fields Tick needs (kept by the Set*Locked
    // helpers): in the round and not SUCCEEDED yet.
    bool must_stay_alive = false;
  };
  Slot& SlotOf(const Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[m.slot]; }
  void AllocateSlotLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateMustStayAliveLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the REJOIN sent to `slot` still waits for its confirmation (the
  // round it asked for gathers and the member has not re-joined yet).
  bool RejoinUnconfirmedLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For an unconfirmed REJOIN: true when it is to be sent again (counted,
  // its check re-armed); after kRejoinDatagramTries, false, and the Rejoin
  // went down the member's stream instead.
  bool RepeatRejoinLocked(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arms the confirmation check of the REJOIN just sent to `slot`.
  void ExpectRejoinConfirmedLocked(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The REJOIN for `slot`'s member, to where its datagrams come from: the
  // Rejoin with its reason as a DIRECTIVE datagram where its Watch accepts
  // that (accepts_rejoin_directive), else the 48-byte REJOIN datagram.
  OutgoingDatagram RejoinDatagramLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LivenessBytes RejoinBytesLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stream loss ("Stream loss" above). Whether to probe `m`, whose stream
  // just closed while it ran, rather than give it kStreamLossGrace.
  bool MayProbeLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the first PROBE (an action) and arms the window, from
  // slot.stream_lost_at.
  void StartProbeLocked(Slot& slot, Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member's stream loss is over (re-opened, reported, answered, erased,
  // a new round): no grace, no probe.
  void ClearStreamLossLocked(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the probe out for `slot` still has a member to judge: running,
  // in the round, not SUCCEEDED, no stream open.
  bool ProbeStillDueLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  OutgoingDatagram ProbeDatagramLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member of `slot` is lost by its probe (`how`: why).
  void LoseProbedLocked(const Slot& slot, absl::string_view how, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock* const clock_;
  const bool elastic_;
  LogLimiter reject_log_;

  mutable absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kGathering;
  absl::Time last_tick_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // Tick's last run.
  // At or before the earliest answer_by of a parked Join: until then the
  // ticker does not walk the members for expired joins (at 10,000 members
  // that walk, 50 times a second, was a fifth of the coordinator's CPU while
  // a round gathered). A join withdrawn or answered leaves it early, never
  // late; the walk sets it exactly.
  absl::Time next_join_expiry_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int restart_count_ ABSL_GUARDED_BY(mu_) = 0;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string verdict_ ABSL_GUARDED_BY(mu_);
  v1::Directive verdict_directive_ ABSL_GUARDED_BY(mu_);
  absl::Time gathering_since_ ABSL_GUARDED_BY(mu_);
  absl::Time min_reached_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time last_progress_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t member_walks_ ABSL_GUARDED_BY(mu_) = 0;  // MemberWalksForTest()
  std::map<std::string, int> previous_rank_ ABSL_GUARDED_BY(mu_);
  // Members of the last round told to re-join (cleared when a round closes).
  std::set<std::string> expected_ ABSL_GUARDED_BY(mu_);
  bool verdict_exhausted_ ABSL_GUARDED_BY(mu_) = false;
  bool verdict_preflight_ ABSL_GUARDED_BY(mu_) = false;  // --preflight=fail failed it.
  // The current round has an MPI launcher: its success is the job's.
  bool launcher_in_round_ ABSL_GUARDED_BY(mu_) = false;
  // The last incarnation of each node declared lost (one entry per node id).
  std::map<std::string, Fenced> fenced_ ABSL_GUARDED_BY(mu_);
  // For GetSnapshot: nodes declared lost, the newest last (each once, at
  // most kSnapshotLostNodes), and the latest kSnapshotRestarts restarts.
  std::deque<std::string> recent_lost_ ABSL_GUARDED_BY(mu_);
  std::deque<Snapshot::Restart> recent_restarts_ ABSL_GUARDED_BY(mu_);

  // Kept in step by the Set*Locked helpers (so no call walks members_):
  int gathering_ ABSL_GUARDED_BY(mu_) = 0;            // members with a parked Join.
  int gathering_mpi_ ABSL_GUARDED_BY(mu_) = 0;        // ... of role MPI launcher or worker,
  int gathering_launchers_ ABSL_GUARDED_BY(mu_) = 0;  // ... of role MPI launcher.
  // ... that failed a preflight check and may be left out (exclude).
  int gathering_excludable_ ABSL_GUARDED_BY(mu_) = 0;
  // The running round's members that failed a check and run anyway (warn,
  // or too few passing nodes to leave them out): Assignment and
  // ReportResponse preflight_warnings.
  PreflightWarnings preflight_warnings_ ABSL_GUARDED_BY(mu_);
  // The network measurement gating the gathering round, and whether it ran
  // (once per gathering; reset when a round closes).
  NetworkCheck gate_check_ ABSL_GUARDED_BY(mu_);
  bool gate_measured_ ABSL_GUARDED_BY(mu_) = false;
  // warn: the one beside the running round's workers.
  NetworkCheck warn_check_ ABSL_GUARDED_BY(mu_);
  // exclude|fail: each newcomer measured while a round runs
  // (MeasureNewcomerLocked), until it joins again with its links or the
  // check's deadline (plus kWarnCheckSlack) passed; at most max_nodes.
  std::map<std::string, NetworkCheck> newcomer_checks_ ABSL_GUARDED_BY(mu_);
  // The job's median link rate from its last measurement with enough
  // measurers (NetworkCheck): what a newcomer's links are held against.
  double network_median_ ABSL_GUARDED_BY(mu_) = 0;
  // The nonce every member's link measurer accepts (Assignment.link_key).
  const uint64_t link_key_ = NewIncarnation();
  int expected_back_ ABSL_GUARDED_BY(mu_) = 0;  // ... that are in expected_.
  // When the latest member of expected_ parked its Join (re-arms the last call).
  absl::Time expected_joined_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_round_ ABSL_GUARDED_BY(mu_) = 0;  // members of the current round.
  int watching_ ABSL_GUARDED_BY(mu_) = 0;  // members with a Watch open.
  int released_ ABSL_GUARDED_BY(mu_) = 0;  // members whose stream was released.
  // Released members that have not said TAKEN for the verdict (after it).
  int verdict_pending_ ABSL_GUARDED_BY(mu_) = 0;
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;  // MustSucceedLocked and not SUCCEEDED yet.
  std::map<uint64_t, std::string> by_ticket_ ABSL_GUARDED_BY(mu_);  // parked Join -> node.
  std::map<uint64_t, std::string> by_watch_ ABSL_GUARDED_BY(mu_);   // open Watch -> node.
  // Static jobs: rank hint -> the node that last claimed it (stale entries
  // are checked against members_ on lookup).
  std::map<int, std::string> hint_holder_ ABSL_GUARDED_BY(mu_);
  // The node that last joined as the MPI launcher (checked on lookup).
  std::string launcher_node_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  // The slots with a probe out (Slot::probe_nonce), so that CheckProbes
  // walks only those.
  std::set<uint32_t> probing_ ABSL_GUARDED_BY(mu_);
  int udp_port_ ABSL_GUARDED_BY(mu_) = 0;  // 0: UDP liveness off.
  DatagramSender* datagram_sender_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::function<void(uint64_t, int)> answer_observer_ ABSL_GUARDED_BY(mu_);
  // The latest restart's Rejoin for members that may re-join by datagram
  // (what a REJOIN datagram stands for, and what goes down the stream when
  // it does not get through).
  v1::Directive rejoin_by_datagram_ ABSL_GUARDED_BY(mu_);
  // REJOINs awaiting confirmation, earliest deadline on top: the slot and
  // the round it was sent for.
  struct RejoinCheck {
    absl::Time due;
    uint32_t slot = 0;
    uint64_t round = 0;
    bool operator>(const RejoinCheck& o) const { return due > o.due; }
  };
  std::priority_queue<RejoinCheck, std::vector<RejoinCheck>, std::greater<RejoinCheck>>
      rejoin_checks_ ABSL_GUARDED_BY(mu_);
  // The hang investigation of round `round` (0: none open; at most one per
  // round, since its verdict ends the round).
  struct HangInvestigation {
    uint64_t round = 0;
    absl::Time deadline = absl::InfiniteFuture();
    std::string declared_by;  // the node that declared it first
    int declared_rank = -1;   // its hung worker's global rank
    int64_t silence_ms = 0;
    // The members asked (the declarer included); only theirs is an answer
    // (a node whose workers had all exited before is not asked, and its
    // repeated SUCCEEDED must not stand in for another's evidence).
    std::set<std::string> asked;
    std::set<std::string> answered;         // those of `asked` whose evidence is in
    std::vector<HangCandidate> candidates;  // bounded by the round's workers
  };
  HangInvestigation hang_ ABSL_GUARDED_BY(mu_);
  // The closed round's member list, once (members that asked for it get a
  // copy in their answer; no member holds its own copy).
  std::shared_ptr<const std::vector<v1::NodeAssignment>> round_nodes_ ABSL_GUARDED_BY(mu_);
  // --slow-nodes: the running round's judge (cleared when a round closes or
  // re-opens), and the nodes excluded as slow (exclude) until when, and why.
  SlowNodeJudge slow_judge_ ABSL_GUARDED_BY(mu_){
      {options_.slow_node_threshold, options_.slow_node_window}};
  // A node left out again within kSlowRepeatWithin of its last quarantine
  // waits twice as long as then (at most kMaxSlowQuarantine): a node that
  // stays slow costs the job two restarts per quarantine, not every 5m.
  struct SlowQuarantine {
    absl::Time until;
    std::string why;
    int times = 0;  // left out in a row
  };
  std::map<std::string, SlowQuarantine> slow_quarantine_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_H_

// What goes into the agent's round and what comes out of it: the events the
// executor (agent.h) feeds in and the actions it performs. The round
// (round.h) and the two machines it composes, CoordinatorContact
// (coordinator_contact.h) and HangWatch (hang_watch.h), all answer events
// with these actions. Plain structs and two helpers.
#ifndef TRAINLET_AGENT_ROUND_IO_H_
#define TRAINLET_AGENT_ROUND_IO_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "launcher/worker.h"
#include "progress/hang_evidence.h"
#include "rendezvous/liveness_datagram.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

namespace v1 = ::trainlet::v1;

// Text from the coordinator (a reason, an error message) or a worker (a
// progress line), as the round's machines log it: bounded, control bytes
// escaped.
inline std::string Quoted(absl::string_view text) { return SafeForLog(text, 1536); }

// ---- Events the executor feeds in.

struct JoinAnswered {
  absl::StatusOr<v1::Assignment> result;
};
struct WorkersStarted {
  absl::Status status;
  // The exit code a failure means; 0: ExitCodeForSpawnError.
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

// Something waits for the next Report: --preflight=warn's checks that ran
// beside the workers' start finished, or --slow-nodes' signals of an
// interval were sampled. While the round runs, a RUNNING Report goes now
// (the executor adds what waits); otherwise nothing (the next Report of a
// later round carries a preflight report; slow signals are dropped).
struct ReportDue {};

using RoundEvent =
    std::variant<JoinAnswered, WorkersStarted, WorkerExited, WorkersGone, SignalReceived,
                 DirectiveReceived, StreamEnded, ReportAnswered, DatagramReceived, Tick,
                 LocalFailure, ProgressReported, TracebackRequested, NodeUnhealthy, TracebackSize,
                 DirectiveDatagramReceived, HangEvidenceCollected, ReportDue>;

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
  // --preflight: the node was left out of the last round for a failed check
  // and waited out its quarantine; its checks run again before this join.
  bool recheck = false;
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

// A Report of `round` in `state` from `me` (the rest is the caller's).
inline v1::ReportRequest NewReport(const v1::Member& me, const std::string& job_id, uint64_t round,
                                   v1::ReportRequest::State state) {
  v1::ReportRequest r;
  *r.mutable_member() = me;
  r.set_job_id(job_id);
  r.set_round(round);
  r.set_state(state);
  return r;
}

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_ROUND_IO_H_

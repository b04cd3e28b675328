#include "agent/round.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/verdict.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "launcher/signals.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/protocol.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::agent {
namespace {

std::string SignalText(int sig) { return absl::StrFormat("signal %d (%s)", sig, strsignal(sig)); }

constexpr char kEveryWorkerExited0[] = "every worker on every node exited 0";

}  // namespace

absl::string_view RoundStateName(RoundState state) {
  switch (state) {
    case RoundState::kJoining:
      return "joining";
    case RoundState::kRunning:
      return "running";
    case RoundState::kAwaitingVerdict:
      return "awaiting verdict";
    case RoundState::kStopping:
      return "stopping";
    case RoundState::kDone:
      return "done";
  }
  return "unknown";
}

namespace {

ContactOptions ContactOptionsFrom(const RoundOptions& o) {
  ContactOptions c;
  c.me = o.me;
  c.job_id = o.job_id;
  c.udp_liveness = o.udp_liveness;
  c.quiet_when_acked = o.quiet_when_acked;
  c.reopen_min_backoff = o.reopen_min_backoff;
  c.reopen_max_backoff = o.reopen_max_backoff;
  return c;
}

HangWatchOptions HangWatchOptionsFrom(const RoundOptions& o) {
  HangWatchOptions h;
  h.me = o.me;
  h.job_id = o.job_id;
  h.hang_timeout = o.hang_timeout;
  h.traceback_wait = o.traceback_wait;
  h.traceback_quiet = o.traceback_quiet;
  h.traceback_poll = o.traceback_poll;
  h.hang_verdict_wait = o.hang_verdict_wait;
  return h;
}

}  // namespace

RoundMachine::RoundMachine(RoundOptions options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      contact_(ContactOptionsFrom(options_), clock),
      hang_watch_(HangWatchOptionsFrom(options_), clock) {}

std::vector<RoundAction> RoundMachine::Start() {
  Actions out;
  Join(&out);
  return out;
}

std::vector<RoundAction> RoundMachine::Handle(const RoundEvent& event) {
  Actions out;
  if (state_ == RoundState::kDone) return out;
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, JoinAnswered>) {
          OnJoinAnswered(e, &out);
        } else if constexpr (std::is_same_v<T, WorkersStarted>) {
          OnWorkersStarted(e, &out);
        } else if constexpr (std::is_same_v<T, WorkerExited>) {
          OnWorkerExited(e, &out);
        } else if constexpr (std::is_same_v<T, WorkersGone>) {
          OnWorkersGone(&out);
        } else if constexpr (std::is_same_v<T, SignalReceived>) {
          OnSignal(e.signal, &out);
        } else if constexpr (std::is_same_v<T, DirectiveReceived>) {
          OnDirective(e, &out);
        } else if constexpr (std::is_same_v<T, StreamEnded>) {
          OnStreamEnded(e, &out);
        } else if constexpr (std::is_same_v<T, ReportAnswered>) {
          OnReportAnswered(e, &out);
        } else if constexpr (std::is_same_v<T, DatagramReceived>) {
          OnDatagram(e, &out);
        } else if constexpr (std::is_same_v<T, DirectiveDatagramReceived>) {
          OnDirectiveDatagram(e, &out);
        } else if constexpr (std::is_same_v<T, LocalFailure>) {
          OnLocalFailure(e, &out);
        } else if constexpr (std::is_same_v<T, ProgressReported>) {
          OnProgress(e);
        } else if constexpr (std::is_same_v<T, TracebackRequested>) {
          // (The hang watch runs only while the round runs.)
          if (state_ == RoundState::kRunning) hang_watch_.OnTracebackRequested(e, &out);
        } else if constexpr (std::is_same_v<T, TracebackSize>) {
          if (state_ == RoundState::kRunning) hang_watch_.OnTracebackSize(e, &out);
        } else if constexpr (std::is_same_v<T, NodeUnhealthy>) {
          OnNodeUnhealthy(e, &out);
        } else if constexpr (std::is_same_v<T, HangEvidenceCollected>) {
          if (state_ == RoundState::kRunning) hang_watch_.OnEvidenceCollected(e, &out);
        } else if constexpr (std::is_same_v<T, ReportDue>) {
          if (state_ == RoundState::kRunning) {
            out.push_back(SendReport{HeartbeatReport()});
            contact_.HeartbeatSent();
          }
        } else {
          static_assert(std::is_same_v<T, Tick>);
          OnTick(&out);
        }
      },
      event);
  return out;
}

absl::Time RoundMachine::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  switch (state_) {
    case RoundState::kJoining:
      next = std::min({next_progress_log_, next_ready_, join_deadline_, quarantined_until_});
      break;
    case RoundState::kRunning:
    case RoundState::kAwaitingVerdict:
    case RoundState::kStopping:
      if (OutcomePending()) {
        next = std::min(
            {next, verdict_deadline_, contact_.NextDeadline(state_ == RoundState::kRunning)});
      }
      if (state_ == RoundState::kStopping) {
        next = std::min(next, kill_at_);
        if (!workers_gone_) next = std::min(next, give_up_at_);
      }
      if (state_ == RoundState::kRunning) next = std::min(next, hang_watch_.NextDeadline());
      break;
    case RoundState::kDone:
      break;
  }
  return next;
}

// ---- Joining.

bool RoundMachine::BeginJoining() {
  SetState(RoundState::kJoining);
  const bool after_local_failure = running_failure_ != 0;
  // A new round: a failure of the previous one no longer decides the code
  // (a signal while re-joining exits 128+N).
  running_failure_ = any_failure_ = 0;
  contact_.ForgetRepeated();
  const absl::Time now = clock_->Now();
  join_started_ = now;
  next_progress_log_ = now + options_.progress_log_interval;
  join_cancelled_ = false;
  StopReadies();
  readies_unacked_ = 0;
  ready_acked_ = false;
  join_verdict_.reset();
  return after_local_failure;
}

void RoundMachine::Join(Actions* out, bool recheck) {
  const bool after_local_failure = BeginJoining();
  v1::JoinRequest r;
  *r.mutable_member() = options_.me;
  r.set_job_id(options_.job_id);
  r.set_rank_hint(options_.rank_hint);
  r.set_advertise_addr(options_.advertise_addr);
  r.set_local_world_size(options_.local_world_size);
  r.set_master_port(options_.master_port);
  r.set_agent_store_port(options_.agent_store_port);
  r.set_last_round(last_round_);
  r.set_restart_count(last_restart_count_);
  r.set_want_nodes(options_.want_nodes);
  r.set_udp_liveness(options_.udp_liveness);
  r.set_role(options_.role);
  r.set_protocol_version(rendezvous::kProtocolVersion);
  *r.mutable_ssh() = options_.ssh;
  *r.mutable_topology() = options_.topology;
  for (const v1::TopologyDomain& d : options_.domains) *r.add_domains() = d;
  r.set_rank_order(options_.rank_order);
  r.set_scheduler_placement(options_.scheduler_placement);
  r.set_rank_hint_from_index(options_.rank_hint_from_index);
  StartJoin join{std::move(r), options_.join_timeout, after_local_failure};
  join.recheck = recheck;
  out->push_back(std::move(join));
}

void RoundMachine::JoinByDatagram(Actions* out) {
  const bool after_local_failure = BeginJoining();
  TLOG(kInfo) << "workers stopped; re-joining round " << rejoin_round_
              << " by datagram, the assignment to come down the open stream";
  ready_join_ = true;
  // The first READY from the next tick, so that an executor that finds the
  // node unhealthy (StartJoin) ends the machine before any goes out.
  const absl::Time now = clock_->Now();
  next_ready_ = now;
  join_deadline_ = now + options_.join_timeout;
  out->push_back(StartJoin{v1::JoinRequest{}, options_.join_timeout, after_local_failure,
                           /*on_stream=*/true});
}

void RoundMachine::FallBackToJoin(absl::string_view why, Actions* out) {
  TLOG(kInfo) << "re-joining round " << rejoin_round_ << " with a Join call: " << why;
  // The stream stays open until the answer's new one replaces it: the round
  // may have closed with this node already, and a stream that closes while
  // it runs is a lost node unless this agent answers the coordinator's
  // probe or re-opens it (docs/protocol.md, "Stream loss").
  rejoin_by_datagram_ = false;
  Join(out);
}

void RoundMachine::OnDirectiveWhileReady(const v1::Directive& d, Actions* out) {
  if (d.has_release()) return;  // (not sent to a re-joining node)
  if (d.coordinator_incarnation() != assignment_.coordinator_incarnation()) {
    FallBackToJoin("a directive from another coordinator", out);
    return;
  }
  if (d.has_assignment()) {
    if (d.round() < rejoin_round_) return;  // overtaken by a newer restart
    if (d.round() == rejoin_round_ && d.assignment().round() == d.round() &&
        d.assignment().coordinator_incarnation() == d.coordinator_incarnation()) {
      StopReadies();
      OnJoinAnswered(JoinAnswered{d.assignment()}, out, /*stream_open=*/true);
      return;
    }
  } else if (d.has_rejoin() && d.rejoin().ready_by_datagram() &&
             d.rejoin().next_round() > rejoin_round_) {
    // (The coordinator writes the Rejoin before the assignment.)
    RetargetReadies(d.rejoin().next_round(), Quoted(d.rejoin().reason()));
    return;
  } else if (d.has_rejoin() && d.rejoin().ready_by_datagram() &&
             d.rejoin().next_round() <= rejoin_round_) {
    // The stream's copy of a Rejoin this node took by datagram (the
    // coordinator wrote it when the confirmation was late), or an older one.
    return;
  } else if (d.has_job_failed() || d.has_job_finished()) {
    // The verdict, in place: the coordinator may be gone by the time a Join
    // call would ask (it stops once every stream has ended). Its reason is
    // the exit line's (FinishWith).
    StopReadies();
    outcome_ = Outcome::kExit;
    facts_ = FactsOfVerdict(d);
    FinishWith(out);
    return;
  }
  FallBackToJoin("an unexpected directive on the stream", out);
}

void RoundMachine::RetargetReadies(uint64_t round, absl::string_view why) {
  TLOG(kInfo) << "restart: " << why << "; re-joining round " << round << " instead";
  rejoin_round_ = round;
  readies_unacked_ = 0;
  ready_acked_ = false;
  next_ready_ = clock_->Now();
}

void RoundMachine::StopReadies() {
  ready_join_ = false;
  next_ready_ = join_deadline_ = absl::InfiniteFuture();
}

EndingFacts RoundMachine::FactsOfVerdict(const v1::Directive& d) {
  EndingFacts f;
  f.ending = d.has_job_failed() ? Ending::kJobFailed : Ending::kJobFinished;
  f.restarts_exhausted = d.has_job_failed() && d.job_failed().restarts_exhausted();
  f.preflight_failed = d.has_job_failed() && d.job_failed().preflight();
  f.why = d.has_job_failed() ? Quoted(d.job_failed().reason()) : std::string(kEveryWorkerExited0);
  return f;
}

void RoundMachine::OnJoinAnswered(const JoinAnswered& e, Actions* out, bool stream_open) {
  if (state_ != RoundState::kJoining) return;
  rejoin_by_datagram_ = false;
  std::optional<EndingFacts> ending = JoinEnding(e, out);
  if (!ending.has_value()) {
    if (quarantined_until_ != absl::InfiniteFuture()) return;  // joins again at TickJoining.
    BeginRound(*e.result, stream_open, out);
    return;
  }
  outcome_ = Outcome::kExit;
  facts_ = std::move(*ending);
  FinishWith(out);
}

std::optional<EndingFacts> RoundMachine::JoinEnding(const JoinAnswered& e, Actions* out) {
  EndingFacts f;
  if (signal_ != 0) {
    // Stopped by a signal while joining. A round that closed at the same
    // moment counted us in: tell the coordinator we are gone.
    if (e.result.ok()) {
      v1::LeaveRequest leave;
      *leave.mutable_member() = options_.me;
      leave.set_job_id(options_.job_id);
      leave.set_reason(absl::StrCat("agent received ", SignalText(signal_), " while joining"));
      out->push_back(SendLeave{std::move(leave)});
    }
    f.ending = Ending::kSignal;
    return f;
  }
  if (join_verdict_.has_value()) {
    TLOG(kDebug) << "the job ended while this node re-joined";
    return *join_verdict_;
  }
  if (e.result.ok()) return std::nullopt;
  if (rendezvous::ReasonOf(e.result.status()) == v1::ErrorInfo::PREFLIGHT_EXCLUDED) {
    // Left out of the round (--preflight=exclude): check again after the
    // quarantine and join then, as a scale-up.
    const int64_t ms = rendezvous::ErrorInfoOf(e.result.status()).retry_after_ms();
    const absl::Duration wait =
        std::clamp(absl::Milliseconds(ms), absl::Seconds(1), absl::Hours(1));
    TLOG(kWarning) << e.result.status().message() << "; this node tries to join again in "
                   << absl::FormatDuration(wait);
    quarantined_until_ = clock_->Now() + wait;
    return std::nullopt;
  }
  if (rendezvous::ReasonOf(e.result.status()) == v1::ErrorInfo::JOB_SUCCEEDED) {
    f.ending = Ending::kJobFinished;
    f.why = "the job had already succeeded when this node joined";
    return f;
  }
  f.ending = Ending::kJoinFailed;
  f.given_code = ExitCodeForJoinError(e.result.status());
  f.why = Quoted(e.result.status().message());
  return f;
}

void RoundMachine::BeginRound(const v1::Assignment& a, bool stream_open, Actions* out) {
  assignment_ = a;
  last_round_ = a.round();
  last_restart_count_ = a.restart_count();
  next_progress_log_ = absl::InfiniteFuture();

  // A fresh round: nothing of the previous one counts.
  workers_running_ = LocalProcesses();
  workers_ok_ = 0;
  workers_gone_ = workers_running_ == 0;  // an MPI worker holds until the verdict.
  running_failure_ = 0;
  any_failure_ = 0;
  outcome_ = Outcome::kUndecided;
  facts_ = EndingFacts{};
  kill_at_ = give_up_at_ = verdict_deadline_ = absl::InfiniteFuture();
  hang_watch_.BeginRound(a.round(), a.self().first_global_rank(), workers_running_);
  status_.progress.clear();

  status_.round = a.round();
  status_.node_rank = a.node_rank();
  status_.nnodes = a.nnodes();
  status_.world_size = a.world_size();
  status_.restart_count = a.restart_count();
  status_.workers_running = workers_running_;
  LogRound(a);

  // The stream first (no directive about this round may be missed), then
  // the workers.
  contact_.BeginRound(a, stream_open, out);
  SetState(RoundState::kRunning);
  out->push_back(StartWorkers{a});
}

void RoundMachine::LogRound(const v1::Assignment& a) const {
  SetLogPrefix(absl::StrFormat("node=%s rank=%d inc=%08x", options_.me.node_id(), a.node_rank(),
                               static_cast<uint32_t>(options_.me.incarnation() >> 32)));
  if (options_.role == v1::ROLE_MPI_LAUNCHER) {
    TLOG(kInfo) << absl::StrFormat("round %d: %d nodes, %d MPI slot(s) in all, restart %d",
                                   a.round(), a.nnodes(), a.world_size(), a.restart_count());
  } else if (options_.role == v1::ROLE_MPI_WORKER) {
    TLOG(kInfo) << absl::StrFormat(
        "round %d: node rank %d of %d, restart %d; hosting %d slot(s) for the launcher's MPI "
        "ranks",
        a.round(), a.node_rank(), a.nnodes(), a.restart_count(), a.self().local_world_size());
  } else {
    TLOG(kInfo) << absl::StrFormat(
        "round %d: node rank %d of %d, world size %d, master %s:%d, restart %d; starting %d "
        "worker(s) (ranks %d..%d)",
        a.round(), a.node_rank(), a.nnodes(), a.world_size(), Quoted(a.master_addr()),
        a.master_port(), a.restart_count(), a.self().local_world_size(),
        a.self().first_global_rank(),
        a.self().first_global_rank() + a.self().local_world_size() - 1);
  }
  if (!a.rank_order_note().empty()) {
    TLOG(kInfo) << "round " << a.round() << ": " << SafeForLog(a.rank_order_note(), 512);
  }
}

void RoundMachine::OnWorkersStarted(const WorkersStarted& e, Actions* out) {
  if (state_ != RoundState::kRunning) return;
  if (e.status.ok()) {
    out->push_back(SetServing{true});
    return;
  }
  const int code = e.exit_code != 0 ? e.exit_code : ExitCodeForSpawnError(e.status);
  status_.last_failure = std::string(e.status.message());
  v1::ReportRequest r = NewReport(v1::ReportRequest::FAILED);
  r.set_exit_code(code);
  r.set_failed_local_rank(0);
  r.set_message(std::string(e.status.message().substr(0, 1024)));
  out->push_back(SendReport{std::move(r)});
  contact_.CloseWatch(out, /*always=*/true);
  workers_running_ = 0;
  workers_gone_ = true;
  outcome_ = Outcome::kExit;
  facts_ = EndingFacts{};
  facts_.ending = Ending::kSpawnFailed;
  facts_.given_code = code;
  facts_.why = Quoted(e.status.message());
  FinishWith(out);
}

// ---- Workers.

std::string RoundMachine::WorkerName(const launcher::ProcessExit& x) const {
  return absl::StrFormat("worker rank %d (local rank %d, pid %d)", x.global_rank, x.local_rank,
                         x.pid);
}

void RoundMachine::OnWorkerExited(const WorkerExited& e, Actions* out) {
  const launcher::ProcessExit& x = e.exit;
  if (x.role != launcher::ProcessRole::kWorker) return;
  if (state_ == RoundState::kJoining) return;
  workers_running_ = std::max(0, workers_running_ - 1);
  status_.workers_running = workers_running_;
  hang_watch_.OnWorkerExited(x.local_rank, out);
  const int code = x.exit_code;
  if (code != 0 && any_failure_ == 0) any_failure_ = code;
  const std::string how = code > kExitSignalBase
                              ? absl::StrCat("killed by ", SignalText(code - kExitSignalBase))
                              : absl::StrCat("exited with code ", code);
  if (state_ != RoundState::kRunning || code == 0) {
    TLOG(kInfo) << WorkerName(x) << " " << how;
  }
  if (state_ != RoundState::kRunning) return;  // stopping: the exits we caused.
  if (code == 0) {
    ++workers_ok_;
    if (workers_ok_ == LocalProcesses()) {
      contact_.Repeat(NewReport(v1::ReportRequest::SUCCEEDED));
      // (A single node's verdict follows at once: only its exit line says so.)
      TLOG_AT(assignment_.nnodes() > 1 ? LogLevel::kInfo : LogLevel::kDebug)
          << "all " << workers_ok_ << " local worker(s) exited 0; waiting for the job's verdict";
      out->push_back(SendReport{NewReport(v1::ReportRequest::SUCCEEDED)});
      out->push_back(SetServing{false});
      SetState(RoundState::kAwaitingVerdict);
    }
    return;
  }
  running_failure_ = code;
  TLOG(kError) << WorkerName(x) << " failed: " << how;
  status_.last_failure = absl::StrCat(WorkerName(x), " ", how);
  v1::ReportRequest r = NewReport(v1::ReportRequest::FAILED);
  r.set_exit_code(code);
  r.set_failed_local_rank(x.local_rank);
  r.set_message(absl::StrCat("rank ", x.global_rank, " ", how));
  contact_.Repeat(r);
  out->push_back(SendReport{std::move(r)});
  // Fail fast: stop the other local workers now; the coordinator decides
  // (and tells every other node) whether the job fails or restarts.
  verdict_deadline_ = clock_->Now() + options_.verdict_timeout;
  BeginStop(absl::StrCat("worker rank ", x.global_rank, " failed"), 0, out);
}

void RoundMachine::OnLocalFailure(const LocalFailure& e, Actions* out) {
  if (state_ != RoundState::kRunning) return;
  running_failure_ = e.exit_code;
  if (any_failure_ == 0) any_failure_ = e.exit_code;
  TLOG(kError) << e.message;
  status_.last_failure = e.message;
  v1::ReportRequest r = NewReport(v1::ReportRequest::FAILED);
  r.set_exit_code(e.exit_code);
  r.set_failed_local_rank(0);
  r.set_message(e.message.substr(0, 1024));
  contact_.Repeat(r);
  out->push_back(SendReport{std::move(r)});
  verdict_deadline_ = clock_->Now() + options_.verdict_timeout;
  BeginStop("the launch plan failed", 0, out);
}

// ---- Progress and hangs.

void RoundMachine::OnProgress(const ProgressReported& e) {
  if (state_ != RoundState::kRunning && state_ != RoundState::kAwaitingVerdict) return;
  const std::string* line = hang_watch_.OnProgress(e.local_rank, e.line);
  if (line == nullptr) return;
  auto it = std::find_if(status_.progress.begin(), status_.progress.end(),
                         [&](const WorkerProgress& p) { return p.local_rank == e.local_rank; });
  if (it == status_.progress.end()) {
    WorkerProgress p;
    p.local_rank = e.local_rank;
    p.global_rank = assignment_.self().first_global_rank() + e.local_rank;
    it = status_.progress.insert(
        std::upper_bound(status_.progress.begin(), status_.progress.end(), p,
                         [](const WorkerProgress& a, const WorkerProgress& b) {
                           return a.local_rank < b.local_rank;
                         }),
        p);
  }
  it->line = *line;
  it->updated = clock_->Now();
  ++it->updates;
  if (it->first_line.empty() && absl::StrContains(*line, "step=")) {
    it->first_line = *line;
    it->first_updated = it->updated;
  }
}

void RoundMachine::TickHangWatch(absl::Time now, Actions* out) {
  HangWatch::TickResult turn = hang_watch_.Tick(now, out);
  if (turn.declared) ++status_.hangs;
  if (!turn.judged_here.has_value()) return;
  // No verdict in time: this node's judgement fails the round as a failed
  // worker would (the coordinator decides what the job does).
  const HangJudgement& judged = *turn.judged_here;
  running_failure_ = kExitWorkerHung;
  if (any_failure_ == 0) any_failure_ = kExitWorkerHung;
  status_.last_failure = absl::StrCat("hang: ", judged.summary);
  v1::ReportRequest r = NewReport(v1::ReportRequest::FAILED);
  r.set_exit_code(kExitWorkerHung);
  r.set_failed_local_rank(judged.suspect_local_rank);
  r.set_message(absl::StrCat("hang: ", judged.summary).substr(0, 1024));
  contact_.Repeat(r);
  out->push_back(SendReport{std::move(r)});
  verdict_deadline_ = clock_->Now() + options_.verdict_timeout;
  BeginStop("hang", 0, out);
}

std::string RoundMachine::TakeHangVerdict(const v1::HangVerdict& hang, Actions* out) {
  std::string note;
  std::optional<HangJudgement> judged = hang_watch_.TakeVerdict(hang, &note, out);
  if (judged.has_value()) {
    // The suspect's node fails as its worker's failure would; the others
    // (the ranks that waited for it) are its victims.
    running_failure_ = kExitWorkerHung;
    if (any_failure_ == 0) any_failure_ = kExitWorkerHung;
    status_.last_failure = absl::StrCat("hang: ", judged->summary);
  }
  return note;
}

void RoundMachine::OnNodeUnhealthy(const NodeUnhealthy& e, Actions* out) {
  // Only before a join is under way (the executor checks instead of joining).
  if (state_ != RoundState::kJoining || !options_.elastic || signal_ != 0) return;
  status_.last_failure = absl::StrCat("node unhealthy: ", e.why.substr(0, 512));
  v1::LeaveRequest leave;
  *leave.mutable_member() = options_.me;
  leave.set_job_id(options_.job_id);
  leave.set_reason(absl::StrCat("node unhealthy: ", e.why.substr(0, 512)));
  out->push_back(SendLeave{std::move(leave)});
  outcome_ = Outcome::kExit;
  facts_ = EndingFacts{};
  facts_.ending = Ending::kNodeUnhealthy;
  facts_.given_code = kExitNodeUnhealthy;
  facts_.why = absl::StrCat("this node's GPU health is fatal (", Quoted(e.why),
                            "); left the elastic job so that the pod is rescheduled on another "
                            "node");
  FinishWith(out);
}

void RoundMachine::OnWorkersGone(Actions* out) {
  if (state_ == RoundState::kJoining) return;
  workers_gone_ = true;
  workers_running_ = 0;
  status_.workers_running = 0;
  MaybeComplete(out);
}

// ---- Signals.

void RoundMachine::OnSignal(int sig, Actions* out) {
  if (!launcher::IsTerminatingSignal(sig)) {
    if (state_ != RoundState::kJoining && !workers_gone_) {
      TLOG(kInfo) << "forwarding " << SignalText(sig) << " to the workers";
      out->push_back(SignalWorkers{sig});
    }
    return;
  }
  ++terminating_signals_;
  if (signal_ == 0) signal_ = sig;
  auto leave = [&] {
    v1::LeaveRequest r;
    *r.mutable_member() = options_.me;
    r.set_job_id(options_.job_id);
    r.set_reason(absl::StrCat("agent received ", SignalText(sig)));
    out->push_back(SendLeave{std::move(r)});
  };
  switch (state_) {
    case RoundState::kJoining:
      if (ready_join_) {
        // No Join call to cancel: the Leave withdraws the re-join.
        TLOG(kWarning) << "received " << SignalText(sig) << " during the rendezvous; leaving";
        leave();
        StopReadies();
        outcome_ = Outcome::kExit;
        facts_ = EndingFacts{};
        facts_.ending = Ending::kSignal;
        FinishWith(out);
        return;
      }
      if (quarantined_until_ != absl::InfiniteFuture()) {
        // Waiting out a quarantine (PREFLIGHT_EXCLUDED): no Join call is in
        // flight whose answer would finish it, and it is no member to leave.
        TLOG(kWarning) << "received " << SignalText(sig) << " during its quarantine; leaving";
        quarantined_until_ = absl::InfiniteFuture();
        outcome_ = Outcome::kExit;
        facts_ = EndingFacts{};
        facts_.ending = Ending::kSignal;
        FinishWith(out);
        return;
      }
      if (!join_cancelled_) {
        TLOG(kWarning) << "received " << SignalText(sig) << " during the rendezvous; leaving";
        join_cancelled_ = true;
        out->push_back(CancelJoin{});
      }
      return;  // finishes when the join answers (Cancelled).
    case RoundState::kRunning:
    case RoundState::kAwaitingVerdict:
      TLOG(kInfo) << "received " << SignalText(sig)
                  << (workers_gone_ ? "; leaving the job"
                                    : "; forwarding it to the workers and leaving the job");
      leave();
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kSignal;
      BeginStop("signal", sig, out);
      return;
    case RoundState::kStopping: {
      const bool signal_stop = outcome_ == Outcome::kExit && facts_.ending == Ending::kSignal;
      if (terminating_signals_ >= 2 || signal_stop) {
        if (!workers_gone_ && give_up_at_ == absl::InfiniteFuture()) {
          TLOG(kWarning) << "received " << SignalText(sig)
                         << " again: killing the workers now (SIGKILL)";
          out->push_back(SignalWorkers{SIGKILL});
          kill_at_ = absl::InfiniteFuture();
          give_up_at_ = clock_->Now() + options_.kill_timeout;
        }
        return;
      }
      // The first signal while stopping for another reason: the pod is
      // going away, whatever the coordinator would have said.
      TLOG(kInfo) << "received " << SignalText(sig) << " while stopping; forwarding it";
      if (outcome_ != Outcome::kExit) {
        leave();
        outcome_ = Outcome::kExit;
        facts_.ending = Ending::kSignal;
      }
      if (!workers_gone_) out->push_back(SignalWorkers{sig});
      MaybeComplete(out);
      return;
    }
    case RoundState::kDone:
      return;
  }
}

// ---- The coordinator.

bool RoundMachine::OutcomePending() const {
  return outcome_ == Outcome::kUndecided &&
         (state_ == RoundState::kRunning || state_ == RoundState::kAwaitingVerdict ||
          state_ == RoundState::kStopping);
}

void RoundMachine::OnDirective(const DirectiveReceived& e, Actions* out) {
  if (e.watch_id != contact_.watch_id()) return;
  ApplyDirective(e.directive, out);
}

void RoundMachine::ApplyDirective(const v1::Directive& d, Actions* out) {
  if (state_ == RoundState::kJoining) {
    if (ready_join_) {
      OnDirectiveWhileReady(d, out);
      return;
    }
    // A fallback Join in flight, the kept stream still open: a verdict on it
    // ends the wait (the coordinator may stop before the Join gets there).
    if (contact_.has_stream() && !join_verdict_.has_value() &&
        (d.has_job_failed() || d.has_job_finished()) &&
        d.coordinator_incarnation() == assignment_.coordinator_incarnation()) {
      join_verdict_ = FactsOfVerdict(d);
      if (!join_cancelled_) {
        join_cancelled_ = true;
        out->push_back(CancelJoin{});
      }
    }
    return;
  }
  if (d.round() != assignment_.round() ||
      d.coordinator_incarnation() != assignment_.coordinator_incarnation()) {
    TLOG(kDebug) << "ignoring a directive for round " << d.round() << " (current round "
                 << assignment_.round() << ")";
    return;
  }
  contact_.NoteContact();
  if (d.has_release()) {
    contact_.OnRelease();
    return;
  }
  if (outcome_ == Outcome::kRejoin && rejoin_by_datagram_ &&
      (d.has_job_failed() || d.has_job_finished())) {
    // Stopping for a re-join by datagram on the kept stream, and the job
    // ended meanwhile: the verdict replaces the re-join.
    outcome_ = Outcome::kUndecided;
  }
  if (d.has_collect_evidence()) {
    // Another node's worker was declared hung: this node's evidence, before
    // anything is stopped (once a round; not while stopping).
    if (state_ == RoundState::kRunning && OutcomePending()) {
      hang_watch_.OnCollectEvidence(d.collect_evidence(), out);
    }
    return;
  }
  if (!OutcomePending()) return;
  // A verdict is logged once, with the exit code (FinishWith), once the
  // workers have stopped.
  if (d.has_job_finished()) {
    outcome_ = Outcome::kExit;
    facts_.ending = Ending::kJobFinished;
    facts_.why = kEveryWorkerExited0;
    BeginStop("the job finished", 0, out);
  } else if (d.has_job_failed()) {
    const v1::JobFailed& f = d.job_failed();
    const std::string evidence = TakeHangVerdict(f.hang(), out);
    outcome_ = Outcome::kExit;
    facts_.ending = Ending::kJobFailed;
    facts_.restarts_exhausted = f.restarts_exhausted();
    facts_.preflight_failed = f.preflight();
    facts_.why = Quoted(f.reason()) + evidence;
    BeginStop("the job failed", 0, out);
  } else if (d.has_rejoin()) {
    const std::string evidence = TakeHangVerdict(d.rejoin().hang(), out);
    TLOG(kInfo) << "restart: " << Quoted(d.rejoin().reason()) << "; re-joining for round "
                << d.rejoin().next_round() << evidence;
    outcome_ = Outcome::kRejoin;
    rejoin_by_datagram_ = d.rejoin().ready_by_datagram();
    rejoin_round_ = d.rejoin().next_round();
    BeginStop("restart", 0, out);
  } else if (d.has_stop_workers()) {
    TLOG(kInfo) << "the coordinator asks to stop the workers: "
                << Quoted(d.stop_workers().reason());
    if (verdict_deadline_ == absl::InfiniteFuture()) {
      verdict_deadline_ = clock_->Now() + options_.verdict_timeout;
    }
    BeginStop("the coordinator asked", 0, out);
  }
}

bool RoundMachine::HandleFinalError(const absl::Status& status, Actions* out) {
  if (status.ok()) return false;
  switch (rendezvous::ReasonOf(status)) {
    case v1::ErrorInfo::FENCED:
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kFenced;
      facts_.why = absl::StrCat(Quoted(status.message()), "; the job went on without this node");
      BeginStop("fenced", 0, out);
      return true;
    case v1::ErrorInfo::JOB_FAILED:
    case v1::ErrorInfo::RESTARTS_EXHAUSTED:
    case v1::ErrorInfo::PREFLIGHT_FAILED:
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kJobFailed;
      facts_.why = Quoted(status.message());
      facts_.restarts_exhausted = rendezvous::ReasonOf(status) == v1::ErrorInfo::RESTARTS_EXHAUSTED;
      facts_.preflight_failed = rendezvous::ReasonOf(status) == v1::ErrorInfo::PREFLIGHT_FAILED;
      BeginStop("the job failed", 0, out);
      return true;
    case v1::ErrorInfo::JOB_SUCCEEDED:
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kJobFinished;
      facts_.why = kEveryWorkerExited0;
      BeginStop("the job finished", 0, out);
      return true;
    default:
      break;
  }
  // The round is no longer current, or the coordinator does not know us (it
  // restarted and lost its state): the job went on without this round.
  if (absl::IsAborted(status) || absl::IsFailedPrecondition(status)) {
    // After this node's workers succeeded, a coordinator that lost the
    // round (it restarted) is a lost coordinator: exit 0. A round that moved
    // on in an elastic job is a restart everyone takes part in.
    // Whether the job restarts is the coordinator's policy (the assignment
    // says it): an MPI worker has no --max-restarts of its own.
    const bool restarts = options_.elastic || assignment_.max_restarts() > 0;
    if (state_ == RoundState::kAwaitingVerdict && !(restarts && absl::IsAborted(status))) {
      CoordinatorLost(Quoted(status.message()), out);
      return true;
    }
    if (restarts && rendezvous::ReasonOf(status) == v1::ErrorInfo::ROUND_RESTARTED) {
      // The Rejoin's reason, answered to a Report that crossed it: the same
      // one line the Rejoin would have given (OnDirective).
      TLOG(kInfo) << "restart: " << Quoted(status.message()) << "; re-joining for round "
                  << assignment_.round() + 1;
      outcome_ = Outcome::kRejoin;
      BeginStop("restart", 0, out);
    } else if (restarts) {
      TLOG(kWarning) << "the coordinator moved on (" << Quoted(status.message())
                     << "); stopping the workers and re-joining";
      outcome_ = Outcome::kRejoin;
      BeginStop("restart", 0, out);
    } else {
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kCoordinatorLost;
      facts_.why = absl::StrCat("the coordinator no longer knows this round (",
                                Quoted(status.message()), ")");
      BeginStop("lost the coordinator", 0, out);
    }
    return true;
  }
  return false;
}

void RoundMachine::OnStreamEnded(const StreamEnded& e, Actions* out) {
  if (!contact_.OnStreamEnded(e)) return;
  if (state_ == RoundState::kJoining && ready_join_) {
    FallBackToJoin(absl::StrCat("the stream ended (", Quoted(e.status.message()), ")"), out);
    return;
  }
  if (!OutcomePending()) return;
  if (HandleFinalError(e.status, out)) return;
  contact_.ReopenLater(e.status);
}

void RoundMachine::OnReportAnswered(const ReportAnswered& e, Actions* out) {
  if (e.status.ok()) {
    contact_.OnReportOk(e);
    return;
  }
  if (e.round != assignment_.round() || !OutcomePending()) {
    TLOG(kDebug) << "report (round " << e.round << "): " << Quoted(e.status.message());
    return;
  }
  if (HandleFinalError(e.status, out)) return;
  contact_.OnReportFailed(e.status.message());
}

void RoundMachine::OnDatagram(const DatagramReceived& e, Actions* out) {
  std::optional<rendezvous::LivenessDatagram> d = contact_.ParseDatagram(e);
  if (!d.has_value()) return;
  if (d->kind == rendezvous::LivenessKind::kRejoin) {
    OnRejoinDatagram(*d, out);
  } else {
    OnLivenessAcked(*d);
  }
}

void RoundMachine::OnRejoinDatagram(const rendezvous::LivenessDatagram& rejoin, Actions* out) {
  // Newer than the round this node is in, or re-joins by datagram; while a
  // Join call is out (the first join, a fallback), none is.
  const bool joining = state_ == RoundState::kJoining;
  if (joining && !ready_join_) return;
  const uint64_t current = joining ? rejoin_round_ : assignment_.round();
  if (!contact_.IsOwnNewerRejoin(rejoin, current)) return;
  // (From a coordinator that sends no reason: one whose Watch requests
  // accepts_rejoin_directive gets the Rejoin as a DIRECTIVE datagram.)
  constexpr absl::string_view kNoReason =
      "told by a REJOIN datagram (the coordinator's log says why)";
  if (joining) {
    contact_.NoteContact();
    RetargetReadies(rejoin.round, kNoReason);
    return;
  }
  // Exactly the Rejoin the stream would have carried, but for its reason.
  v1::Directive d;
  d.set_coordinator_incarnation(assignment_.coordinator_incarnation());
  d.set_round(assignment_.round());
  d.mutable_rejoin()->set_next_round(rejoin.round);
  d.mutable_rejoin()->set_ready_by_datagram(true);
  d.mutable_rejoin()->set_reason(std::string(kNoReason));
  TakeRejoinByDatagram(d, out);
}

void RoundMachine::TakeRejoinByDatagram(const v1::Directive& d, Actions* out) {
  const uint64_t next_round = d.rejoin().next_round();
  // Newer than the round this node is in (a replayed or late one says
  // nothing new), of its round and coordinator (checked again by ApplyDirective).
  if (state_ == RoundState::kJoining || next_round <= assignment_.round() ||
      d.round() != assignment_.round()) {
    return;
  }
  contact_.NoteContact();
  ApplyDirective(d, out);
  if (outcome_ == Outcome::kRejoin && rejoin_round_ == next_round) {
    // Taken (now, or before: then this is a repeat, and the confirmation
    // was lost): an alive datagram of the new round confirms it, so that the
    // coordinator neither sends it again nor writes it down the stream.
    out->push_back(contact_.Datagram(next_round));
  }
}

void RoundMachine::OnDirectiveDatagram(const DirectiveDatagramReceived& e, Actions* out) {
  std::optional<v1::Directive> taken =
      contact_.ParseDirectiveDatagram(e, assignment_.coordinator_incarnation());
  if (!taken.has_value()) return;
  v1::Directive& d = *taken;
  const bool ready = state_ == RoundState::kJoining && ready_join_;
  if (d.has_collect_evidence()) {
    // A released node asked for its hang evidence: as the stream's.
    if (!ready) ApplyDirective(d, out);
    return;
  }
  if (d.has_rejoin()) {
    // The Rejoin with its reason (WatchRequest.accepts_rejoin_directive):
    // as a REJOIN datagram, a round above this node's or nothing.
    if (!d.rejoin().ready_by_datagram()) return;
    if (ready) {
      OnDirectiveWhileReady(d, out);  // a newer one retargets the READYs
      return;
    }
    TakeRejoinByDatagram(d, out);
    return;
  }
  if (d.has_assignment()) {
    // The answer to this node's READY re-join (again for a later READY).
    if (!ready) return;
    // It comes without the key (a datagram is not encrypted): the one this
    // node holds goes on.
    d.mutable_assignment()->set_liveness_key(contact_.liveness_key_bytes());
    OnDirectiveWhileReady(d, out);
    return;
  }
  if (d.has_job_failed() || d.has_job_finished()) {
    if (state_ != RoundState::kDone) {
      if (ready) {
        OnDirectiveWhileReady(d, out);
      } else {
        ApplyDirective(d, out);
      }
    }
    // Confirmed once taken (and for every repeat), so that the coordinator
    // stops sending it and may exit; not while something else decides how
    // this agent ends (then its Join, Report or stream tells it the verdict).
    const Ending verdict = d.has_job_failed() ? Ending::kJobFailed : Ending::kJobFinished;
    const bool taken = (outcome_ == Outcome::kExit && facts_.ending == verdict) ||
                       (join_verdict_.has_value() && join_verdict_->ending == verdict);
    if (!taken) return;
    TLOG(kDebug) << "the job's verdict came by datagram (confirmed)";
    out->push_back(contact_.Datagram(d.round(), rendezvous::LivenessKind::kTaken));
  }
}

void RoundMachine::OnLivenessAcked(const rendezvous::LivenessDatagram& e) {
  if (state_ == RoundState::kJoining && ready_join_) {
    // An ack of a READY: the coordinator holds this node's re-join.
    if (!contact_.TakeOwnAck(e, rejoin_round_)) return;
    readies_unacked_ = 0;
    contact_.NoteContact();
    if (!ready_acked_) {
      ready_acked_ = true;
      TLOG(kDebug) << "the coordinator holds this node's re-join of round " << rejoin_round_;
    }
    return;
  }
  if (OutcomePending()) contact_.OnAck(e);
}

void RoundMachine::CoordinatorLost(absl::string_view why, Actions* out) {
  if (state_ == RoundState::kAwaitingVerdict) {
    outcome_ = Outcome::kExit;
    facts_.ending = Ending::kCoordinatorLostAfterSuccess;
    facts_.why = std::string(why);
    BeginStop("lost the coordinator", 0, out);
  } else if (options_.elastic) {
    TLOG(kWarning) << "lost the coordinator (" << why << "); stopping the workers and re-joining";
    outcome_ = Outcome::kRejoin;
    BeginStop("lost the coordinator", 0, out);
  } else {
    outcome_ = Outcome::kExit;
    facts_.ending = Ending::kCoordinatorLost;
    facts_.why = std::string(why);
    BeginStop("lost the coordinator", 0, out);
  }
}

// ---- Time.

void RoundMachine::OnTick(Actions* out) {
  const absl::Time now = clock_->Now();
  if (state_ == RoundState::kJoining) {
    TickJoining(now, out);
    return;
  }
  if (OutcomePending()) {
    std::optional<std::string> lost = contact_.Tick(
        now, state_ == RoundState::kRunning, [&] { return HeartbeatReport(); }, out);
    if (lost.has_value()) {
      CoordinatorLost(*lost, out);
    } else if (now >= verdict_deadline_) {
      outcome_ = Outcome::kExit;
      facts_.ending = Ending::kNoVerdict;
      facts_.why = absl::StrCat("none came within ", absl::FormatDuration(options_.verdict_timeout),
                                " of this node's failure");
    }
  }
  if (state_ == RoundState::kRunning) TickHangWatch(now, out);
  if (state_ == RoundState::kStopping) TickStopping(now, out);
}

void RoundMachine::TickJoining(absl::Time now, Actions* out) {
  if (now >= next_progress_log_) {
    TLOG(kInfo) << "waiting for round " << last_round_ + 1 << " to close ("
                << absl::FormatDuration(absl::Trunc(now - join_started_, absl::Seconds(1)))
                << " so far; the join timeout is " << absl::FormatDuration(options_.join_timeout)
                << ")";
    next_progress_log_ = now + options_.progress_log_interval;
  }
  if (now >= quarantined_until_) {
    quarantined_until_ = absl::InfiniteFuture();
    Join(out, /*recheck=*/true);
    return;
  }
  if (!ready_join_) return;
  if (now >= join_deadline_) {
    StopReadies();
    contact_.CloseWatch(out);
    OnJoinAnswered(JoinAnswered{absl::DeadlineExceededError(absl::StrCat(
                       "round ", rejoin_round_, " did not close within the join timeout (",
                       absl::FormatDuration(options_.join_timeout), ")"))},
                   out);
  } else if (now >= next_ready_ && readies_unacked_ >= kReadiesBeforeJoin) {
    FallBackToJoin(absl::StrCat("no ack for the last ", readies_unacked_, " READY datagrams (",
                                ready_acked_ ? "the coordinator went quiet"
                                             : "is UDP to the coordinator's port blocked?",
                                ")"),
                   out);
  } else if (now >= next_ready_) {
    // Repeated until the assignment comes: a datagram may be lost, and
    // they prove this node alive until then.
    out->push_back(contact_.Datagram(rejoin_round_, rendezvous::LivenessKind::kReady));
    ++readies_unacked_;
    next_ready_ = now + contact_.heartbeat_interval();
  }
}

void RoundMachine::TickStopping(absl::Time now, Actions* out) {
  if (now >= kill_at_) {
    TLOG(kWarning) << "grace period of " << absl::FormatDuration(options_.grace_period)
                   << " over; killing the workers (SIGKILL)";
    out->push_back(SignalWorkers{SIGKILL});
    kill_at_ = absl::InfiniteFuture();
    give_up_at_ = now + options_.kill_timeout;
  }
  if (!workers_gone_ && now >= give_up_at_) {
    TLOG(kError) << "worker process groups still alive "
                 << absl::FormatDuration(options_.kill_timeout)
                 << " after SIGKILL (uninterruptible sleep?); giving up on them";
    workers_gone_ = true;
  }
  MaybeComplete(out);
}

v1::ReportRequest RoundMachine::HeartbeatReport() const {
  v1::ReportRequest r = NewReport(v1::ReportRequest::RUNNING);
  // The hang's report until the verdict (the coordinator takes it once).
  if (const v1::HangReport* hang = hang_watch_.awaited_report()) *r.mutable_hang() = *hang;
  return r;
}

// ---- Stopping and finishing.

void RoundMachine::BeginStop(absl::string_view why, int forward_signal, Actions* out) {
  if (state_ == RoundState::kRunning || state_ == RoundState::kAwaitingVerdict) {
    if (state_ == RoundState::kRunning) out->push_back(SetServing{false});
    SetState(RoundState::kStopping);
    if (!workers_gone_) {
      const int sig = forward_signal != 0 ? forward_signal : SIGTERM;
      // (Workers that all exited leave nothing to stop worth a line; their
      // process group is still signalled, for anything they left behind.)
      if (workers_running_ > 0) {
        TLOG(kInfo) << "stopping " << workers_running_ << " worker(s) (" << why
                    << "): " << (forward_signal != 0 ? SignalText(sig) : std::string("SIGTERM"))
                    << ", then SIGKILL after " << absl::FormatDuration(options_.grace_period);
      }
      out->push_back(SignalWorkers{sig});
      kill_at_ = clock_->Now() + options_.grace_period;
    }
  }
  MaybeComplete(out);
}

void RoundMachine::MaybeComplete(Actions* out) {
  if (state_ != RoundState::kStopping || !workers_gone_ || outcome_ == Outcome::kUndecided) {
    return;
  }
  contact_.EndRound();
  if (outcome_ == Outcome::kRejoin && rejoin_by_datagram_ && contact_.has_stream() &&
      contact_.has_udp()) {
    JoinByDatagram(out);
    return;
  }
  contact_.CloseWatch(out);
  if (outcome_ == Outcome::kRejoin) {
    Join(out);
    return;
  }
  FinishWith(out);
}

void RoundMachine::FinishWith(Actions* out) {
  facts_.running_failure = running_failure_;
  facts_.any_failure = any_failure_;
  facts_.signal = signal_;
  contact_.CloseWatch(out);
  const int code = ExitCodeFor(facts_);
  if (facts_.why.empty() && facts_.signal != 0) facts_.why = SignalText(facts_.signal);
  // One line for the outcome: the verdict (or what ended the agent) with
  // the code it gives; also the pod's termination message (run_agent.cc).
  status_.exit_reason = facts_.why.empty()
                            ? std::string(EndingName(facts_.ending))
                            : absl::StrCat(EndingName(facts_.ending), ": ", facts_.why);
  const LogLevel level = code == kExitSuccess               ? LogLevel::kInfo
                         : facts_.ending == Ending::kSignal ? LogLevel::kWarning
                                                            : LogLevel::kError;
  TLOG_AT(level) << "exiting with code " << code << ": " << status_.exit_reason;
  status_.exit_code = code;
  SetState(RoundState::kDone);
  out->push_back(Finish{code});
}

// ---- Helpers.

int RoundMachine::LocalProcesses() const {
  return options_.local_processes >= 0 ? options_.local_processes
                                       : assignment_.self().local_world_size();
}

v1::ReportRequest RoundMachine::NewReport(v1::ReportRequest::State state) const {
  return agent::NewReport(options_.me, options_.job_id, assignment_.round(), state);
}

void RoundMachine::SetState(RoundState state) {
  state_ = state;
  status_.state = state;
}

}  // namespace trainlet::agent

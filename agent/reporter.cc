#include "agent/reporter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "progress/hang_evidence.h"
#include "topology/env_advice.h"

namespace trainlet::agent {
namespace {

v1::HealthReport::AgentState StateOf(RoundState s) {
  switch (s) {
    case RoundState::kJoining:
      return v1::HealthReport::JOINING;
    case RoundState::kRunning:
      return v1::HealthReport::RUNNING;
    case RoundState::kAwaitingVerdict:
      return v1::HealthReport::AWAITING_VERDICT;
    case RoundState::kStopping:
      return v1::HealthReport::STOPPING;
    case RoundState::kDone:
      return v1::HealthReport::DONE;
  }
  return v1::HealthReport::AGENT_STATE_UNSPECIFIED;
}

bool IsStopping(RoundState s) { return s == RoundState::kStopping || s == RoundState::kDone; }

}  // namespace

// The round's local workers: running, exited (how, and whether the agent
// stopped it), or hung (the latest hang evidence names it).
void Reporter::AddWorkersLocked(const AgentStatus& s, v1::HealthReport* r) const {
  const bool stopping = IsStopping(s.state);
  const bool marks = marks_round_ == s.round;
  for (const WorkerStatus& w : s.workers) {
    v1::WorkerHealth* h = r->add_workers();
    h->set_local_rank(w.local_rank);
    h->set_rank(w.global_rank);
    h->set_pid(w.pid);
    h->set_restarts(s.restart_count);
    auto mark = marks ? marks_.find(w.local_rank) : marks_.end();
    const bool hung = s.last_hang != nullptr && s.last_hang->round == s.round &&
                      s.last_hang->local_rank == w.local_rank;
    if (hung) {
      h->set_state(v1::WorkerHealth::HUNG);
    } else if (!w.exited) {
      h->set_state(stopping ? v1::WorkerHealth::STOPPED : v1::WorkerHealth::RUNNING);
    } else if (mark != marks_.end() && mark->second.stopped) {
      h->set_state(v1::WorkerHealth::STOPPED);
    } else {
      h->set_state(w.exit_code == 0 ? v1::WorkerHealth::SUCCEEDED : v1::WorkerHealth::FAILED);
    }
    if (w.exited) {
      h->set_exit_code(w.exit_code);
      if (mark != marks_.end()) h->set_exited_unix_ms(mark->second.exited_unix_ms);
    }
  }
}

namespace {

// The freshest progress line of the round's workers, split into its step and
// its other fields (the line was validated when it was read: progress.h).
// The step of a progress line; nullopt when it has none.
std::optional<int64_t> StepOf(absl::string_view line) {
  for (absl::string_view token : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    int64_t step = 0;
    if (absl::ConsumePrefix(&token, "step=") && absl::SimpleAtoi(token, &step)) return step;
  }
  return std::nullopt;
}

void AddProgress(const AgentStatus& s, absl::Time now, v1::HealthReport* r) {
  const WorkerProgress* latest = nullptr;
  const WorkerProgress* first = nullptr;  // the earliest first line with a step.
  for (const WorkerProgress& p : s.progress) {
    if (p.updates > 0 && (latest == nullptr || p.updated > latest->updated)) latest = &p;
    if (!p.first_line.empty() && (first == nullptr || p.first_updated < first->first_updated)) {
      first = &p;
    }
  }
  v1::Progress* out = r->mutable_progress();
  if (latest == nullptr) {
    out->set_known(false);
    out->set_step(-1);
    return;
  }
  out->set_known(true);
  out->set_step(-1);
  out->set_local_rank(latest->local_rank);
  out->set_age_ms(std::max<int64_t>(0, absl::ToInt64Milliseconds(now - latest->updated)));
  if (first != nullptr) {
    if (std::optional<int64_t> step = StepOf(first->first_line); step.has_value() && *step >= 0) {
      out->set_first_step(*step);
      out->set_first_age_ms(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(now - first->first_updated)));
    }
  }
  for (absl::string_view token : absl::StrSplit(latest->line, ' ', absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
    int64_t step = 0;
    if (key == "step" && absl::SimpleAtoi(value, &step)) {
      out->set_step(step);
    } else if (out->fields_size() < controller::kMaxProgressFields) {
      v1::ProgressField* f = out->add_fields();
      f->set_key(std::string(key));
      f->set_value(std::string(value));
    }
  }
}

bool SameForReport(const AgentStatus& a, const AgentStatus& b) {
  return a.state == b.state && a.round == b.round && a.restart_count == b.restart_count &&
         a.workers_running == b.workers_running && a.node_rank == b.node_rank &&
         a.exit_code == b.exit_code;
}

}  // namespace

Reporter::Reporter(ReporterOptions options, ReportTransport* transport, Clock* clock, Clock* wall)
    : options_(std::move(options)),
      transport_(transport),
      clock_(clock),
      wall_(wall),
      fail_log_(1, absl::Minutes(1), clock) {}

Reporter::~Reporter() { Stop(absl::ZeroDuration()); }

void Reporter::AddEventLocked(v1::ReportEvent::Kind kind, uint64_t round, std::string cause) {
  v1::ReportEvent e;
  e.set_kind(kind);
  e.set_round(round);
  e.set_cause(std::move(cause));
  e.set_at_unix_ms(absl::ToUnixMillis(wall_->Now()));
  e.set_id(next_event_id_++);
  events_.push_back(std::move(e));
  while (static_cast<int>(events_.size()) > kMaxPendingEvents) {
    events_.pop_front();
    ++stats_.events_dropped;
  }
  changed_ = true;
  wake_ = true;
}

void Reporter::Update(const AgentStatus& status) {
  absl::MutexLock lock(&mu_);
  // Every status passes here: when workers exit, and which ones the agent
  // stopped (running when it began stopping; the one whose exit made it
  // stop had exited by then).
  if (status.round != marks_round_) {
    marks_.clear();
    marks_round_ = status.round;
  }
  const int64_t now_ms = absl::ToUnixMillis(wall_->Now());
  for (const WorkerStatus& w : status.workers) {
    WorkerMark& mark = marks_[w.local_rank];
    if (!w.exited && IsStopping(status.state)) mark.stopped = true;
    if (w.exited && mark.exited_unix_ms == 0) mark.exited_unix_ms = now_ms;
    const bool failed = w.exited && w.exit_code != 0 && !mark.stopped && w.global_rank >= 0;
    if (failed && (!failure_.has_value() || failure_->round != status.round)) {
      failure_ = Failure{status.round, w.global_rank, w.exit_code, mark.exited_unix_ms};
    }
  }
  const bool was_joining = status_.has_value() && status_->state == RoundState::kJoining;
  if (status.state != RoundState::kJoining) {
    join_deadline_unix_ms_ = 0;
  } else if (!was_joining && options_.join_timeout > absl::ZeroDuration()) {
    join_deadline_unix_ms_ = absl::ToUnixMillis(wall_->Now() + options_.join_timeout);
  }
  if (status_.has_value() && SameForReport(*status_, status)) {
    status_ = status;  // texts may differ; not worth a report of its own.
    return;
  }
  const uint64_t previous_round = status_.has_value() ? status_->round : 0;
  const bool was_done = status_.has_value() && status_->state == RoundState::kDone;
  if (status.round > previous_round && previous_round > 0) {
    // No cause when this node's workers were fine: the controller takes the
    // failing node's.
    AddEventLocked(v1::ReportEvent::RESTART, status.round, status.last_failure);
    if (failure_.has_value() && failure_->round == previous_round) {
      v1::ReportEvent& e = events_.back();
      e.set_failed_rank(failure_->rank);
      e.set_failed_exit_code(failure_->exit_code);
      e.set_failed_unix_ms(failure_->exited_unix_ms);
    }
  }
  if (status.state == RoundState::kDone && !was_done) {
    AddEventLocked(v1::ReportEvent::FINISHED, status.round,
                   absl::StrCat("the agent exits with code ", status.exit_code,
                                status.last_failure.empty() ? "" : ": ", status.last_failure));
  }
  status_ = status;
  changed_ = true;
  wake_ = true;
}

void Reporter::AddEvent(v1::ReportEvent::Kind kind, std::string cause, std::string evidence) {
  absl::MutexLock lock(&mu_);
  if (!evidence.empty()) {
    evidence_ = std::move(evidence);
    if (evidence_.size() > controller::kMaxHangEvidenceLength) {
      // The end of the output is what matters; TrimToLimits fixes UTF-8.
      evidence_.erase(0, evidence_.size() - controller::kMaxHangEvidenceLength);
    }
  }
  AddEventLocked(kind, status_.has_value() ? status_->round : 0, std::move(cause));
}

void Reporter::SetPreflight(v1::PreflightReport report) {
  absl::MutexLock lock(&mu_);
  report.set_node_id(options_.node_id);
  report.set_incarnation(options_.incarnation);
  std::vector<std::string> failed;
  for (const v1::CheckResult& c : report.results()) {
    if (c.outcome() == v1::CheckResult::FAIL) failed.push_back(c.check());
  }
  if (failed.empty()) {
    preflight_event_checks_.clear();
  } else if (report.round() != preflight_event_round_ || failed != preflight_event_checks_) {
    AddEventLocked(v1::ReportEvent::PREFLIGHT, report.round(), PreflightEventCause(report));
    preflight_event_round_ = report.round();
    preflight_event_checks_ = std::move(failed);
  }
  preflight_ = std::move(report);
  changed_ = true;
  wake_ = true;
}

absl::Time Reporter::NextDueLocked() const {
  if (!status_.has_value()) return absl::InfiniteFuture();
  absl::Time due = last_attempt_ + options_.interval;
  if (changed_) due = std::min(due, last_attempt_ + std::min(kMinReportGap, options_.interval));
  return due;
}

std::optional<v1::HealthReport> Reporter::BuildLocked(absl::Time now, bool force) {
  if (!status_.has_value()) return std::nullopt;
  if (!force && now < NextDueLocked()) return std::nullopt;
  const AgentStatus& s = *status_;
  v1::HealthReport r;
  r.set_job_id(options_.job_id);
  r.set_node_id(options_.node_id);
  r.set_incarnation(options_.incarnation);
  r.set_sequence(++sequence_);
  r.set_round(s.round);
  r.set_node_rank(s.node_rank);
  r.set_nnodes(s.nnodes);
  r.set_world_size(s.world_size);
  r.set_state(StateOf(s.state));
  r.set_restart_count(s.restart_count);
  r.set_last_failure(s.last_failure);
  r.set_exit_code(s.exit_code);
  r.set_report_interval_ms(absl::ToInt64Milliseconds(options_.interval));
  r.set_sent_unix_ms(absl::ToUnixMillis(wall_->Now()));
  r.set_min_nodes(options_.min_nodes);
  r.set_max_nodes(options_.max_nodes);
  r.set_join_deadline_unix_ms(join_deadline_unix_ms_);
  if (!command_delivered_) r.set_command(options_.command);
  r.set_topology(options_.topology);
  if (preflight_.has_value()) *r.mutable_preflight() = *preflight_;
  AddWorkersLocked(s, &r);
  AddProgress(s, clock_->Now(), &r);
  v1::ReportEvent* why = r.add_events();
  why->set_kind(changed_ ? v1::ReportEvent::STATE_CHANGE : v1::ReportEvent::PERIODIC);
  why->set_round(s.round);
  why->set_at_unix_ms(r.sent_unix_ms());
  for (const v1::ReportEvent& e : events_) *r.add_events() = e;
  r.set_hang_evidence(evidence_);
  last_attempt_ = now;
  changed_ = false;
  return r;
}

void Reporter::SendAndRecord(v1::HealthReport report, absl::Duration timeout) {
  if (options_.enrich) options_.enrich(&report);
  controller::TrimToLimits(&report);
  const absl::Status s = transport_->Send(report, timeout);
  uint64_t last_id = 0;
  for (const v1::ReportEvent& e : report.events()) last_id = std::max(last_id, e.id());
  absl::MutexLock lock(&mu_);
  // Cut short by Stop: says nothing about the controller.
  if (stop_ && s.code() == absl::StatusCode::kCancelled) return;
  last_ok_ = s.ok();
  if (s.ok()) {
    ++stats_.sent;
    // Delivered: forget what this report carried (newer events stay).
    while (!events_.empty() && events_.front().id() <= last_id) events_.pop_front();
    if (!report.hang_evidence().empty()) evidence_.clear();
    if (!report.command().empty()) command_delivered_ = true;
    return;
  }
  ++stats_.failed;
  int64_t suppressed = 0;
  if (fail_log_.Allow(&suppressed)) {
    TLOG(kInfo) << "health report to the controller not delivered (the job is not affected): "
                << SafeForLog(s.message(), 256) << SuppressedNote(suppressed);
  }
}

absl::Time Reporter::Step() {
  std::optional<v1::HealthReport> report;
  {
    absl::MutexLock lock(&mu_);
    wake_ = false;
    report = BuildLocked(clock_->Now(), /*force=*/false);
    if (!report.has_value()) return NextDueLocked();
  }
  SendAndRecord(*std::move(report), options_.send_timeout);
  absl::MutexLock lock(&mu_);
  return NextDueLocked();
}

void Reporter::Loop() {
  while (true) {
    const absl::Time next = Step();
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || wake_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), next - clock_->Now());
    if (stop_) return;
  }
}

void Reporter::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Reporter::Stop(absl::Duration flush) {
  if (stopped_) return;
  stopped_ = true;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  transport_->Cancel();
  if (thread_.joinable()) thread_.join();
  if (flush <= absl::ZeroDuration()) {
    (void)transport_->Close(absl::ZeroDuration());
    return;
  }
  const absl::Time deadline = clock_->Now() + flush;
  std::optional<v1::HealthReport> report;
  {
    absl::MutexLock lock(&mu_);
    // The controller was away at the last attempt: do not wait for it now.
    if (last_ok_ && (changed_ || !events_.empty())) {
      report = BuildLocked(clock_->Now(), /*force=*/true);
    }
  }
  if (report.has_value()) SendAndRecord(*std::move(report), flush);
  bool ok;
  {
    absl::MutexLock lock(&mu_);
    ok = last_ok_;
  }
  const absl::Status closed = transport_->Close(
      ok ? std::max(deadline - clock_->Now(), absl::ZeroDuration()) : absl::ZeroDuration());
  if (!closed.ok()) {
    TLOG(kInfo) << "health reports to the controller: the last ones may not have arrived (the job "
                   "is not affected): "
                << SafeForLog(closed.message(), 256);
  }
}

Reporter::Stats Reporter::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.pending_events = static_cast<int>(events_.size());
  return s;
}

uint64_t AgentRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void AddGpuReports(const v1::NodeProbe& probe, v1::HealthReport* report) {
  for (const v1::Gpu& gpu : probe.gpus()) {
    if (report->gpus_size() >= controller::kMaxGpus) break;
    v1::GpuReport* g = report->add_gpus();
    g->set_index(gpu.index());
    g->set_uuid(gpu.uuid());
    *g->mutable_health() = gpu.health();
    const v1::GpuHealth& h = gpu.health();
    std::string reason;
    if (h.recovery_action_known() && h.recovery_action() != 0) {
      reason = absl::StrCat("NVML recovery action ", h.recovery_action());
    } else if (h.ecc_known() && h.ecc_dbe_volatile() > 0) {
      reason = absl::StrCat(h.ecc_dbe_volatile(), " uncorrectable ECC errors");
    } else if (h.remap_known() && h.remap_failure()) {
      reason = "row remapping failed";
    }
    g->set_fatal(!reason.empty());
    g->set_reason(reason);
  }
}

void AddCoordinatorView(const rendezvous::Coordinator::Snapshot& snapshot, v1::HealthReport* report,
                        absl::Time now) {
  v1::CoordinatorView* view = report->mutable_coordinator();
  view->set_members(snapshot.members);
  view->set_rounds(snapshot.round);
  view->set_gathering(snapshot.gathering);
  view->set_min_nodes(snapshot.min_nodes);
  view->set_max_nodes(snapshot.max_nodes);
  if (snapshot.gives_up_in != absl::InfiniteDuration()) {
    view->set_gives_up_unix_ms(
        absl::ToUnixMillis(now + std::max(snapshot.gives_up_in, absl::ZeroDuration())));
  }
  switch (snapshot.phase) {
    case rendezvous::Phase::kGathering:
      view->set_phase(v1::CoordinatorView::GATHERING);
      break;
    case rendezvous::Phase::kRunning:
      view->set_phase(v1::CoordinatorView::RUNNING);
      break;
    case rendezvous::Phase::kSucceeded:
      view->set_phase(v1::CoordinatorView::SUCCEEDED);
      break;
    case rendezvous::Phase::kFailed:
      view->set_phase(v1::CoordinatorView::FAILED);
      break;
  }
  view->set_verdict(snapshot.verdict);
  // Both lists are oldest first; TrimToLimits keeps the newest of each.
  for (const std::string& node : snapshot.lost_nodes) view->add_lost_nodes(node);
  for (const rendezvous::Coordinator::Snapshot::Restart& restart : snapshot.restarts) {
    v1::RestartReason* r = view->add_restarts();
    r->set_round(restart.round);
    r->set_reason(restart.reason);
  }
  for (const rendezvous::SlowNode& slow : snapshot.slow_nodes) {
    v1::SlowNodeView* v = view->add_slow_nodes();
    v->set_node_id(slow.node_id);
    v->set_cause(slow.cause);
    v->set_evidence(slow.evidence);
    v->set_since_unix_ms(absl::ToUnixMillis(slow.since));
    v->set_slowdown_percent(slow.slowdown_percent);
  }
}

std::string PreflightEventCause(const v1::PreflightReport& report) {
  std::vector<std::string> parts;
  for (const v1::CheckResult& c : report.results()) {
    if (c.outcome() != v1::CheckResult::FAIL) continue;
    parts.push_back(c.reason().empty() ? c.check()
                                       : absl::StrCat(c.check(), " (", c.reason(), ")"));
  }
  return absl::StrCat("preflight: ", parts.size(), " failed: ", absl::StrJoin(parts, "; "));
}

std::string CommandLineOf(const std::vector<std::string>& command) {
  std::string out;
  for (const std::string& arg : command) {
    if (!out.empty()) out += ' ';
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
             std::strchr("_./=:,@%+-", c) != nullptr;
    });
    out += plain ? arg : topology::ShellQuote(arg);
  }
  return out;
}

}  // namespace trainlet::agent

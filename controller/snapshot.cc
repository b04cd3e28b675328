#include "controller/snapshot.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainlet::controller {
namespace {

JobState JobStateOf(v1::JobSummary::State s) {
  switch (s) {
    case v1::JobSummary::ACTIVE:
      return JobState::kActive;
    case v1::JobSummary::STALE:
      return JobState::kStale;
    case v1::JobSummary::SUCCEEDED:
      return JobState::kSucceeded;
    case v1::JobSummary::FAILED:
      return JobState::kFailed;
    default:
      return JobState::kUnknown;
  }
}

AgentState AgentStateOf(v1::HealthReport::AgentState s) {
  switch (s) {
    case v1::HealthReport::JOINING:
      return AgentState::kJoining;
    case v1::HealthReport::RUNNING:
      return AgentState::kRunning;
    case v1::HealthReport::AWAITING_VERDICT:
      return AgentState::kAwaitingVerdict;
    case v1::HealthReport::STOPPING:
      return AgentState::kStopping;
    case v1::HealthReport::DONE:
      return AgentState::kDone;
    default:
      return AgentState::kUnknown;
  }
}

WorkerState WorkerStateOf(v1::WorkerHealth::State s) {
  switch (s) {
    case v1::WorkerHealth::RUNNING:
      return WorkerState::kRunning;
    case v1::WorkerHealth::SUCCEEDED:
      return WorkerState::kSucceeded;
    case v1::WorkerHealth::FAILED:
      return WorkerState::kFailed;
    case v1::WorkerHealth::HUNG:
      return WorkerState::kHung;
    case v1::WorkerHealth::STOPPED:
      return WorkerState::kStopped;
    default:
      return WorkerState::kUnknown;
  }
}

GpuStatus GpuStatusOf(const v1::GpuReport& g) {
  if (g.fatal()) return GpuStatus::kFatal;
  const v1::GpuHealth& h = g.health();
  const bool degraded =
      (h.ecc_known() && (h.ecc_sbe_volatile() > 0 || h.ecc_dbe_volatile() > 0)) ||
      (h.remap_known() && (h.remap_pending() || h.remapped_rows_correctable() > 0 ||
                           h.remapped_rows_uncorrectable() > 0));
  if (degraded) return GpuStatus::kDegraded;
  return g.has_health() ? GpuStatus::kHealthy : GpuStatus::kUnknown;
}

CheckOutcome CheckOutcomeOf(v1::CheckResult::Outcome o) {
  switch (o) {
    case v1::CheckResult::PASS:
      return CheckOutcome::kPass;
    case v1::CheckResult::FAIL:
      return CheckOutcome::kFail;
    case v1::CheckResult::SKIPPED:
      return CheckOutcome::kSkipped;
    default:
      return CheckOutcome::kUnknown;
  }
}

PreflightView PreflightViewOf(const v1::PreflightReport& p) {
  PreflightView v;
  v.known = true;
  v.round = p.round();
  v.started_unix_ms = p.started_unix_micros() / 1000;
  v.duration_ms = p.duration_micros() / 1000;
  for (const v1::CheckResult& c : p.results()) {
    v.checks.push_back(
        {c.check(), CheckOutcomeOf(c.outcome()), c.reason(), c.value(), c.unit(), c.threshold()});
  }
  for (const v1::LinkResult& l : p.links()) {
    v.links.push_back({l.to_node(), l.bandwidth_bytes_per_second(), l.rtt_seconds(), l.error()});
  }
  return v;
}

NodeView NodeViewOf(const std::string& job_id, const v1::NodeStatus& n, StepRateTracker* rates,
                    int64_t now_unix_ms) {
  const v1::HealthReport& r = n.report();
  NodeView v;
  v.node_id = r.node_id();
  v.node_rank = r.node_rank();
  v.incarnation = r.incarnation();
  v.up = !n.stale() && !n.lost();
  v.lost = n.lost();
  v.lost_at_unix_ms = n.lost_at_unix_ms();
  v.lost_reason = n.lost_reason();
  v.restored = n.restored();
  v.report_age_ms = n.report_age_ms();
  // Received (now - age) minus sent, across two clocks: rough; never negative.
  if (r.sent_unix_ms() > 0 && n.report_age_ms() >= 0) {
    v.report_lag_ms = std::max<int64_t>(0, now_unix_ms - n.report_age_ms() - r.sent_unix_ms());
  }
  v.agent_state = AgentStateOf(r.state());
  v.round = r.round();
  v.restart_count = r.restart_count();
  v.last_failure = r.last_failure();
  v.topology = r.topology();
  v.exit_code = r.exit_code();
  v.agent_rss_bytes = r.agent_rss_bytes();
  for (const v1::WorkerHealth& w : r.workers()) {
    WorkerView wv;
    wv.local_rank = w.local_rank();
    wv.rank = w.rank();
    wv.pid = w.pid();
    wv.state = WorkerStateOf(w.state());
    wv.exit_code = w.exit_code();
    wv.restarts = w.restarts();
    wv.exited_unix_ms = w.exited_unix_ms();
    v.workers.push_back(wv);
  }
  const v1::Progress& p = r.progress();
  v.progress.known = p.known();
  if (p.known()) {
    v.progress.step = p.step();
    v.progress.local_rank = p.local_rank();
    // The age at the report's sending, plus how old the report is now.
    v.progress.age_ms = p.age_ms() + std::max<int64_t>(0, n.report_age_ms());
    for (const v1::ProgressField& f : p.fields())
      v.progress.fields.emplace_back(f.key(), f.value());
    if (rates != nullptr && p.step() >= 0) {
      v.progress.steps_per_second =
          rates->Update(absl::StrCat(job_id, "/", r.node_id(), "/", r.incarnation()), p.step(),
                        r.sent_unix_ms() - p.age_ms());
    }
  }
  for (const v1::GpuReport& g : r.gpus()) {
    GpuView gv;
    gv.index = g.index();
    gv.uuid = g.uuid();
    gv.status = GpuStatusOf(g);
    gv.reason = g.reason();
    v.gpus.push_back(std::move(gv));
  }
  if (r.has_preflight()) v.preflight = PreflightViewOf(r.preflight());
  return v;
}

const char* RootCauseKindName(v1::RootCause::Kind kind) {
  switch (kind) {
    case v1::RootCause::WORKER_FAILED:
      return "worker-failed";
    case v1::RootCause::WORKER_HUNG:
      return "worker-hung";
    case v1::RootCause::NODE_LOST:
      return "node-lost";
    case v1::RootCause::AGENT_FAILED:
      return "agent-failed";
    default:
      return "other";
  }
}

RootCauseView RootCauseOf(const v1::RootCause& c) {
  RootCauseView v;
  v.known = c.kind() != v1::RootCause::KIND_UNSPECIFIED || !c.text().empty();
  if (!v.known) return v;
  v.kind = RootCauseKindName(c.kind());
  v.node_id = c.node_id();
  v.rank = c.rank();
  v.local_rank = c.local_rank();
  v.exit_code = c.exit_code();
  v.at_unix_ms = c.at_unix_ms();
  v.round = c.round();
  v.text = c.text();
  return v;
}

RestartTimesView RestartTimesOf(const v1::RestartTimes& t) {
  RestartTimesView v;
  v.known = true;
  v.failed_unix_ms = t.failed_unix_ms();
  v.detection_ms = t.detection_ms();
  v.restart_ms = t.restart_ms();
  v.waiting_ms = t.waiting_ms();
  v.rewarm_ms = t.rewarm_ms();
  v.redone_ms = t.redone_ms();
  v.failed_at_step = t.failed_at_step();
  v.resumed_from_step = t.resumed_from_step();
  v.redone_steps = t.redone_steps();
  v.done = t.done();
  v.node_id = t.node_id();
  v.rank = t.rank();
  return v;
}

GoodputView GoodputOf(const v1::Goodput& g) {
  GoodputView v;
  if (g.started_unix_ms() <= 0) return v;
  v.known = true;
  v.wall_ms = g.wall_ms();
  v.ms[kPhaseProductive] = g.productive_ms();
  v.ms[kPhaseStartup] = g.startup_ms();
  v.ms[kPhaseWaiting] = g.waiting_ms();
  v.ms[kPhaseDetection] = g.detection_ms();
  v.ms[kPhaseRestart] = g.restart_ms();
  v.ms[kPhaseRewarm] = g.rewarm_ms();
  v.ms[kPhaseRedone] = g.redone_ms();
  v.ettr = g.wall_ms() > 0 ? g.ettr() : -1;
  switch (g.phase()) {
    case v1::Goodput::WAITING:
      v.phase = GoodputPhaseName(kPhaseWaiting);
      break;
    case v1::Goodput::STARTUP:
      v.phase = GoodputPhaseName(kPhaseStartup);
      break;
    case v1::Goodput::PRODUCTIVE:
      v.phase = GoodputPhaseName(kPhaseProductive);
      break;
    case v1::Goodput::DETECTION:
      v.phase = GoodputPhaseName(kPhaseDetection);
      break;
    case v1::Goodput::RESTART:
      v.phase = GoodputPhaseName(kPhaseRestart);
      break;
    case v1::Goodput::REWARM:
      v.phase = GoodputPhaseName(kPhaseRewarm);
      break;
    case v1::Goodput::REDONE:
      v.phase = GoodputPhaseName(kPhaseRedone);
      break;
    case v1::Goodput::ENDED:
      v.phase = "ended";
      break;
    default:
      break;
  }
  v.phase_since_unix_ms = g.phase_since_unix_ms();
  return v;
}

}  // namespace

JobView SummaryViewOf(const v1::JobSummary& s, int64_t now_unix_ms) {
  JobView j;
  j.job_id = s.job_id();
  j.state = JobStateOf(s.state());
  j.round = s.round();
  j.rounds = static_cast<int64_t>(s.round());
  j.nnodes = s.nnodes();
  j.world_size = s.world_size();
  j.min_nodes = s.min_nodes();
  j.max_nodes = s.max_nodes();
  j.last_report_unix_ms = s.last_report_unix_ms();
  j.started_unix_ms = s.started_unix_ms();
  j.ended_unix_ms = s.ended_unix_ms();
  j.command = s.command();
  j.restored = s.restored();
  j.restarts_total = s.restarts();
  j.hangs_total = s.hangs();
  j.failures_total = s.failures();
  j.root_cause = RootCauseOf(s.root_cause());
  j.goodput = GoodputOf(s.goodput());
  if (s.has_waiting()) {
    const v1::WaitingState& w = s.waiting();
    j.waiting = {true, w.nodes(), w.min_nodes(), w.max_nodes(), w.gives_up_unix_ms(), w.round()};
  }
  // What the core counts over member nodes; the rest needs the nodes
  // (JobViewOf).
  j.totals.nodes = s.nodes() - s.nodes_lost();
  j.totals.nodes_up = s.nodes_fresh();
  j.totals.nodes_lost = s.nodes_lost();
  j.totals.workers = s.workers();
  j.totals.workers_running = s.workers_running();
  j.totals.progress_step = s.progress_step();
  j.totals.progress_known = s.progress_step() >= 0;
  j.totals.nodes_preflight_failed = s.nodes_preflight_failed();
  for (const std::string& n : s.preflight_failed_nodes()) {
    if (j.totals.preflight_failed_nodes.size() < kPreflightNodesNamed) {
      j.totals.preflight_failed_nodes.push_back(n);
    }
  }
  j.nodes_total = s.nodes();
  (void)now_unix_ms;
  return j;
}

JobView JobViewOf(const v1::GetStatusResponse& status, StepRateTracker* rates, int64_t now_unix_ms,
                  size_t first_node, size_t max_nodes) {
  const v1::JobSummary& s = status.summary();
  JobView j = SummaryViewOf(s, now_unix_ms);
  j.totals = JobTotals();
  // The coordinator's view of the newest report that has one (the agent
  // that hosts it; after a move, the newest host). A view with no round
  // yet says nothing.
  const v1::HealthReport* coordinator_report = nullptr;
  const size_t count = static_cast<size_t>(status.nodes_size());
  const size_t from = std::min(first_node, count);
  const size_t to = from + std::min(max_nodes, count - from);
  for (size_t i = 0; i < count; ++i) {
    const v1::NodeStatus& n = status.nodes(static_cast<int>(i));
    // Every node counts in the totals; only the page is kept.
    NodeView view = NodeViewOf(s.job_id(), n, rates, now_unix_ms);
    AddToTotals(view, &j.totals);
    if (i >= from && i < to) j.nodes.push_back(std::move(view));
    const v1::HealthReport& r = n.report();
    if (r.has_coordinator() && r.coordinator().rounds() > 0 &&
        (coordinator_report == nullptr ||
         std::make_pair(r.round(), r.sent_unix_ms()) >
             std::make_pair(coordinator_report->round(), coordinator_report->sent_unix_ms()))) {
      coordinator_report = &r;
    }
    if (j.nnodes == 0 && !n.lost() && r.nnodes() > 0) j.nnodes = r.nnodes();
    if (j.world_size == 0 && !n.lost() && r.world_size() > 0) j.world_size = r.world_size();
    if (r.has_coordinator() && r.coordinator().rounds() > 0) {
      j.rounds = std::max<int64_t>(j.rounds, static_cast<int64_t>(r.coordinator().rounds()));
    }
  }
  if (j.state == JobState::kSucceeded || j.state == JobState::kFailed) {
    j.totals.progress_age_ms = -1;  // a finished job has no progress age.
  }
  j.nodes_total = static_cast<int64_t>(count);
  j.nodes_from = static_cast<int64_t>(from);
  if (coordinator_report != nullptr) {
    for (const std::string& node : coordinator_report->coordinator().lost_nodes()) {
      j.lost_nodes.push_back(node);
    }
    for (const v1::SlowNodeView& n : coordinator_report->coordinator().slow_nodes()) {
      j.slow_nodes.push_back(
          {n.node_id(), n.cause(), n.evidence(), n.since_unix_ms(), n.slowdown_percent()});
    }
  }
  for (const v1::HistoryEntry& e : status.history()) {
    if (e.kind() == v1::HistoryEntry::RESTART) {
      j.restarts.push_back({e.round(), e.at_unix_ms(), e.node_id(), e.cause()});
    } else if (e.kind() == v1::HistoryEntry::HANG) {
      HangView h;
      h.round = e.round();
      h.at_unix_ms = e.at_unix_ms();
      h.node_id = e.node_id();
      h.verdict = e.verdict().empty() ? e.cause() : e.verdict();
      h.evidence_summary = e.evidence().substr(0, kEvidenceSummaryLength);
      h.evidence_bytes = std::max<int64_t>(e.evidence_bytes(), e.evidence().size());
      h.seq = e.seq();
      // The hang the job's root cause names: shown first, as the suspect.
      const RootCauseView& c = j.root_cause;
      h.suspect = c.known && c.kind == "worker-hung" && c.node_id == e.node_id() &&
                  (c.round == 0 || c.round == e.round());
      j.hangs.push_back(std::move(h));
    }
  }
  for (const v1::RoundInfo& r : status.rounds()) {
    RoundView round;
    round.round = r.round();
    round.started_unix_ms = r.started_unix_ms();
    round.ended_unix_ms = r.ended_unix_ms();
    round.nodes = r.nodes();
    round.world_size = r.world_size();
    round.restart_cause = r.restart_cause();
    if (r.has_ended_by()) round.ended_by = RootCauseOf(r.ended_by());
    if (r.has_restart()) round.restart = RestartTimesOf(r.restart());
    j.rounds_timeline.push_back(std::move(round));
  }
  // Each restart with what it cost (its round's record).
  for (RestartView& restart : j.restarts) {
    for (const RoundView& round : j.rounds_timeline) {
      if (round.round == restart.round) restart.times = round.restart;
    }
  }
  const v1::ProgressSeries& series = status.series();
  j.series.every_ms = series.every_ms();
  j.series.keys.assign(series.keys().begin(), series.keys().end());
  for (const v1::SeriesPoint& p : series.points()) {
    SeriesPointView point;
    point.at_unix_ms = p.at_unix_ms();
    point.step = p.step();
    point.steps_per_second = p.steps_per_second();
    point.values.assign(p.values().begin(), p.values().end());
    j.series.points.push_back(std::move(point));
  }
  // The job's rate: the core's series (over the member with the highest
  // step), else the node's own.
  if (!j.series.points.empty() && j.series.points.back().steps_per_second >= 0 &&
      j.state == JobState::kActive) {
    j.totals.steps_per_second = j.series.points.back().steps_per_second;
  }
  return j;
}

std::vector<EvidenceView> EvidenceOf(const v1::GetStatusResponse& status) {
  std::vector<EvidenceView> out;
  for (const v1::HistoryEntry& e : status.history()) {
    if (e.kind() != v1::HistoryEntry::HANG) continue;
    out.push_back({e.round(), e.at_unix_ms(), e.node_id(),
                   e.verdict().empty() ? e.cause() : e.verdict(), e.evidence(), e.seq()});
  }
  return out;
}

ControllerSnapshot CoreViewSource::Figures() {
  ControllerSnapshot snap;
  const absl::Time now = clock_->Now();
  snap.now_unix_ms = absl::ToUnixMillis(now);
  snap.uptime_ms = absl::ToInt64Milliseconds(now - started_);
  const ControllerCore::Stats stats = core_->stats();
  snap.reports_received = stats.reports;
  snap.reports_rejected = stats.reports_rejected;
  snap.version = version_;
  return snap;
}

ControllerSnapshot CoreViewSource::Summary() {
  ControllerSnapshot snap = Figures();
  const v1::ListJobsResponse jobs = core_->ListJobs();
  for (const v1::JobSummary& s : jobs.jobs()) {
    snap.jobs.push_back(SummaryViewOf(s, snap.now_unix_ms));
  }
  std::sort(snap.jobs.begin(), snap.jobs.end(),
            [](const JobView& a, const JobView& b) { return a.job_id < b.job_id; });
  return snap;
}

absl::StatusOr<JobView> CoreViewSource::Job(absl::string_view job_id, size_t first_node,
                                            size_t max_nodes) {
  absl::StatusOr<v1::GetStatusResponse> status = core_->GetStatus(job_id);
  if (!status.ok()) return status.status();
  return JobViewOf(*status, rates_, absl::ToUnixMillis(clock_->Now()), first_node, max_nodes);
}

absl::StatusOr<std::vector<EvidenceView>> CoreViewSource::Evidence(absl::string_view job_id) {
  absl::StatusOr<v1::GetStatusResponse> status = core_->GetStatus(job_id);
  if (!status.ok()) return status.status();
  std::vector<EvidenceView> hangs = EvidenceOf(*status);
  // What memory holds cut short, the history database holds whole.
  size_t i = 0;
  for (const v1::HistoryEntry& e : status->history()) {
    if (e.kind() != v1::HistoryEntry::HANG) continue;
    EvidenceView& h = hangs[i++];
    if (e.evidence_bytes() > static_cast<int64_t>(e.evidence().size()) && e.seq() > 0) {
      absl::StatusOr<std::string> whole = core_->Evidence(job_id, e.seq());
      if (whole.ok()) h.evidence = *std::move(whole);
    }
  }
  return hangs;
}

}  // namespace trainlet::controller

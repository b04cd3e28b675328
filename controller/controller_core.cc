#include "controller/controller_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/report_limits.h"

namespace trainlet::controller {
namespace {

constexpr size_t kMaxFencedIncarnations = 4;

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

v1::HistoryEntry Entry(v1::HistoryEntry::Kind kind, absl::Time at, uint64_t round,
                       const std::string& node_id, std::string cause) {
  v1::HistoryEntry e;
  e.set_kind(kind);
  e.set_at_unix_ms(UnixMs(at));
  e.set_round(round);
  e.set_node_id(node_id);
  e.set_cause(std::move(cause));
  return e;
}

// Why the job went to `round`, from what this report knows: the agent's
// RESTART event for it, the coordinator's reason, or the agent's last
// failure. Empty when it knows nothing specific.
std::string RestartCause(const v1::HealthReport& r, uint64_t round) {
  for (const v1::ReportEvent& e : r.events()) {
    if (e.kind() == v1::ReportEvent::RESTART && e.round() == round && !e.cause().empty()) {
      return e.cause();
    }
  }
  for (const v1::RestartReason& rr : r.coordinator().restarts()) {
    if (rr.round() == round && !rr.reason().empty()) return rr.reason();
  }
  if (r.round() == round && !r.last_failure().empty()) return r.last_failure();
  return "";
}

std::string UnknownCause(uint64_t round) {
  return absl::StrCat("round ", round, " opened (no node reported a cause)");
}

bool IsDone(const v1::HealthReport& r) { return r.state() == v1::HealthReport::DONE; }

}  // namespace

ControllerCore::ControllerCore(ControllerOptions options, Clock* clock, HistorySink* history)
    : options_(options),
      clock_(clock),
      history_(history),
      reject_log_(5, absl::Seconds(10), clock),
      sink_log_(3, absl::Seconds(60), clock) {}

void ControllerCore::Restore(const std::vector<HistoryRecord>& records) {
  absl::MutexLock lock(&mu_);
  for (const HistoryRecord& rec : records) {
    Job* job = JobForLocked(rec.job_id);
    if (job == nullptr) continue;
    const v1::HistoryEntry& e = rec.entry;
    job->round = std::max(job->round, e.round());
    if (e.kind() == v1::HistoryEntry::RESTART) {
      ++job->restarts;
      job->last_restart_round = std::max(job->last_restart_round, e.round());
    }
    if (e.kind() == v1::HistoryEntry::HANG) ++job->hangs;
    job->last_heard = std::max(job->last_heard, absl::FromUnixMillis(e.at_unix_ms()));
    AddHistoryLocked(rec.job_id, job, e, /*out=*/nullptr);
  }
}

ControllerCore::Job* ControllerCore::JobForLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return &it->second;
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    // Room for a new job: forget the one heard from longest ago that has no
    // fresh node.
    auto victim = jobs_.end();
    for (auto j = jobs_.begin(); j != jobs_.end(); ++j) {
      bool fresh = std::any_of(j->second.nodes.begin(), j->second.nodes.end(),
                               [](const auto& n) { return !n.second.stale; });
      if (fresh) continue;
      if (victim == jobs_.end() || j->second.last_heard < victim->second.last_heard) victim = j;
    }
    if (victim == jobs_.end()) return nullptr;
    TLOG(kInfo) << "controller: forgetting job " << SafeForLog(victim->first)
                << " (no node reporting) to make room for job " << SafeForLog(job_id);
    nodes_ -= static_cast<int>(victim->second.nodes.size());
    history_entries_ -= static_cast<int64_t>(victim->second.history.size());
    jobs_.erase(victim);
  }
  return &jobs_[job_id];
}

void ControllerCore::AddHistoryLocked(const std::string& job_id, Job* job, v1::HistoryEntry entry,
                                      std::vector<HistoryRecord>* out) {
  if (out != nullptr) out->push_back({job_id, entry});
  job->history.push_back(std::move(entry));
  ++history_entries_;
  while (static_cast<int>(job->history.size()) > options_.max_history_per_job) {
    job->history.pop_front();
    --history_entries_;
  }
  // Only the newest kEvidenceKeptInMemory hang entries keep their evidence.
  int with_evidence = 0;
  for (auto it = job->history.rbegin(); it != job->history.rend(); ++it) {
    if (it->evidence().empty()) continue;
    if (++with_evidence > kEvidenceKeptInMemory) {
      it->set_evidence("(in the history database: trainlet controller --db)");
    }
  }
}

void ControllerCore::NoteRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                                       const std::string& node_id, absl::Time at, std::string cause,
                                       std::vector<HistoryRecord>* out) {
  const bool pending_here =
      job->pending_restart.has_value() && job->pending_restart->round == round;
  if (round <= job->last_restart_round && !pending_here) return;  // recorded already.
  if (round > job->last_restart_round) {
    FlushPendingRestartLocked(job_id, job, out);
    job->last_restart_round = round;
    ++job->restarts;
    if (cause.empty()) {
      // The node that failed usually knows why; wait a little for its report.
      job->pending_restart = PendingRestart{round, node_id, at, clock_->Now()};
      return;
    }
  } else if (cause.empty()) {
    return;  // still pending.
  }
  if (pending_here) at = job->pending_restart->at;
  job->pending_restart.reset();
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << " restarted (round " << round
              << "): " << SafeForLog(cause);
  AddHistoryLocked(job_id, job,
                   Entry(v1::HistoryEntry::RESTART, at, round, node_id, std::move(cause)), out);
}

void ControllerCore::FlushPendingRestartLocked(const std::string& job_id, Job* job,
                                               std::vector<HistoryRecord>* out) {
  if (!job->pending_restart.has_value()) return;
  const PendingRestart p = *job->pending_restart;
  job->pending_restart.reset();
  AddHistoryLocked(
      job_id, job,
      Entry(v1::HistoryEntry::RESTART, p.at, p.round, p.node_id, UnknownCause(p.round)), out);
}

absl::Status ControllerCore::Report(const v1::HealthReport& report) {
  std::vector<HistoryRecord> records;
  absl::Status s;
  {
    absl::MutexLock lock(&mu_);
    s = ReportLocked(report, &records);
    if (s.ok()) {
      ++reports_;
    } else {
      ++rejected_;
    }
  }
  if (!s.ok()) {
    int64_t suppressed = 0;
    if (reject_log_.Allow(&suppressed)) {
      TLOG(kWarning) << "controller: refused a report from node "
                     << SafeForLog(report.node_id(), 64) << " of job "
                     << SafeForLog(report.job_id(), 64) << ": " << s.message()
                     << SuppressedNote(suppressed);
    }
    return s;
  }
  Persist(records);
  return s;
}

absl::Status ControllerCore::ReportLocked(const v1::HealthReport& report,
                                          std::vector<HistoryRecord>* out) {
  if (absl::Status s = ValidateHealthReport(report); !s.ok()) return s;
  const absl::Time now = clock_->Now();
  const std::string& job_id = report.job_id();
  const std::string& node_id = report.node_id();
  const bool new_job = jobs_.find(job_id) == jobs_.end();
  Job* job = JobForLocked(job_id);
  if (job == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the controller tracks %d jobs with nodes reporting (its limit); job %s is not tracked",
        options_.max_jobs, SafeForLog(job_id, 64)));
  }
  auto node_it = job->nodes.find(node_id);
  if (node_it == job->nodes.end()) {
    if (static_cast<int>(job->nodes.size()) >= options_.max_nodes_per_job ||
        nodes_ >= options_.max_nodes) {
      if (new_job) jobs_.erase(job_id);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the controller's node limit is reached (%d per job, %d in all); node %s is not tracked",
          options_.max_nodes_per_job, options_.max_nodes, SafeForLog(node_id, 64)));
    }
    node_it = job->nodes.emplace(node_id, Node()).first;
    ++nodes_;
    node_it->second.latest.set_incarnation(report.incarnation());
    TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                << SafeForLog(node_id, 64) << " reports";
  }
  Node& node = node_it->second;
  if (report.incarnation() != node.latest.incarnation()) {
    if (std::find(node.fenced.begin(), node.fenced.end(), report.incarnation()) !=
        node.fenced.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "node %s: incarnation %016x was replaced by %016x; a restarted agent reports as the new "
          "one",
          SafeForLog(node_id, 64), report.incarnation(), node.latest.incarnation()));
    }
    node.fenced.push_back(node.latest.incarnation());
    if (node.fenced.size() > kMaxFencedIncarnations) node.fenced.erase(node.fenced.begin());
    node.latest.Clear();
    node.last_event_id = 0;
    TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                << SafeForLog(node_id, 64) << " has a new incarnation";
  } else if (report.sequence() <= node.latest.sequence()) {
    return absl::OkStatus();  // older than what we have: a late duplicate.
  }

  // Events, each applied once.
  for (const v1::ReportEvent& e : report.events()) {
    if (e.id() != 0 && e.id() <= node.last_event_id) continue;
    if (e.id() != 0) node.last_event_id = e.id();
    absl::Time at = e.at_unix_ms() > 0 ? absl::FromUnixMillis(e.at_unix_ms()) : now;
    switch (e.kind()) {
      case v1::ReportEvent::RESTART:
        NoteRestartLocked(job_id, job, e.round(), node_id, at,
                          e.cause().empty() ? RestartCause(report, e.round()) : e.cause(), out);
        break;
      case v1::ReportEvent::HANG: {
        ++job->hangs;
        v1::HistoryEntry h = Entry(v1::HistoryEntry::HANG, at, e.round(), node_id, e.cause());
        h.set_evidence(report.hang_evidence());
        h.set_verdict(absl::StrCat("hung (declared by the agent of ", node_id, ")"));
        TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": hang on node "
                    << SafeForLog(node_id, 64) << ": " << SafeForLog(e.cause());
        AddHistoryLocked(job_id, job, std::move(h), out);
        break;
      }
      case v1::ReportEvent::FINISHED:
        AddHistoryLocked(job_id, job,
                         Entry(v1::HistoryEntry::FINISHED, at, e.round(), node_id, e.cause()), out);
        break;
      default:
        break;
    }
  }
  // A round the job had not reached: a restart unless it is the first.
  if (report.round() > job->round) {
    if (job->round > 0 || report.restart_count() > 0) {
      NoteRestartLocked(job_id, job, report.round(), node_id, now,
                        RestartCause(report, report.round()), out);
    }
    job->round = report.round();
    AddHistoryLocked(job_id, job,
                     Entry(v1::HistoryEntry::ROUND, now, report.round(), node_id,
                           absl::StrFormat("round %d: %d nodes, world size %d", report.round(),
                                           report.nnodes(), report.world_size())),
                     out);
    TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << " is in round "
                << report.round();
  }

  // A restart waiting for its cause: any node of that round may know it.
  if (job->pending_restart.has_value() && job->pending_restart->round == report.round()) {
    std::string cause = RestartCause(report, report.round());
    if (!cause.empty()) {
      NoteRestartLocked(job_id, job, report.round(), node_id, now, std::move(cause), out);
    }
  }

  node.latest = report;
  node.latest.clear_hang_evidence();
  node.latest.clear_events();
  node.last_report = now;
  const absl::Duration interval = absl::Milliseconds(report.report_interval_ms());
  node.stale_window = std::max(options_.stale_after, 3 * interval);
  node.stale = false;
  job->last_heard = now;
  return absl::OkStatus();
}

void ControllerCore::Sweep() {
  std::vector<HistoryRecord> records;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [job_id, job] : jobs_) {
      if (job.pending_restart.has_value() &&
          now - job.pending_restart->noted >= kRestartCauseWait) {
        FlushPendingRestartLocked(job_id, &job, &records);
      }
      for (auto it = job.nodes.begin(); it != job.nodes.end();) {
        Node& node = it->second;
        const absl::Duration silent = now - node.last_report;
        if (!node.stale && silent >= node.stale_window && !IsDone(node.latest)) {
          node.stale = true;
          AddHistoryLocked(job_id, &job,
                           Entry(v1::HistoryEntry::NODE_STALE, now, node.latest.round(), it->first,
                                 absl::StrCat("no report for ", absl::FormatDuration(silent))),
                           &records);
        } else if (!node.stale && silent >= node.stale_window) {
          node.stale = true;  // finished: silence is expected.
        }
        if (node.stale && silent >= node.stale_window + options_.forget_after) {
          it = job.nodes.erase(it);
          --nodes_;
        } else {
          ++it;
        }
      }
    }
  }
  Persist(records);
}

void ControllerCore::Persist(const std::vector<HistoryRecord>& records) {
  if (history_ == nullptr || records.empty()) return;
  absl::Status s = history_->Append(records);
  int64_t suppressed = 0;
  if (!s.ok() && sink_log_.Allow(&suppressed)) {
    TLOG(kWarning) << "controller: history not saved: " << s.message()
                   << SuppressedNote(suppressed);
  }
}

v1::JobSummary ControllerCore::SummaryLocked(const std::string& job_id, const Job& job,
                                             absl::Time now) const {
  v1::JobSummary s;
  s.set_job_id(job_id);
  s.set_round(job.round);
  s.set_nodes(static_cast<int>(job.nodes.size()));
  s.set_restarts(static_cast<int>(job.restarts));
  s.set_hangs(static_cast<int>(job.hangs));
  s.set_last_report_unix_ms(job.last_heard == absl::InfinitePast() ? 0 : UnixMs(job.last_heard));
  int64_t step = -1;
  int fresh = 0, done = 0, failed = 0;
  for (const auto& [id, node] : job.nodes) {
    const bool is_fresh = !node.stale && now - node.last_report < node.stale_window;
    if (is_fresh) ++fresh;
    if (IsDone(node.latest)) {
      ++done;
      if (node.latest.exit_code() != 0) ++failed;
    }
    if (node.latest.progress().known()) step = std::max(step, node.latest.progress().step());
  }
  s.set_nodes_fresh(fresh);
  s.set_progress_step(step);
  const int n = static_cast<int>(job.nodes.size());
  if (n > 0 && done == n) {
    s.set_state(failed > 0 ? v1::JobSummary::FAILED : v1::JobSummary::SUCCEEDED);
  } else if (fresh > 0) {
    s.set_state(v1::JobSummary::ACTIVE);
  } else {
    s.set_state(v1::JobSummary::STALE);
  }
  return s;
}

v1::ListJobsResponse ControllerCore::ListJobs() const {
  v1::ListJobsResponse out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [id, job] : jobs_) *out.add_jobs() = SummaryLocked(id, job, now);
  return out;
}

absl::StatusOr<v1::GetStatusResponse> ControllerCore::GetStatus(absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(std::string(job_id));
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", SafeForLog(job_id, 64),
                                            " at this controller; ListJobs names the known ones"));
  }
  const absl::Time now = clock_->Now();
  const Job& job = it->second;
  v1::GetStatusResponse out;
  *out.mutable_summary() = SummaryLocked(it->first, job, now);
  std::vector<const std::pair<const std::string, Node>*> nodes;
  for (const auto& n : job.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(), [](const auto* a, const auto* b) {
    int ra = a->second.latest.node_rank(), rb = b->second.latest.node_rank();
    if (ra < 0) ra = kMaxRank;
    if (rb < 0) rb = kMaxRank;
    if (ra != rb) return ra < rb;
    return a->first < b->first;
  });
  for (const auto* n : nodes) {
    v1::NodeStatus* ns = out.add_nodes();
    *ns->mutable_report() = n->second.latest;
    const absl::Duration age = now - n->second.last_report;
    ns->set_stale(n->second.stale || age >= n->second.stale_window);
    ns->set_report_age_ms(absl::ToInt64Milliseconds(age));
  }
  for (const v1::HistoryEntry& e : job.history) *out.add_history() = e;
  return out;
}

ControllerCore::Stats ControllerCore::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.jobs = static_cast<int>(jobs_.size());
  s.nodes = nodes_;
  s.reports = reports_;
  s.reports_rejected = rejected_;
  s.history_entries = history_entries_;
  return s;
}

}  // namespace trainlet::controller

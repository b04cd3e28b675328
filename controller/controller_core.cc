#include "controller/controller_core.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/report_limits.h"

namespace trainlet::controller {
namespace {

constexpr size_t kMaxFencedIncarnations = 4;
// Event times further back than this are taken as this far back.
constexpr absl::Duration kMaxEventAge = absl::Hours(24);

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

int64_t UnixMsOrZero(absl::Time t) {
  return t == absl::InfinitePast() || t == absl::InfiniteFuture() ? 0 : UnixMs(t);
}

absl::Time FromUnixMsOr(int64_t ms, absl::Time otherwise) {
  return ms > 0 ? absl::FromUnixMillis(ms) : otherwise;
}

// A time from `report`'s agent (its wall clock) on the controller's clock:
// moved by how far the agent's clock is from the controller's, as the
// report's own send time shows (a node whose clock is off by minutes moves
// no boundary: docs/goodput.md), then never in the future, never more than
// kMaxEventAge back; `now` when unset.
absl::Time AgentTime(int64_t unix_ms, const v1::HealthReport& report, absl::Time now) {
  if (unix_ms <= 0) return now;
  absl::Time t = absl::FromUnixMillis(unix_ms);
  if (report.sent_unix_ms() > 0) {
    // Bounded, so that the sum cannot overflow: a hostile send time moves
    // the time by at most kMaxEventAge either way, and the clamp holds.
    t += std::clamp(now - absl::FromUnixMillis(report.sent_unix_ms()), -kMaxEventAge, kMaxEventAge);
  }
  return std::clamp(t, now - kMaxEventAge, now);
}

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

// Whether the report says `round` was opened by a restart (a job whose
// first round the controller never saw: it ran faster than its reports).
bool SaysRestarted(const v1::HealthReport& r, uint64_t round) {
  if (r.restart_count() > 0) return true;
  for (const v1::ReportEvent& e : r.events()) {
    if (e.kind() == v1::ReportEvent::RESTART && e.round() == round) return true;
  }
  for (const v1::RestartReason& rr : r.coordinator().restarts()) {
    if (rr.round() == round) return true;
  }
  return false;
}

std::string UnknownCause(uint64_t round) {
  return absl::StrCat("round ", round, " opened (no node reported a cause)");
}

bool IsDone(const v1::HealthReport& r) { return r.state() == v1::HealthReport::DONE; }

bool IsEffectful(v1::ReportEvent::Kind kind) {
  return kind == v1::ReportEvent::HANG || kind == v1::ReportEvent::RESTART ||
         kind == v1::ReportEvent::FINISHED || kind == v1::ReportEvent::PREFLIGHT;
}

bool PreflightFailed(const v1::HealthReport& r) {
  return std::any_of(r.preflight().results().begin(), r.preflight().results().end(),
                     [](const v1::CheckResult& c) { return c.outcome() == v1::CheckResult::FAIL; });
}

// Worker failures, hangs and lost nodes say where a round ended; an
// agent's exit code or a text only say that it did.
bool IsPrimary(v1::RootCause::Kind kind) {
  return kind == v1::RootCause::WORKER_FAILED || kind == v1::RootCause::WORKER_HUNG ||
         kind == v1::RootCause::NODE_LOST;
}

// A scale-up re-opens a round without anything having failed (the
// coordinator's reason: "scale-up: node n-5 joined").
bool IsFailure(const v1::RootCause& cause) {
  return !(cause.kind() == v1::RootCause::OTHER && absl::StartsWith(cause.text(), "scale-up"));
}

std::string WorkerName(const v1::WorkerHealth& w) {
  return w.rank() >= 0 ? absl::StrCat("rank ", w.rank())
                       : absl::StrCat("local rank ", w.local_rank());
}

double NaN() { return std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

ControllerCore::ControllerCore(ControllerOptions options, Clock* clock, HistorySink* history)
    : options_(options),
      clock_(clock),
      history_(history),
      reject_log_(5, absl::Seconds(10), clock),
      sink_log_(3, absl::Seconds(60), clock),
      event_log_(10, absl::Seconds(10), clock) {}

// ---- Restore.

void ControllerCore::Restore(const StoredHistory& stored) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  // The jobs restored from a summary, and the first entry it did not know.
  std::map<std::string, int64_t> from_record;
  for (const auto& [job_id, rec] : stored.jobs) {
    Job* job = JobForLocked(job_id);
    if (job == nullptr) continue;
    from_record[job_id] = rec.next_seq();
    const v1::JobSummary& s = rec.summary();
    if (s.state() == v1::JobSummary::SUCCEEDED || s.state() == v1::JobSummary::FAILED) {
      job->verdict = s.state();
    }
    job->round = s.round();
    job->last_restart_round = s.round();
    job->restarts = s.restarts();
    job->hangs = s.hangs();
    job->failures = s.failures();
    job->started = FromUnixMsOr(s.started_unix_ms(), absl::InfinitePast());
    job->ended = FromUnixMsOr(s.ended_unix_ms(), absl::InfinitePast());
    job->last_heard = FromUnixMsOr(s.last_report_unix_ms(), absl::InfinitePast());
    job->command = s.command();
    job->min_nodes = s.min_nodes();
    job->max_nodes = s.max_nodes();
    job->nnodes = s.nnodes();
    job->world_size = s.world_size();
    job->restored_step = s.progress_step();
    job->next_seq = std::max<int64_t>(job->next_seq, rec.next_seq());
    job->restored = true;
    job->goodput.Restore(s.goodput());
    for (const v1::RoundInfo& r : rec.rounds()) job->rounds.push_back(r);
    while (static_cast<int>(job->rounds.size()) > kRoundsKept) job->rounds.pop_front();
    for (const v1::NodeRecord& nr : rec.nodes()) {
      if (nodes_ >= options_.max_nodes ||
          static_cast<int>(job->nodes.size()) >= options_.max_nodes_per_job) {
        break;
      }
      const std::string& id = nr.report().node_id();
      if (id.empty() || job->nodes.count(id) > 0) continue;
      Node& node = job->nodes[id];
      ++nodes_;
      node.latest = nr.report();
      node.last_report = FromUnixMsOr(nr.last_report_unix_ms(), now);
      node.stale_window = options_.stale_after;
      node.stale = true;
      node.lost = nr.lost();
      node.lost_round = nr.report().round();
      node.restored = true;
      if (nr.report().has_coordinator()) {
        job->host = id;
        job->has_view = true;
        job->view = nr.report().coordinator();
      }
    }
  }
  for (const HistoryRecord& rec : stored.entries) {
    Job* job = JobForLocked(rec.job_id);
    if (job == nullptr) continue;
    const v1::HistoryEntry& e = rec.entry;
    auto record = from_record.find(rec.job_id);
    // Without a summary (schema 1), or written after it was (the summary is
    // saved at most once a second, entries at once: a controller killed
    // in between): what the entries say.
    if (record == from_record.end() || e.seq() >= record->second) {
      job->restored = true;
      job->round = std::max(job->round, e.round());
      if (e.kind() == v1::HistoryEntry::RESTART && e.round() > job->last_restart_round) {
        ++job->restarts;
        job->last_restart_round = e.round();
      }
      if (e.kind() == v1::HistoryEntry::HANG) ++job->hangs;
      const absl::Time at = absl::FromUnixMillis(e.at_unix_ms());
      job->last_heard = std::max(job->last_heard, at);
      if (job->started == absl::InfinitePast() || at < job->started) job->started = at;
    }
    job->next_seq = std::max<int64_t>(job->next_seq, e.seq() + 1);
    AddHistoryLocked(rec.job_id, job, e, /*out=*/nullptr);
  }
}

// ---- Jobs and room.

bool ControllerCore::EvictOneJobLocked(const std::string& keep, const std::string& why) {
  auto victim = jobs_.end();
  const absl::Time now = clock_->Now();
  for (auto j = jobs_.begin(); j != jobs_.end(); ++j) {
    if (j->first == keep) continue;
    bool fresh = std::any_of(j->second.nodes.begin(), j->second.nodes.end(), [&](const auto& n) {
      return !n.second.stale && !n.second.lost &&
             now - n.second.last_report < n.second.stale_window;
    });
    if (fresh) continue;
    if (victim == jobs_.end() || j->second.last_heard < victim->second.last_heard) victim = j;
  }
  if (victim == jobs_.end()) return false;
  TLOG(kInfo) << "controller: forgetting job " << SafeForLog(victim->first, 64)
              << " (no node reporting) to make room for " << why;
  nodes_ -= static_cast<int>(victim->second.nodes.size());
  history_entries_ -= static_cast<int64_t>(victim->second.history.size());
  evidence_bytes_ -= victim->second.evidence_bytes;
  jobs_.erase(victim);
  return true;
}

ControllerCore::Job* ControllerCore::JobForLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return &it->second;
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs &&
      !EvictOneJobLocked(job_id, absl::StrCat("job ", SafeForLog(job_id, 64)))) {
    return nullptr;
  }
  return &jobs_[job_id];
}

// ---- History.

void ControllerCore::AddHistoryLocked(const std::string& job_id, Job* job, v1::HistoryEntry entry,
                                      HistoryBatch* out) {
  if (entry.seq() == 0) entry.set_seq(job->next_seq++);
  if (entry.evidence_bytes() == 0)
    entry.set_evidence_bytes(static_cast<int>(entry.evidence().size()));
  if (out != nullptr) out->entries.push_back({job_id, entry});
  const int64_t bytes = static_cast<int64_t>(entry.evidence().size());
  job->evidence_bytes += bytes;
  evidence_bytes_ += bytes;
  job->history.push_back(std::move(entry));
  ++history_entries_;
  while (static_cast<int>(job->history.size()) > options_.max_history_per_job) {
    const int64_t gone = static_cast<int64_t>(job->history.front().evidence().size());
    job->evidence_bytes -= gone;
    evidence_bytes_ -= gone;
    job->history.pop_front();
    --history_entries_;
  }
  if (bytes > 0) BoundEvidenceLocked(job);
}

void ControllerCore::BoundEvidenceLocked(Job* job) {
  auto cut = [this](Job* j, v1::HistoryEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t before = static_cast<int64_t>(e->evidence().size());
    FitText(e->mutable_evidence(), kEvidenceSummaryBytes);
    const int64_t freed = before - static_cast<int64_t>(e->evidence().size());
    j->evidence_bytes -= freed;
    evidence_bytes_ -= freed;
  };
  // Per job: only the newest kEvidenceKeptInMemory keep it whole.
  int whole = 0;
  for (auto it = job->history.rbegin(); it != job->history.rend(); ++it) {
    if (it->evidence().size() <= kEvidenceSummaryBytes) continue;
    if (++whole > kEvidenceKeptInMemory) cut(job, &*it);
  }
  // In all: the oldest go first.
  while (evidence_bytes_ > kMaxEvidenceBytesInMemory) {
    Job* oldest_job = nullptr;
    v1::HistoryEntry* oldest = nullptr;
    for (auto& [id, j] : jobs_) {
      for (v1::HistoryEntry& e : j.history) {
        if (e.evidence().size() <= kEvidenceSummaryBytes) continue;
        if (oldest == nullptr || e.at_unix_ms() < oldest->at_unix_ms()) {
          oldest = &e;
          oldest_job = &j;
        }
        break;  // a job's entries are oldest first.
      }
    }
    if (oldest == nullptr) break;
    cut(oldest_job, oldest);
  }
}

// ---- Restarts, rounds and causes.

void ControllerCore::RecordRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                                         const std::string& node_id, absl::Time at,
                                         std::string cause, HistoryBatch* out) {
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << " restarted (round " << round
              << "): " << SafeForLog(cause);
  for (auto it = job->rounds.rbegin(); it != job->rounds.rend(); ++it) {
    if (it->round() == round) {
      it->set_restart_cause(cause);
    } else if (it->round() < round) {
      // The round the restart ended: the restart's cause says why, when no
      // report said more.
      v1::RootCause c;
      c.set_kind(v1::RootCause::OTHER);
      c.set_node_id(node_id);
      c.set_rank(-1);
      c.set_local_rank(-1);
      c.set_at_unix_ms(UnixMs(at));
      c.set_round(it->round());
      c.set_text(cause);
      NoteCauseLocked(job, std::move(c));
      break;
    }
  }
  AddHistoryLocked(job_id, job,
                   Entry(v1::HistoryEntry::RESTART, at, round, node_id, std::move(cause)), out);
  job->dirty = true;
}

void ControllerCore::NoteRestartLocked(const std::string& job_id, Job* job, uint64_t round,
                                       const std::string& node_id, absl::Time at, std::string cause,
                                       HistoryBatch* out) {
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
  RecordRestartLocked(job_id, job, round, node_id, at, std::move(cause), out);
}

void ControllerCore::FlushPendingRestartLocked(const std::string& job_id, Job* job,
                                               HistoryBatch* out) {
  if (!job->pending_restart.has_value()) return;
  const PendingRestart p = *job->pending_restart;
  job->pending_restart.reset();
  RecordRestartLocked(job_id, job, p.round, p.node_id, p.at, UnknownCause(p.round), out);
}

void ControllerCore::NoteCauseLocked(Job* job, v1::RootCause cause) {
  for (auto it = job->rounds.rbegin(); it != job->rounds.rend(); ++it) {
    if (it->round() > cause.round()) continue;
    if (it->round() < cause.round()) return;  // a round the timeline no longer has.
    if (it->has_ended_by()) {
      const v1::RootCause& old = it->ended_by();
      const bool better = (IsPrimary(cause.kind()) && !IsPrimary(old.kind())) ||
                          (IsPrimary(cause.kind()) == IsPrimary(old.kind()) &&
                           cause.at_unix_ms() < old.at_unix_ms());
      if (!better) return;
      if (!IsFailure(old) && IsFailure(cause)) ++job->failures;
    } else if (IsFailure(cause)) {
      ++job->failures;
    }
    *it->mutable_ended_by() = std::move(cause);
    job->dirty = true;
    return;
  }
}

void ControllerCore::NoteWorkerCausesLocked(Job* job, const std::string& node_id,
                                            const v1::HealthReport& report, absl::Time now) {
  if (report.round() == 0) return;
  bool worker_cause = false;
  for (const v1::WorkerHealth& w : report.workers()) {
    if (w.state() != v1::WorkerHealth::FAILED && w.state() != v1::WorkerHealth::HUNG) continue;
    worker_cause = true;
    v1::RootCause c;
    c.set_node_id(node_id);
    c.set_rank(w.rank());
    c.set_local_rank(w.local_rank());
    c.set_round(report.round());
    if (w.state() == v1::WorkerHealth::FAILED) {
      c.set_kind(v1::RootCause::WORKER_FAILED);
      c.set_exit_code(w.exit_code());
      c.set_at_unix_ms(UnixMs(AgentTime(w.exited_unix_ms(), report, now)));
      c.set_text(absl::StrCat(WorkerName(w), " on ", node_id, " exited with code ", w.exit_code()));
    } else {
      c.set_kind(v1::RootCause::WORKER_HUNG);
      c.set_at_unix_ms(UnixMs(now));
      c.set_text(absl::StrCat(WorkerName(w), " on ", node_id, " hung"));
    }
    NoteCauseLocked(job, std::move(c));
  }
  if (!worker_cause && IsDone(report) && report.exit_code() != 0) {
    v1::RootCause c;
    c.set_kind(v1::RootCause::AGENT_FAILED);
    c.set_node_id(node_id);
    c.set_rank(-1);
    c.set_local_rank(-1);
    c.set_exit_code(report.exit_code());
    c.set_at_unix_ms(UnixMs(now));
    c.set_round(report.round());
    std::string text =
        absl::StrCat("the agent on ", node_id, " exited with code ", report.exit_code());
    if (!report.last_failure().empty()) absl::StrAppend(&text, ": ", report.last_failure());
    FitText(&text, kMaxTextLength);
    c.set_text(std::move(text));
    NoteCauseLocked(job, std::move(c));
  }
}

void ControllerCore::EnterRoundLocked(const std::string& job_id, Job* job, uint64_t round,
                                      const std::string& node_id, const v1::HealthReport& report,
                                      absl::Time now, HistoryBatch* out) {
  if (round <= job->round) return;
  const uint64_t ended_round = job->round;
  const bool restart = job->round > 0 || SaysRestarted(report, round);
  if (restart) {
    NoteRestartLocked(job_id, job, round, node_id, now, RestartCause(report, round), out);
  }
  if (!job->rounds.empty() && job->rounds.back().ended_unix_ms() == 0) {
    job->rounds.back().set_ended_unix_ms(UnixMs(now));
  }
  v1::RoundInfo info;
  info.set_round(round);
  info.set_started_unix_ms(UnixMs(now));
  if (report.round() == round) {
    info.set_nodes(report.nnodes());
    info.set_world_size(report.world_size());
  }
  // A restart recorded before the round was reached (an agent's event).
  for (const v1::HistoryEntry& e : job->history) {
    if (e.kind() == v1::HistoryEntry::RESTART && e.round() == round)
      info.set_restart_cause(e.cause());
  }
  job->rounds.push_back(std::move(info));
  while (static_cast<int>(job->rounds.size()) > kRoundsKept) job->rounds.pop_front();
  job->round = round;
  if (!job->goodput.started()) job->goodput.Start(now, /*waiting=*/false);
  if (restart) {
    // The restart's decision: when its agent saw it (the RESTART event),
    // else when the controller learnt of it.
    absl::Time decided = now;
    if (job->pending_restart.has_value() && job->pending_restart->round == round) {
      decided = job->pending_restart->at;
    }
    for (auto e = job->history.rbegin(); e != job->history.rend(); ++e) {
      if (e->kind() == v1::HistoryEntry::RESTART && e->round() == round) {
        decided = absl::FromUnixMillis(e->at_unix_ms());
        break;
      }
    }
    const absl::Time failed = FailedAtLocked(*job, ended_round, decided);
    const uint64_t previous_round = job->goodput.state().restart_round();
    std::optional<v1::RestartTimes> previous =
        job->goodput.Restart(round, std::min(failed, decided), decided, now);
    if (previous.has_value()) PutRestartLocked(job, previous_round, *previous);
    SyncRestartLocked(job);
  } else {
    job->goodput.FirstRound(now);
  }
  AddHistoryLocked(job_id, job,
                   Entry(v1::HistoryEntry::ROUND, now, round, node_id,
                         absl::StrFormat("round %d: %d nodes, world size %d", round,
                                         report.round() == round ? report.nnodes() : 0,
                                         report.round() == round ? report.world_size() : 0)),
                   out);
  job->dirty = true;
  job->save_now = true;
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << " is in round " << round;
}

// ---- Membership.

uint64_t ControllerCore::RoundHorizonLocked(const Job& job) const {
  const uint64_t base = job.has_view ? std::max(job.view.rounds(), job.round) : job.round;
  return base + kMaxRoundStep;
}

absl::Status ControllerCore::AdmitLocked(const Job& job, const Node* node,
                                         const v1::HealthReport& report, absl::Time now) const {
  const std::string& node_id = report.node_id();
  // A node the coordinator lists lost is in none of its rounds: no new
  // incarnation of it is a member until the coordinator lets one join
  // (and stops listing it).
  if (job.has_view && std::find(job.view.lost_nodes().begin(), job.view.lost_nodes().end(),
                                node_id) != job.view.lost_nodes().end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s of job %s: the job's coordinator lists it lost; a restarted agent's reports are "
        "taken once the coordinator lets it join a later round",
        SafeForLog(node_id, 64), SafeForLog(report.job_id(), 64)));
  }
  // A finished job's record is history: its rows are their incarnations'
  // (a new run of it begins in ReportLocked), and a node first heard of
  // after the end may only say goodbye (a late DONE; it changes no cause).
  if (job.verdict != v1::JobSummary::STATE_UNSPECIFIED && (node != nullptr || !IsDone(report))) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s finished (%s); it takes no new incarnation, and a new node only done (a new run "
        "of it begins with an agent running round 1)",
        SafeForLog(report.job_id(), 64),
        job.verdict == v1::JobSummary::SUCCEEDED ? "succeeded" : "failed"));
  }
  if (node == nullptr) {
    if (!job.has_view) return absl::OkStatus();
    const int limit = std::max(job.view.max_nodes(), job.view.members() + job.view.gathering());
    if (limit <= 0) return absl::OkStatus();
    int members = 0;
    for (const auto& [id, n] : job.nodes) members += n.lost ? 0 : 1;
    if (members < limit) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s already has %d member nodes, as many as its coordinator allows (%d); node %s is "
        "not one of them",
        SafeForLog(report.job_id(), 64), members, limit, SafeForLog(node_id, 64)));
  }
  const v1::HealthReport& old = node->latest;
  if (std::find(node->fenced.begin(), node->fenced.end(), report.incarnation()) !=
      node->fenced.end()) {
    // Taken back: the row's incarnation got it only through the grace (the
    // one it replaced had not reported the new round yet), and that one now
    // reports the job's round: it is the member (the coordinator has one
    // live incarnation of a node in a round).
    if (node->on_grace && node->fenced.back() == report.incarnation() && report.round() > 0 &&
        report.round() == job.round && report.state() != v1::HealthReport::JOINING) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s: incarnation %016x was replaced by a newer one; a restarted agent reports as "
        "the new one",
        SafeForLog(node_id, 64), report.incarnation()));
  }
  const uint64_t round = report.round();
  const bool through_a_later_round = round > 0 && round > old.round() && round <= job.round &&
                                     report.state() != v1::HealthReport::JOINING;
  const absl::Time reached = job.rounds.empty()
                                 ? absl::InfinitePast()
                                 : absl::FromUnixMillis(job.rounds.back().started_unix_ms());
  const bool old_gone = node->lost || node->restored || IsDone(old) ||
                        now - node->last_report >= node->stale_window ||
                        (old.round() < job.round && now - reached >= kMembershipGrace);
  if (through_a_later_round && old_gone) return absl::OkStatus();
  // The coordinator moved: node 0's agent restarted and hosts a new
  // coordinator, which opened a round after the job's (rounds continue
  // above what the survivors carry). Only its own view says so, so it is
  // taken from the node whose view the job followed, once the old
  // incarnation is gone (as any node's view is taken then).
  const bool new_coordinator = report.has_coordinator() && node_id == job.host &&
                               report.state() != v1::HealthReport::JOINING && round > job.round &&
                               round == report.coordinator().rounds();
  if (new_coordinator && old_gone) return absl::OkStatus();
  // The row's own incarnation is never named: it is what writes the row.
  return absl::FailedPreconditionError(absl::StrFormat(
      "node %s of job %s is another incarnation's (round %d); incarnation %016x (round %d) is "
      "taken once it is in a later round of the job than that one",
      SafeForLog(node_id, 64), SafeForLog(report.job_id(), 64), old.round(), report.incarnation(),
      round));
}

void ControllerCore::MarkLostLocked(const std::string& job_id, Job* job, const std::string& node_id,
                                    Node* node, absl::Time now, std::string reason) {
  if (node->lost) return;
  node->lost = true;
  node->lost_at = now;
  node->lost_round = node->latest.round();
  node->lost_reason = reason;
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
              << SafeForLog(node_id, 64) << " lost: " << SafeForLog(reason);
  if (node->lost_round > 0 && !IsDone(node->latest)) {
    v1::RootCause c;
    c.set_kind(v1::RootCause::NODE_LOST);
    c.set_node_id(node_id);
    c.set_rank(-1);
    c.set_local_rank(-1);
    c.set_at_unix_ms(UnixMs(now));
    c.set_round(node->lost_round);
    c.set_text(absl::StrCat("node ", node_id, " lost: ", reason));
    NoteCauseLocked(job, std::move(c));
  }
  AddHistoryLocked(
      job_id, job,
      Entry(v1::HistoryEntry::NODE_LOST, now, node->lost_round, node_id, std::move(reason)),
      /*out=*/nullptr);
  job->dirty = true;
  job->save_now = true;
}

void ControllerCore::TakeViewLocked(const std::string& job_id, Job* job, const std::string& node_id,
                                    const v1::CoordinatorView& view, absl::Time now,
                                    HistoryBatch* out) {
  if (!job->host.empty() && job->host != node_id) {
    auto host = job->nodes.find(job->host);
    const bool host_here = host != job->nodes.end() && !host->second.lost &&
                           now - host->second.last_report < host->second.stale_window;
    if (host_here) return;  // one node speaks for the coordinator.
    TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": the coordinator's view now "
                << "comes from node " << SafeForLog(node_id, 64);
  }
  if (job->has_view && job->host == node_id && view.rounds() < job->view.rounds()) return;
  job->host = node_id;
  const bool phase_changed = !job->has_view || job->view.phase() != view.phase();
  job->has_view = true;
  job->view = view;
  job->view.clear_restarts();
  if (view.min_nodes() > 0) job->min_nodes = view.min_nodes();
  if (view.max_nodes() > 0) job->max_nodes = view.max_nodes();
  for (const std::string& id : view.lost_nodes()) {
    auto it = job->nodes.find(id);
    if (it == job->nodes.end() || it->second.lost) continue;
    std::string reason = "declared lost by the coordinator";
    for (const v1::RestartReason& rr : view.restarts()) {
      if (rr.round() > it->second.latest.round() && absl::StrContains(rr.reason(), id)) {
        reason = rr.reason();
        break;
      }
    }
    MarkLostLocked(job_id, job, id, &it->second, now, std::move(reason));
  }
  if (phase_changed) job->dirty = true;
}

// ---- Events.

void ControllerCore::ApplyEventsLocked(const std::string& job_id, Job* job,
                                       const std::string& node_id, Node* node,
                                       const v1::HealthReport& report, absl::Time now,
                                       HistoryBatch* out) {
  bool evidence_taken = false;
  // The furthest round a RESTART event may open: the next one (a member's
  // own round may run kMaxRoundStep ahead, and a restart of it would take
  // the real next restarts' place). A quick job's agents report round 2's
  // restart before the job heard of round 1: the view that opens the round
  // records it, its cause taken from these events (RestartCause).
  const uint64_t round_limit =
      job->has_view ? std::max(job->view.rounds(), job->round) + 1 : job->round + kMaxRoundStep;
  for (const v1::ReportEvent& e : report.events()) {
    if (!IsEffectful(e.kind())) continue;
    // Effectful events carry ids (a re-sent one is applied once).
    if (e.id() == 0 || e.id() <= node->last_event_id) {
      if (e.id() == 0) ++events_dropped_;
      continue;
    }
    node->last_event_id = e.id();
    // The same event under another id.
    const uint64_t fingerprint = std::hash<std::string>()(e.cause()) ^
                                 (static_cast<uint64_t>(e.kind()) << 56) ^
                                 (e.round() * 0x9e3779b97f4a7c15ULL);
    if (std::find(node->recent_events.begin(), node->recent_events.end(), fingerprint) !=
        node->recent_events.end()) {
      ++events_dropped_;
      continue;
    }
    node->recent_events[node->next_recent] = fingerprint;
    node->next_recent = (node->next_recent + 1) % static_cast<int>(node->recent_events.size());
    // The node's allowance.
    Allowance& a = node->allowance;
    if (a.at != absl::InfinitePast()) {
      a.tokens = std::min<double>(kNodeEventBurst,
                                  a.tokens + absl::FDivDuration(now - a.at, kNodeEventEvery));
    }
    a.at = now;
    // Only a restart moves the job (its round); a hang or a finish of a
    // round ahead (the job went faster than its reports, and the view that
    // opened the round comes with a later one) is entered in the report's.
    const bool ahead = e.kind() == v1::ReportEvent::RESTART && e.round() > round_limit;
    if (a.tokens < 1 || ahead) {
      ++events_dropped_;
      int64_t suppressed = 0;
      if (event_log_.Allow(&suppressed)) {
        TLOG(kWarning) << "controller: job " << SafeForLog(job_id, 64) << ": dropped an event of "
                       << "node " << SafeForLog(node_id, 64)
                       << (a.tokens < 1 ? " (more than its rate allows)"
                                        : " (its round is ahead of the job's)")
                       << SuppressedNote(suppressed);
      }
      continue;
    }
    a.tokens -= 1;
    const absl::Time at = AgentTime(e.at_unix_ms(), report, now);
    const uint64_t round = std::min(e.round(), report.round());
    switch (e.kind()) {
      case v1::ReportEvent::RESTART:
        if (e.has_failed_rank() && e.round() > 1) {
          // From the node whose worker failed: the round it ended, who and when.
          const absl::Time failed = AgentTime(e.failed_unix_ms(), report, now);
          v1::RootCause c;
          c.set_kind(v1::RootCause::WORKER_FAILED);
          c.set_node_id(node_id);
          c.set_rank(e.failed_rank());
          c.set_local_rank(-1);
          c.set_exit_code(e.failed_exit_code());
          c.set_at_unix_ms(UnixMs(failed));
          c.set_round(e.round() - 1);
          c.set_text(absl::StrCat("rank ", e.failed_rank(), " on ", node_id, " exited with code ",
                                  e.failed_exit_code()));
          NoteCauseLocked(job, std::move(c));
          if (job->goodput.state().restart_round() == e.round() &&
              job->goodput.RefineFailure(failed)) {
            SyncRestartLocked(job);
            job->dirty = true;
          }
        }
        NoteRestartLocked(job_id, job, e.round(), node_id, at,
                          e.cause().empty() ? RestartCause(report, e.round()) : e.cause(), out);
        break;
      case v1::ReportEvent::HANG: {
        ++job->hangs;
        v1::HistoryEntry h = Entry(v1::HistoryEntry::HANG, at, round, node_id, e.cause());
        // A report carries one evidence text: it goes with one entry.
        if (!evidence_taken) h.set_evidence(report.hang_evidence());
        evidence_taken = true;
        // The agent's cause is the job's verdict: the suspect first, then who
        // declared it (the event comes from the suspect's node, which is
        // often not the declaring one). An agent without hang attribution
        // sends its own declaration.
        h.set_verdict(e.cause().empty()
                          ? absl::StrCat("hung (reported by the agent of ", node_id, ")")
                          : e.cause());
        TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": hang on node "
                    << SafeForLog(node_id, 64) << ": " << SafeForLog(e.cause());
        AddHistoryLocked(job_id, job, std::move(h), out);
        job->dirty = true;
        break;
      }
      case v1::ReportEvent::FINISHED:
        AddHistoryLocked(job_id, job,
                         Entry(v1::HistoryEntry::FINISHED, at, round, node_id, e.cause()), out);
        break;
      case v1::ReportEvent::PREFLIGHT:
        TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                    << SafeForLog(node_id, 64) << ": " << SafeForLog(e.cause());
        // Its round is the one the preflight checked (the node may not be
        // in it yet), bounded like a restart's.
        AddHistoryLocked(job_id, job,
                         Entry(v1::HistoryEntry::PREFLIGHT, at, std::min(e.round(), round_limit),
                               node_id, e.cause()),
                         out);
        break;
      default:
        break;
    }
  }
}

// ---- Verdict, series, new runs.

void ControllerCore::UpdateVerdictLocked(const std::string& job_id, Job* job, absl::Time now) {
  if (job->verdict != v1::JobSummary::STATE_UNSPECIFIED) return;
  const bool coordinator_done =
      job->has_view && (job->view.phase() == v1::CoordinatorView::SUCCEEDED ||
                        job->view.phase() == v1::CoordinatorView::FAILED);
  int members = 0, done = 0;
  const Node* failed = nullptr;
  for (const auto& [id, node] : job->nodes) {
    if (node.lost || node.restored) continue;
    ++members;
    if (IsDone(node.latest)) {
      ++done;
      if (node.latest.exit_code() != 0 && failed == nullptr) failed = &node;
      continue;
    }
    // With the coordinator's verdict, a silent member is gone, not pending.
    if (coordinator_done && now - node.last_report >= node.stale_window) continue;
    return;  // still running.
  }
  if (members == 0 || done == 0) return;
  const bool job_failed =
      failed != nullptr || (job->has_view && job->view.phase() == v1::CoordinatorView::FAILED);
  job->verdict = job_failed ? v1::JobSummary::FAILED : v1::JobSummary::SUCCEEDED;
  job->ended = now;
  std::optional<absl::Time> failed_at;
  if (job_failed) failed_at = FailedAtLocked(*job, job->round, now);
  if (!job->rounds.empty()) {
    v1::RoundInfo& last = job->rounds.back();
    if (last.ended_unix_ms() == 0) last.set_ended_unix_ms(UnixMs(now));
    if (job_failed && !last.has_ended_by()) {
      v1::RootCause c;
      c.set_kind(v1::RootCause::OTHER);
      c.set_rank(-1);
      c.set_local_rank(-1);
      c.set_at_unix_ms(UnixMs(now));
      c.set_round(last.round());
      c.set_text(job->view.verdict().empty() ? "the job failed" : job->view.verdict());
      NoteCauseLocked(job, std::move(c));
    }
  }
  job->goodput.End(now, failed_at);
  SyncRestartLocked(job);
  job->dirty = true;
  job->save_now = true;
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64)
              << (job_failed ? " failed" : " succeeded") << " (" << done << " of " << members
              << " member nodes done)";
}

void ControllerCore::SampleLocked(Job* job, const v1::HealthReport& report, absl::Time now) {
  const v1::Progress& p = report.progress();
  if (!p.known() || p.step() < 0) return;
  Series& s = job->series;
  // When the line was written, on the controller's clock (never more than
  // kMaxEventAge back, as event times: the bounds allow an age near 2^63).
  const int64_t at_ms = UnixMs(now - std::min(absl::Milliseconds(p.age_ms()), kMaxEventAge));
  // Most reports come between two points: nothing to do (the ingest path).
  if (!s.points.empty() && at_ms - s.points.back().at_ms < absl::ToInt64Milliseconds(s.every)) {
    return;
  }
  // One node's progress makes the series (its rate is its own); another
  // once that one is lost or silent.
  if (!s.source.empty() && s.source != report.node_id()) {
    auto src = job->nodes.find(s.source);
    const bool source_here = src != job->nodes.end() && !src->second.lost &&
                             now - src->second.last_report < src->second.stale_window;
    if (source_here) return;
  }
  s.source = report.node_id();
  SeriesPoint point;
  point.at_ms = s.points.empty() ? at_ms : std::max(at_ms, s.points.back().at_ms);
  point.step = p.step();
  point.values.fill(NaN());
  for (const v1::ProgressField& f : p.fields()) {
    double v = 0;
    if (!absl::SimpleAtod(f.value(), &v) || !std::isfinite(v)) continue;
    auto k = std::find(s.keys.begin(), s.keys.end(), f.key());
    if (k == s.keys.end()) {
      if (static_cast<int>(s.keys.size()) >= kSeriesFields) continue;
      s.keys.push_back(f.key());
      k = s.keys.end() - 1;
    }
    point.values[k - s.keys.begin()] = v;
  }
  if (!s.points.empty() && s.round == report.round() && point.step >= s.points.back().step &&
      point.at_ms > s.points.back().at_ms) {
    point.rate = static_cast<double>(point.step - s.points.back().step) * 1000.0 /
                 static_cast<double>(point.at_ms - s.points.back().at_ms);
  }
  s.round = report.round();
  s.points.push_back(point);
  if (static_cast<int>(s.points.size()) > kSeriesPoints) {
    // Full: every other point goes and the spacing doubles, so that the
    // series spans the whole run.
    std::deque<SeriesPoint> kept;
    for (size_t i = 0; i < s.points.size(); i += 2) kept.push_back(s.points[i]);
    s.points = std::move(kept);
    s.every *= 2;
  }
}

// ---- Goodput.

void ControllerCore::GoodputOfReportLocked(Job* job, const v1::HealthReport& report, bool changed,
                                           absl::Time now) {
  GoodputLedger& g = job->goodput;
  bool moved = false;
  // Whether the job has the nodes it needs changes with a node's state or
  // the coordinator's view (and with time: Sweep).
  if (changed || report.has_coordinator()) moved |= g.Waiting(TooFewNodesLocked(*job, now), now);
  if (report.round() > 0 && report.round() == job->round &&
      report.state() == v1::HealthReport::RUNNING) {
    moved |= g.WorkersRunning(now);
  }
  const v1::Progress& p = report.progress();
  if (p.known() && p.step() >= 0 && report.round() > 0 && report.round() <= job->round) {
    // When the lines were written, on the controller's clock (bounded as
    // the series' points are).
    const absl::Time at = now - std::min(absl::Milliseconds(p.age_ms()), kMaxEventAge);
    const absl::Time first_at = now - std::min(absl::Milliseconds(p.first_age_ms()), kMaxEventAge);
    std::optional<int64_t> first;
    if (p.has_first_step()) first = p.first_step();
    moved |= g.Progress(report.round(), p.step(), at, first, first_at, now);
  }
  if (moved) {
    SyncRestartLocked(job);
    job->dirty = true;
    job->save_now = true;
  }
}

absl::Time ControllerCore::GoodputUntilLocked(const Job& job, absl::Time now) const {
  if (job.verdict != v1::JobSummary::STATE_UNSPECIFIED || job.last_heard >= now) return now;
  for (const auto& [id, node] : job.nodes) {
    // A node put back by a controller restart has not had its chance to
    // report to this one yet: the open phase goes on through the absence.
    if (node.restored) return now;
    if (!node.lost && now - node.last_report < node.stale_window) return now;
  }
  // STALE under this controller: no node reports. Counted to the last
  // report, not on through a silence nobody can vouch for (pods deleted
  // without a verdict would otherwise creep to 100% productive); a report
  // again counts the gap in the open phase (docs/goodput.md).
  return job.last_heard == absl::InfinitePast() ? now : job.last_heard;
}

bool ControllerCore::TooFewNodesLocked(const Job& job, absl::Time now) const {
  if (job.min_nodes <= 0 || job.verdict != v1::JobSummary::STATE_UNSPECIFIED) return false;
  // Nodes that can run: reporting, not lost, not done, and not excluded by
  // a failed preflight.
  int able = 0;
  for (const auto& [id, node] : job.nodes) {
    if (node.lost || node.restored || IsDone(node.latest) || PreflightFailed(node.latest) ||
        now - node.last_report >= node.stale_window) {
      continue;
    }
    if (++able >= job.min_nodes) return false;
  }
  return true;
}

absl::Time ControllerCore::FailedAtLocked(const Job& job, uint64_t round,
                                          absl::Time otherwise) const {
  for (auto it = job.rounds.rbegin(); it != job.rounds.rend(); ++it) {
    if (it->round() != round) continue;
    if (!it->has_ended_by()) return otherwise;
    const v1::RootCause& c = it->ended_by();
    absl::Time at = absl::FromUnixMillis(c.at_unix_ms());
    // A hung worker or a lost node stopped the job's steps before anyone
    // could tell: the failure is the last step.
    const std::optional<absl::Time> last = job.goodput.LastStep();
    if ((c.kind() == v1::RootCause::WORKER_HUNG || c.kind() == v1::RootCause::NODE_LOST) &&
        last.has_value() && job.goodput.state().step_round() == round) {
      at = std::min(at, *last);
    }
    return std::min(at, otherwise);
  }
  return otherwise;
}

void ControllerCore::PutRestartLocked(Job* job, uint64_t round, const v1::RestartTimes& times) {
  for (auto it = job->rounds.rbegin(); it != job->rounds.rend(); ++it) {
    if (it->round() < round) return;
    if (it->round() == round) {
      *it->mutable_restart() = times;
      it->mutable_restart()->clear_node_id();  // answers fill it in.
      it->mutable_restart()->clear_rank();
      return;
    }
  }
}

void ControllerCore::SyncRestartLocked(Job* job) {
  const v1::Goodput& g = job->goodput.state();
  if (g.restart_round() > 0) PutRestartLocked(job, g.restart_round(), g.restart());
}

void ControllerCore::NewRunLocked(const std::string& job_id, Job* job, absl::Time now) {
  TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": a new run begins (the "
              << (job->verdict == v1::JobSummary::SUCCEEDED ? "previous one succeeded"
                  : job->verdict == v1::JobSummary::FAILED  ? "previous one failed"
                                                            : "previous one went silent")
              << ")";
  nodes_ -= static_cast<int>(job->nodes.size());
  job->nodes.clear();
  job->round = 0;
  job->last_restart_round = 0;
  job->pending_restart.reset();
  job->restarts = 0;
  job->hangs = 0;
  job->failures = 0;
  job->started = now;
  job->ended = absl::InfinitePast();
  job->verdict = v1::JobSummary::STATE_UNSPECIFIED;
  job->command.clear();
  job->min_nodes = job->max_nodes = job->nnodes = job->world_size = 0;
  job->rounds.clear();
  job->series = Series();
  job->host.clear();
  job->has_view = false;
  job->view.Clear();
  job->restored = false;
  job->restored_step = -1;
  job->goodput = GoodputLedger();
  job->goodput.Start(now, /*waiting=*/false);
  job->dirty = true;
  job->save_now = true;
}

// ---- Reports.

absl::Status ControllerCore::Report(const v1::HealthReport& report) {
  HistoryBatch batch;
  absl::Status s;
  {
    absl::MutexLock lock(&mu_);
    s = ReportLocked(report, &batch);
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
  Persist(batch);
  return s;
}

absl::Status ControllerCore::ReportLocked(const v1::HealthReport& report, HistoryBatch* out) {
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
  // Undoes a job made for a report that is then refused.
  auto refuse = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (new_job) jobs_.erase(job_id);
    return s;
  };
  auto node_it = job->nodes.find(node_id);
  const bool another_incarnation =
      node_it == job->nodes.end() || node_it->second.latest.incarnation() != report.incarnation();
  // A finished or silent job whose agents start over: a new run. Only a
  // new coordinator opens round 1 (a restarted agent joining a running job
  // gets a later round), so an agent running round 1 says so.
  if (!new_job && another_incarnation && !job->nodes.empty() && report.round() == 1 &&
      report.state() != v1::HealthReport::JOINING && !IsDone(report)) {
    const bool finished = job->verdict != v1::JobSummary::STATE_UNSPECIFIED;
    const bool silent = std::none_of(job->nodes.begin(), job->nodes.end(), [&](const auto& n) {
      return !n.second.lost && !n.second.restored &&
             now - n.second.last_report < n.second.stale_window;
    });
    if (finished || silent) {
      NewRunLocked(job_id, job, now);
      node_it = job->nodes.end();
    }
  }
  if (report.round() > RoundHorizonLocked(*job) ||
      (report.has_coordinator() && report.coordinator().rounds() > RoundHorizonLocked(*job))) {
    return refuse(absl::InvalidArgumentError(
        absl::StrFormat("round %d: more than %d rounds ahead of job %s's round %d",
                        std::max(report.round(), report.coordinator().rounds()), kMaxRoundStep,
                        SafeForLog(job_id, 64), RoundHorizonLocked(*job) - kMaxRoundStep)));
  }
  Node* node = node_it == job->nodes.end() ? nullptr : &node_it->second;
  if (node != nullptr && !another_incarnation) {
    if (report.sequence() <= node->latest.sequence() && !node->restored) {
      return absl::OkStatus();  // older than what we have: a late duplicate.
    }
  } else if (absl::Status s = AdmitLocked(*job, node, report, now); !s.ok()) {
    return refuse(s);
  }
  if (node == nullptr) {
    if (static_cast<int>(job->nodes.size()) >= options_.max_nodes_per_job) {
      return refuse(absl::ResourceExhaustedError(absl::StrFormat(
          "job %s has %d nodes, the controller's limit per job; node %s is not tracked",
          SafeForLog(job_id, 64), options_.max_nodes_per_job, SafeForLog(node_id, 64))));
    }
    if (nodes_ >= options_.max_nodes &&
        !EvictOneJobLocked(job_id, absl::StrCat("node ", SafeForLog(node_id, 64)))) {
      return refuse(absl::ResourceExhaustedError(absl::StrFormat(
          "the controller tracks %d nodes (its limit) in jobs still reporting; node %s is not "
          "tracked",
          options_.max_nodes, SafeForLog(node_id, 64))));
    }
    node = &job->nodes[node_id];
    ++nodes_;
    node->latest.set_incarnation(report.incarnation());
    node->late = job->verdict != v1::JobSummary::STATE_UNSPECIFIED;
    TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                << SafeForLog(node_id, 64) << " reports";
  } else if (another_incarnation) {
    // Taken while the old incarnation still reported (only the grace let
    // it in), or taken back by the one it replaced (AdmitLocked).
    const bool on_grace = !node->lost && !node->restored && !IsDone(node->latest) &&
                          now - node->last_report < node->stale_window;
    std::vector<uint64_t> fenced = std::move(node->fenced);
    const bool taken_back =
        std::find(fenced.begin(), fenced.end(), report.incarnation()) != fenced.end();
    fenced.erase(std::remove(fenced.begin(), fenced.end(), report.incarnation()), fenced.end());
    fenced.push_back(node->latest.incarnation());
    if (fenced.size() > kMaxFencedIncarnations) fenced.erase(fenced.begin());
    if (taken_back) {
      TLOG(kWarning) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                     << SafeForLog(node_id, 64) << ": the incarnation that reports round "
                     << report.round() << " takes its row back from one that took it unproven";
    } else {
      TLOG(kInfo) << "controller: job " << SafeForLog(job_id, 64) << ": node "
                  << SafeForLog(node_id, 64) << " has a new incarnation in round "
                  << report.round();
    }
    *node = Node();
    node->fenced = std::move(fenced);
    node->on_grace = on_grace && !taken_back;
  }
  if (job->started == absl::InfinitePast()) {
    job->started = now;
    job->dirty = true;
    job->save_now = true;
  }
  // A job whose first report this is, or one kept by an older controller.
  if (!job->goodput.started()) job->goodput.Start(now, /*waiting=*/false);
  job->restored = false;
  const v1::HealthReport::AgentState previous_state =
      node->restored ? v1::HealthReport::AGENT_STATE_UNSPECIFIED : node->latest.state();
  const uint64_t previous_round = node->restored ? 0 : node->latest.round();
  const bool previous_preflight_failed = PreflightFailed(node->latest);
  node->restored = false;

  ApplyEventsLocked(job_id, job, node_id, node, report, now, out);
  if (report.has_coordinator()) {
    TakeViewLocked(job_id, job, node_id, report.coordinator(), now, out);
    if (job->host == node_id && job->view.rounds() > job->round) {
      EnterRoundLocked(job_id, job, job->view.rounds(), node_id, report, now, out);
    }
  }
  // A round the job had not reached: taken from a member once the
  // coordinator has it (or with no coordinator view).
  if (report.round() > job->round && (!job->has_view || report.round() <= job->view.rounds())) {
    EnterRoundLocked(job_id, job, report.round(), node_id, report, now, out);
  }
  if (report.round() == job->round && report.nnodes() > 0) {
    job->nnodes = report.nnodes();
    job->world_size = report.world_size();
    if (!job->rounds.empty() && job->rounds.back().round() == job->round &&
        job->rounds.back().nodes() == 0) {
      job->rounds.back().set_nodes(report.nnodes());
      job->rounds.back().set_world_size(report.world_size());
    }
  }
  // A restart waiting for its cause: any node of that round may know it.
  if (job->pending_restart.has_value() && job->pending_restart->round == report.round()) {
    std::string cause = RestartCause(report, report.round());
    if (!cause.empty()) {
      NoteRestartLocked(job_id, job, report.round(), node_id, now, std::move(cause), out);
    }
  }

  node->latest = report;
  node->latest.clear_hang_evidence();
  node->latest.clear_events();
  node->latest.clear_command();
  node->last_report = now;
  const absl::Duration interval = absl::Milliseconds(report.report_interval_ms());
  node->stale_window = std::max(options_.stale_after, 3 * interval);
  node->stale = false;
  // Back from lost: in a round after the one it was lost in, and the
  // coordinator no longer lists it.
  if (node->lost && report.round() > node->lost_round &&
      (!job->has_view || std::find(job->view.lost_nodes().begin(), job->view.lost_nodes().end(),
                                   node_id) == job->view.lost_nodes().end())) {
    node->lost = false;
    job->dirty = true;
  }
  job->last_heard = now;
  if (job->command.empty() && !report.command().empty()) {
    job->command = report.command();
    job->dirty = true;
  }
  if (report.min_nodes() > 0 && !job->has_view) {
    job->min_nodes = report.min_nodes();
    job->max_nodes = report.max_nodes();
  }
  const bool changed = report.state() != previous_state || report.round() != previous_round;
  if (changed) {
    if (!node->late) NoteWorkerCausesLocked(job, node_id, report, now);
    job->dirty = true;
  }
  if (!node->lost) SampleLocked(job, report, now);
  if (!node->lost && !node->late) {
    GoodputOfReportLocked(job, report,
                          changed || previous_preflight_failed != PreflightFailed(report), now);
  }
  if (report.progress().known()) job->dirty = true;  // the step, saved at kJobSaveEvery.
  if (changed || report.has_coordinator()) UpdateVerdictLocked(job_id, job, now);
  if (job->save_now) SaveDueLocked(now, /*all=*/false, out);
  return absl::OkStatus();
}

// ---- Sweep and saving.

void ControllerCore::Sweep() {
  HistoryBatch batch;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [job_id, job] : jobs_) {
      if (job.pending_restart.has_value() &&
          now - job.pending_restart->noted >= kRestartCauseWait) {
        FlushPendingRestartLocked(job_id, &job, &batch);
      }
      bool changed = false;
      uint64_t done_round = 0;
      bool any_done = false;
      for (const auto& [id, node] : job.nodes) {
        if (!node.lost && !node.restored && IsDone(node.latest)) {
          any_done = true;
          done_round = std::max(done_round, node.latest.round());
        }
      }
      for (auto it = job.nodes.begin(); it != job.nodes.end();) {
        Node& node = it->second;
        const absl::Duration silent = now - node.last_report;
        const bool pending = !IsDone(node.latest) && !node.lost && !node.restored;
        if (!node.stale && silent >= node.stale_window) {
          node.stale = true;
          if (pending) {
            AddHistoryLocked(
                job_id, &job,
                Entry(v1::HistoryEntry::NODE_STALE, now, node.latest.round(), it->first,
                      absl::StrCat("no report for ", absl::FormatDuration(silent))),
                &batch);
            changed = true;
          }
        }
        // Silent in a round the job has left, or while the others finished
        // (whether it went silent before or after): not a member any more.
        if (pending && node.stale) {
          if (node.latest.round() < job.round) {
            MarkLostLocked(job_id, &job, it->first, &node, now,
                           absl::StrCat("no report since round ", node.latest.round(),
                                        "; the job went on to round ", job.round));
            changed = true;
          } else if (any_done && done_round >= node.latest.round()) {
            MarkLostLocked(job_id, &job, it->first, &node, now, "went silent before the job ended");
            changed = true;
          }
        }
        const bool finished = job.verdict != v1::JobSummary::STATE_UNSPECIFIED;
        if (!finished && node.stale && silent >= node.stale_window + options_.forget_after) {
          it = job.nodes.erase(it);
          --nodes_;
        } else {
          ++it;
        }
      }
      if (changed) UpdateVerdictLocked(job_id, &job, now);
      if (job.goodput.Waiting(TooFewNodesLocked(job, now), now)) {
        SyncRestartLocked(&job);
        job.dirty = job.save_now = true;
      }
    }
    SaveDueLocked(now, /*all=*/false, &batch);
  }
  Persist(batch);
}

void ControllerCore::Flush() {
  HistoryBatch batch;
  {
    absl::MutexLock lock(&mu_);
    SaveDueLocked(clock_->Now(), /*all=*/true, &batch);
  }
  Persist(batch);
}

void ControllerCore::SaveDueLocked(absl::Time now, bool all, HistoryBatch* out) {
  if (history_ == nullptr) {
    for (auto& [id, job] : jobs_) job.dirty = job.save_now = false;
    return;
  }
  for (auto& [id, job] : jobs_) {
    if (!job.dirty && !job.save_now) continue;
    if (!all && !job.save_now && now - job.saved < kJobSaveEvery) continue;
    // At once, but not at every report: a job whose reports each move its
    // round (a job without a view trusts its agents with it) is saved by
    // the next sweep instead.
    if (!all && job.save_now && now - job.saved < kJobSaveAtOnceEvery) continue;
    out->jobs.emplace_back(id, RecordLocked(id, job, now));
    job.dirty = job.save_now = false;
    job.saved = now;
  }
}

void ControllerCore::Persist(const HistoryBatch& batch) {
  if (history_ == nullptr || batch.empty()) return;
  absl::Status s = history_->Append(batch);
  int64_t suppressed = 0;
  if (!s.ok() && sink_log_.Allow(&suppressed)) {
    TLOG(kWarning) << "controller: history not saved: " << s.message()
                   << SuppressedNote(suppressed);
  }
}

// ---- Answers.

v1::JobSummary ControllerCore::SummaryLocked(const std::string& job_id, const Job& job,
                                             absl::Time now) const {
  v1::JobSummary s;
  s.set_job_id(job_id);
  s.set_round(job.round);
  s.set_nodes(static_cast<int>(job.nodes.size()));
  s.set_restarts(static_cast<int>(job.restarts));
  s.set_hangs(static_cast<int>(job.hangs));
  s.set_failures(static_cast<int>(job.failures));
  s.set_last_report_unix_ms(UnixMsOrZero(job.last_heard));
  s.set_started_unix_ms(UnixMsOrZero(job.started));
  s.set_ended_unix_ms(UnixMsOrZero(job.ended));
  s.set_command(job.command);
  s.set_min_nodes(job.min_nodes);
  s.set_max_nodes(job.max_nodes);
  s.set_nnodes(job.nnodes);
  s.set_world_size(job.world_size);
  s.set_restored(job.restored);
  int64_t step = -1;
  int fresh = 0, lost = 0, workers = 0, running = 0, joining = 0, preflight_failed = 0;
  int64_t join_deadline = 0;
  for (const auto& [id, node] : job.nodes) {
    if (node.lost) {
      ++lost;
      continue;
    }
    if (PreflightFailed(node.latest)) {
      // The nodes are in id order: the first ones named.
      if (preflight_failed++ < kPreflightFailedNodesNamed) s.add_preflight_failed_nodes(id);
    }
    const bool is_fresh = !node.restored && now - node.last_report < node.stale_window;
    if (is_fresh) ++fresh;
    for (const v1::WorkerHealth& w : node.latest.workers()) {
      ++workers;
      if (w.state() == v1::WorkerHealth::RUNNING) ++running;
    }
    if (node.latest.progress().known()) step = std::max(step, node.latest.progress().step());
    if (is_fresh && node.latest.state() == v1::HealthReport::JOINING) {
      ++joining;
      const int64_t d = node.latest.join_deadline_unix_ms();
      if (d > 0 && (join_deadline == 0 || d < join_deadline)) join_deadline = d;
    }
  }
  if (job.nodes.empty() || (step < 0 && job.restored)) step = job.restored_step;
  s.set_nodes_fresh(fresh);
  s.set_nodes_lost(lost);
  s.set_nodes_preflight_failed(preflight_failed);
  s.set_workers(workers);
  s.set_workers_running(running);
  s.set_progress_step(step);
  *s.mutable_goodput() = job.goodput.Answer(GoodputUntilLocked(job, now));
  for (auto it = job.rounds.rbegin(); it != job.rounds.rend(); ++it) {
    if (it->has_ended_by() && IsFailure(it->ended_by())) {
      *s.mutable_root_cause() = it->ended_by();
      break;
    }
  }
  if (job.verdict != v1::JobSummary::STATE_UNSPECIFIED) {
    s.set_state(job.verdict);
    return s;
  }
  s.set_state(fresh > 0 ? v1::JobSummary::ACTIVE : v1::JobSummary::STALE);
  // Waiting for nodes: the coordinator gathers a round, or agents join.
  auto host = job.nodes.find(job.host);
  const bool view_fresh = job.has_view && host != job.nodes.end() && !host->second.lost &&
                          now - host->second.last_report < host->second.stale_window;
  v1::WaitingState w;
  if (view_fresh && job.view.phase() == v1::CoordinatorView::GATHERING) {
    w.set_nodes(job.view.gathering());
    w.set_round(job.view.rounds() + 1);
    w.set_gives_up_unix_ms(job.view.gives_up_unix_ms() > 0 ? job.view.gives_up_unix_ms()
                                                           : join_deadline);
  } else if (!view_fresh && joining > 0) {
    w.set_nodes(joining);
    w.set_round(job.round + 1);
    w.set_gives_up_unix_ms(join_deadline);
  } else {
    return s;
  }
  w.set_min_nodes(job.min_nodes);
  w.set_max_nodes(job.max_nodes);
  if (w.gives_up_unix_ms() > 0) w.set_gives_up_unix_ms(std::max(w.gives_up_unix_ms(), UnixMs(now)));
  *s.mutable_waiting() = std::move(w);
  return s;
}

v1::ListJobsResponse ControllerCore::ListJobs() const {
  v1::ListJobsResponse out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [id, job] : jobs_) *out.add_jobs() = SummaryLocked(id, job, now);
  return out;
}

namespace {

// Members by node rank, then node id; lost nodes last.
template <typename NodePair>
bool NodeOrder(const NodePair* a, const NodePair* b) {
  if (a->second.lost != b->second.lost) return !a->second.lost;
  int ra = a->second.latest.node_rank(), rb = b->second.latest.node_rank();
  if (ra < 0) ra = kMaxRank;
  if (rb < 0) rb = kMaxRank;
  if (ra != rb) return ra < rb;
  return a->first < b->first;
}

}  // namespace

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
  nodes.reserve(job.nodes.size());
  for (const auto& n : job.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(), NodeOrder<std::pair<const std::string, Node>>);
  for (const auto* n : nodes) {
    v1::NodeStatus* ns = out.add_nodes();
    *ns->mutable_report() = n->second.latest;
    ns->mutable_report()->set_incarnation(ShownIncarnation(n->second.latest.incarnation()));
    const absl::Duration age = now - n->second.last_report;
    // A lost node is not up, whether or not it still says something.
    ns->set_stale(n->second.stale || n->second.restored || n->second.lost ||
                  age >= n->second.stale_window);
    ns->set_report_age_ms(absl::ToInt64Milliseconds(age));
    ns->set_restored(n->second.restored);
    if (n->second.lost) {
      ns->set_lost(true);
      ns->set_lost_at_unix_ms(UnixMsOrZero(n->second.lost_at));
      ns->set_lost_reason(n->second.lost_reason);
    }
  }
  for (const v1::HistoryEntry& e : job.history) *out.add_history() = e;
  const v1::RoundInfo* previous = nullptr;
  for (const v1::RoundInfo& r : job.rounds) {
    v1::RoundInfo* info = out.add_rounds();
    *info = r;
    if (std::optional<v1::RestartTimes> t =
            job.goodput.RestartOf(r.round(), GoodputUntilLocked(job, now))) {
      *info->mutable_restart() = *t;
    }
    // Who failed: the root cause of the round the restart ended.
    if (info->has_restart()) {
      const bool known =
          previous != nullptr && previous->round() + 1 == r.round() && previous->has_ended_by();
      info->mutable_restart()->set_node_id(known ? previous->ended_by().node_id() : "");
      info->mutable_restart()->set_rank(known ? previous->ended_by().rank() : -1);
    }
    previous = &r;
  }
  v1::ProgressSeries* series = out.mutable_series();
  for (const std::string& k : job.series.keys) series->add_keys(k);
  series->set_every_ms(absl::ToInt64Milliseconds(job.series.every));
  for (const SeriesPoint& p : job.series.points) {
    v1::SeriesPoint* sp = series->add_points();
    sp->set_at_unix_ms(p.at_ms);
    sp->set_step(p.step);
    sp->set_steps_per_second(p.rate);
    for (size_t k = 0; k < job.series.keys.size(); ++k) sp->add_values(p.values[k]);
  }
  return out;
}

absl::StatusOr<std::string> ControllerCore::Evidence(absl::string_view job_id, int64_t seq) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(std::string(job_id));
    if (it != jobs_.end()) {
      for (const v1::HistoryEntry& e : it->second.history) {
        if (e.seq() != seq) continue;
        if (e.evidence_bytes() == 0) {
          return absl::NotFoundError(
              absl::StrCat("entry ", seq, " of job ", SafeForLog(job_id, 64), " has no evidence"));
        }
        if (static_cast<int64_t>(e.evidence().size()) >= e.evidence_bytes()) return e.evidence();
        break;
      }
    }
  }
  if (history_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("the evidence of entry ", seq, " of job ",
                                            SafeForLog(job_id, 64),
                                            " is no longer kept (no --db to read it from)"));
  }
  return history_->Evidence(std::string(job_id), seq);
}

v1::JobRecord ControllerCore::RecordLocked(const std::string& job_id, const Job& job,
                                           absl::Time now) const {
  v1::JobRecord rec;
  *rec.mutable_summary() = SummaryLocked(job_id, job, now);
  rec.mutable_summary()->clear_waiting();
  // The ledger as it is (its open phase not counted in): what Restore takes.
  *rec.mutable_summary()->mutable_goodput() = job.goodput.state();
  rec.set_next_seq(job.next_seq);
  for (const v1::RoundInfo& r : job.rounds) *rec.add_rounds() = r;
  // Nodes that say what went wrong first, then by rank.
  std::vector<const std::pair<const std::string, Node>*> nodes;
  nodes.reserve(job.nodes.size());
  for (const auto& n : job.nodes) nodes.push_back(&n);
  auto telling = [](const Node& n) {
    if (n.lost || (IsDone(n.latest) && n.latest.exit_code() != 0)) return true;
    if (PreflightFailed(n.latest)) return true;
    return std::any_of(n.latest.workers().begin(), n.latest.workers().end(), [](const auto& w) {
      return w.state() == v1::WorkerHealth::FAILED || w.state() == v1::WorkerHealth::HUNG;
    });
  };
  std::stable_sort(nodes.begin(), nodes.end(), [&](const auto* a, const auto* b) {
    const bool ta = telling(a->second), tb = telling(b->second);
    if (ta != tb) return ta;
    return NodeOrder<std::pair<const std::string, Node>>(a, b);
  });
  if (static_cast<int>(nodes.size()) > kNodesStored) nodes.resize(kNodesStored);
  size_t bytes = rec.ByteSizeLong();
  for (const auto* n : nodes) {
    v1::NodeRecord* nr = rec.add_nodes();
    v1::HealthReport* r = nr->mutable_report();
    *r = n->second.latest;
    r->clear_gpus();
    // The coordinator's view stays with the node it came from (its lost
    // nodes, phase and rounds), without its restart reasons (the rounds
    // have them).
    if (n->first == job.host) {
      r->mutable_coordinator()->clear_restarts();
    } else {
      r->clear_coordinator();
    }
    // What a person needs after a restart: which checks failed, and why.
    if (r->has_preflight()) {
      v1::PreflightReport* p = r->mutable_preflight();
      p->clear_links();
      p->mutable_results()->Clear();
      for (const v1::CheckResult& c : n->second.latest.preflight().results()) {
        if (c.outcome() == v1::CheckResult::FAIL) *p->add_results() = c;
      }
    }
    r->clear_workers();
    for (const v1::WorkerHealth& w : n->second.latest.workers()) {
      if (r->workers_size() >= kWorkersStoredPerNode) break;
      if (w.state() == v1::WorkerHealth::FAILED || w.state() == v1::WorkerHealth::HUNG) {
        *r->add_workers() = w;
      }
    }
    nr->set_lost(n->second.lost);
    nr->set_last_report_unix_ms(UnixMsOrZero(n->second.last_report));
    // Within kMaxJobRecordBytes: the least telling nodes are left out.
    const size_t node_bytes = nr->ByteSizeLong() + 4;  // tag and length.
    if (bytes + node_bytes > kMaxJobRecordBytes) {
      rec.mutable_nodes()->RemoveLast();
      break;
    }
    bytes += node_bytes;
  }
  return rec;
}

ControllerCore::Stats ControllerCore::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.jobs = static_cast<int>(jobs_.size());
  s.nodes = nodes_;
  s.reports = reports_;
  s.reports_rejected = rejected_;
  s.history_entries = history_entries_;
  s.events_dropped = events_dropped_;
  s.evidence_bytes = evidence_bytes_;
  return s;
}

}  // namespace trainlet::controller

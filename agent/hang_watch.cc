#include "agent/hang_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/coordinator_hang.h"

namespace trainlet::agent {

HangWatch::HangWatch(HangWatchOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock) {}

void HangWatch::BeginRound(uint64_t round, int first_global_rank, int workers) {
  round_ = round;
  first_global_rank_ = first_global_rank;
  watched_.assign(static_cast<size_t>(std::max(0, workers)), Watched{});
  step_ = Step::kNone;
  hung_rank_ = -1;
  due_ = absl::InfiniteFuture();
  stacks_.clear();
  report_ = v1::HangReport{};
}

const std::string* HangWatch::OnProgress(int local_rank, const std::string& line) {
  if (local_rank < 0 || local_rank >= static_cast<int>(watched_.size())) return nullptr;
  Watched& w = watched_[local_rank];
  if (w.last == absl::InfiniteFuture() && options_.hang_timeout > absl::ZeroDuration()) {
    TLOG(kInfo) << "worker rank " << first_global_rank_ + local_rank
                << " reported progress: watching it for hangs (--hang-timeout="
                << absl::FormatDuration(options_.hang_timeout) << ")";
  }
  w.last = clock_->Now();
  if (!line.empty()) w.line = line;
  return &w.line;
}

void HangWatch::OnWorkerExited(int local_rank, Actions* out) {
  if (local_rank >= 0 && local_rank < static_cast<int>(watched_.size())) {
    watched_[local_rank].running = false;
  }
  // A worker that exits while its stacks are awaited has none to give (a
  // failure then decides, in the round).
  if (local_rank >= 0 && local_rank < static_cast<int>(stacks_.size()) &&
      !stacks_[local_rank].done) {
    stacks_[local_rank].done = true;
    MaybeFinishCollecting(/*wait_over=*/false, out);
  }
}

absl::Time HangWatch::NextDeadline() const {
  switch (step_) {
    case Step::kCollecting: {
      absl::Time next = due_;
      for (const StackWait& w : stacks_) next = std::min(next, w.check_at);
      return next;
    }
    case Step::kAwaitingVerdict:
      return due_;
    case Step::kSummarizing:
    case Step::kJudged:
      return absl::InfiniteFuture();
    case Step::kNone:
      break;
  }
  if (options_.hang_timeout <= absl::ZeroDuration()) return absl::InfiniteFuture();
  absl::Time next = absl::InfiniteFuture();
  for (const Watched& w : watched_) {
    if (w.running && w.last != absl::InfiniteFuture()) {
      next = std::min(next, w.last + options_.hang_timeout);
    }
  }
  return next;
}

HangWatch::TickResult HangWatch::Tick(absl::Time now, Actions* out) {
  TickResult result;
  if (step_ == Step::kCollecting) {
    if (now >= due_) {
      MaybeFinishCollecting(/*wait_over=*/true, out);
      return result;
    }
    for (size_t l = 0; l < stacks_.size(); ++l) {
      if (!stacks_[l].done && now >= stacks_[l].check_at) {
        stacks_[l].check_at = absl::InfiniteFuture();  // until TracebackSize answers.
        out->push_back(CheckTraceback{static_cast<int>(l)});
      }
    }
    return result;
  }
  if (step_ == Step::kAwaitingVerdict) {
    if (now >= due_) result.judged_here = JudgeLocally(out);
    return result;
  }
  if (step_ != Step::kNone || options_.hang_timeout <= absl::ZeroDuration()) return result;
  for (size_t l = 0; l < watched_.size(); ++l) {
    const Watched& w = watched_[l];
    if (!w.running || w.last == absl::InfiniteFuture() || now - w.last < options_.hang_timeout) {
      continue;
    }
    hung_rank_ = static_cast<int>(l);
    hang_ = HangEvidence{};
    hang_.round = round_;
    hang_.local_rank = hung_rank_;
    hang_.global_rank = first_global_rank_ + hung_rank_;
    hang_.declared = true;
    hang_.declared_at = now;
    hang_.silence = now - w.last;
    hang_.hang_timeout = options_.hang_timeout;
    hang_.last_progress = w.line;
    result.declared = true;
    TLOG(kError) << "worker rank " << hang_.global_rank << " (local rank " << hung_rank_
                 << ") is hung: no progress for "
                 << absl::FormatDuration(absl::Trunc(hang_.silence, absl::Milliseconds(1)))
                 << " (--hang-timeout=" << absl::FormatDuration(options_.hang_timeout)
                 << "); last progress: "
                 << (w.line.empty() ? std::string("(a touch)") : Quoted(w.line))
                 << "; taking every worker's evidence on every node before stopping anything";
    // The coordinator asks every other node for its evidence meanwhile.
    report_ = v1::HangReport{};
    report_.set_declared(true);
    report_.set_declared_local_rank(hung_rank_);
    report_.set_silence_ms(absl::ToInt64Milliseconds(hang_.silence));
    out->push_back(SendReport{HangReportRequest()});
    StartCollecting(absl::StrCat("this node declared worker rank ", hang_.global_rank, " hung"),
                    out);
    return result;
  }
  return result;
}

void HangWatch::OnCollectEvidence(const v1::CollectEvidence& c, Actions* out) {
  if (step_ != Step::kNone) return;
  const std::string why = absl::StrCat("node ", Quoted(c.declared_by_node()),
                                       " declared worker rank ", c.declared_rank(), " hung");
  TLOG(kWarning) << why << "; taking this node's evidence (every worker's stacks, threads "
                 << "and wait channels) before anything is stopped";
  StartCollecting(why, out);
}

void HangWatch::StartCollecting(absl::string_view why, Actions* out) {
  step_ = Step::kCollecting;
  why_ = std::string(why);
  due_ = clock_->Now() + options_.traceback_wait;
  stacks_.assign(watched_.size(), StackWait{});
  for (size_t l = 0; l < watched_.size(); ++l) {
    if (!watched_[l].running) continue;
    stacks_[l].done = false;
    // Answered at once (TracebackRequested).
    out->push_back(RequestTraceback{static_cast<int>(l)});
  }
  MaybeFinishCollecting(/*wait_over=*/false, out);
}

void HangWatch::OnTracebackRequested(const TracebackRequested& e, Actions* out) {
  if (step_ != Step::kCollecting || e.local_rank < 0 ||
      e.local_rank >= static_cast<int>(stacks_.size()) || stacks_[e.local_rank].done) {
    return;
  }
  StackWait& w = stacks_[e.local_rank];
  if (!e.sent) {
    w.done = true;
    MaybeFinishCollecting(/*wait_over=*/false, out);
    return;
  }
  w.before = w.bytes = e.bytes;
  w.since = clock_->Now();
  w.check_at = clock_->Now() + options_.traceback_poll;
}

void HangWatch::OnTracebackSize(const TracebackSize& e, Actions* out) {
  if (step_ != Step::kCollecting || e.local_rank < 0 ||
      e.local_rank >= static_cast<int>(stacks_.size()) || stacks_[e.local_rank].done) {
    return;
  }
  StackWait& w = stacks_[e.local_rank];
  const absl::Time now = clock_->Now();
  if (e.bytes != w.bytes) {
    w.bytes = e.bytes;
    w.since = now;
  }
  // Written since the signal, then quiet: faulthandler is done (it writes
  // every thread's stack from its signal handler, at once).
  if (w.bytes > std::max<int64_t>(0, w.before) && now - w.since >= options_.traceback_quiet) {
    w.done = true;
    MaybeFinishCollecting(/*wait_over=*/false, out);
    return;
  }
  w.check_at = now + options_.traceback_poll;
}

void HangWatch::MaybeFinishCollecting(bool wait_over, Actions* out) {
  if (step_ != Step::kCollecting) return;
  if (!wait_over) {
    for (const StackWait& w : stacks_) {
      if (!w.done) return;
    }
  }
  step_ = Step::kSummarizing;
  due_ = absl::InfiniteFuture();
  stacks_.clear();
  const absl::Time now = clock_->Now();
  CollectHangEvidence collect;
  for (size_t l = 0; l < watched_.size(); ++l) {
    const Watched& w = watched_[l];
    HangEvidence e;
    if (static_cast<int>(l) == hung_rank_) {
      e = hang_;
    } else {
      e.round = round_;
      e.local_rank = static_cast<int>(l);
      e.global_rank = first_global_rank_ + static_cast<int>(l);
      e.declared_at = now;
      e.silence = w.last == absl::InfiniteFuture() ? absl::InfiniteDuration() : now - w.last;
      e.hang_timeout = options_.hang_timeout;
      e.last_progress = w.line;
      e.why = why_;
    }
    e.exited = !w.running;
    collect.evidence.push_back(std::move(e));
  }
  out->push_back(std::move(collect));
}

void HangWatch::OnEvidenceCollected(const HangEvidenceCollected& e, Actions* out) {
  if (step_ != Step::kSummarizing) return;
  *report_.mutable_workers() = e.report.workers();
  report_.set_collected(true);
  step_ = Step::kAwaitingVerdict;
  due_ = clock_->Now() + options_.hang_verdict_wait;
  out->push_back(SendReport{HangReportRequest()});
}

std::optional<HangJudgement> HangWatch::JudgeLocally(Actions* out) {
  step_ = Step::kJudged;
  due_ = absl::InfiniteFuture();
  if (hung_rank_ < 0) {
    // Asked by the coordinator, which went quiet: the node that declared
    // the hang judges.
    TLOG(kWarning) << "no verdict on the hang within "
                   << absl::FormatDuration(options_.hang_verdict_wait)
                   << "; the node that declared it decides";
    return std::nullopt;
  }
  std::vector<rendezvous::HangCandidate> candidates;
  rendezvous::AddHangCandidates(report_, options_.me.node_id(), first_global_rank_, &candidates);
  std::optional<v1::HangVerdict> v = rendezvous::ChooseHangSuspect(candidates);
  HangJudgement judged;
  judged.suspect_local_rank = v.has_value() ? v->suspect_local_rank() : hung_rank_;
  judged.summary = v.has_value() ? v->summary()
                                 : absl::StrCat("suspect rank ", hang_.global_rank, " on ",
                                                Quoted(options_.me.node_id()), " (declared hung)");
  TLOG(kError) << "hang: " << judged.summary
               << " (judged on this node's evidence only: no verdict from "
               << "the coordinator within " << absl::FormatDuration(options_.hang_verdict_wait)
               << "); this node's evidence: the 'hang evidence:' lines of its log";
  out->push_back(HangJudged{judged.suspect_local_rank, judged.summary});
  return judged;
}

std::optional<HangJudgement> HangWatch::TakeVerdict(const v1::HangVerdict& verdict,
                                                    std::string* note, Actions* out) {
  const bool collected = step_ == Step::kAwaitingVerdict || step_ == Step::kSummarizing;
  const bool investigating = step_ != Step::kNone && step_ != Step::kJudged;
  step_ = Step::kJudged;
  due_ = absl::InfiniteFuture();
  note->clear();
  if (verdict.suspect_node_id().empty()) {
    if (investigating) {
      TLOG(kInfo) << "the hang investigation of round " << round_
                  << " ended without a verdict: the round ends for another reason";
    }
    return std::nullopt;
  }
  if (collected) *note = "; this node's evidence: the 'hang evidence:' lines of its log";
  // The suspect's node fails as its worker's failure would; the others (the
  // ranks that waited for it) are its victims.
  const int local = verdict.suspect_local_rank();
  if (verdict.suspect_node_id() != options_.me.node_id() || local < 0 ||
      local >= static_cast<int>(watched_.size())) {
    return std::nullopt;
  }
  HangJudgement judged{local, verdict.summary().substr(0, 512)};
  out->push_back(HangJudged{judged.suspect_local_rank, judged.summary});
  return judged;
}

const v1::HangReport* HangWatch::awaited_report() const {
  return step_ == Step::kAwaitingVerdict ? &report_ : nullptr;
}

v1::ReportRequest HangWatch::HangReportRequest() const {
  v1::ReportRequest r = NewReport(options_.me, options_.job_id, round_, v1::ReportRequest::RUNNING);
  *r.mutable_hang() = report_;
  return r;
}

}  // namespace trainlet::agent

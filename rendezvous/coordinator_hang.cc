#include "rendezvous/coordinator_hang.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

bool IsPrintable(absl::string_view s) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

std::string Age(int64_t ms) {
  return absl::FormatDuration(absl::Trunc(absl::Milliseconds(ms), absl::Milliseconds(100)));
}

// The candidates of `among` that the next rule keeps, and whether it told
// them apart (kept fewer).
using Pick = std::vector<const HangCandidate*>;

Pick OldestProgress(const Pick& among) {
  int64_t oldest = -1;
  for (const HangCandidate* c : among) oldest = std::max(oldest, c->progress_age_ms);
  if (oldest < 0) return among;  // none reported
  const int64_t tolerance = absl::ToInt64Milliseconds(kProgressAgeTolerance);
  Pick kept;
  for (const HangCandidate* c : among) {
    if (c->progress_age_ms >= 0 && c->progress_age_ms >= oldest - tolerance) kept.push_back(c);
  }
  return kept;
}

Pick LowestStep(const Pick& among) {
  int64_t lowest = -1;
  for (const HangCandidate* c : among) {
    if (c->step >= 0 && (lowest < 0 || c->step < lowest)) lowest = c->step;
  }
  if (lowest < 0) return among;  // no steps
  Pick kept;
  for (const HangCandidate* c : among) {
    if (c->step == lowest) kept.push_back(c);
  }
  return kept;
}

const HangCandidate* LowestRank(const Pick& among) {
  return *std::min_element(
      among.begin(), among.end(), [](const HangCandidate* a, const HangCandidate* b) {
        return a->rank != b->rank ? a->rank < b->rank : a->node_id < b->node_id;
      });
}

}  // namespace

absl::Status ValidateHangReport(const v1::HangReport& r, int local_world_size) {
  if (r.declared() &&
      (r.declared_local_rank() < 0 || r.declared_local_rank() >= local_world_size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hang.declared_local_rank: expected 0..%d (the node has %d workers), got %d",
        local_world_size - 1, local_world_size, r.declared_local_rank()));
  }
  if (r.silence_ms() < 0 || r.silence_ms() > kMaxHangMillis) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hang.silence_ms: expected 0..%d, got %d", kMaxHangMillis, r.silence_ms()));
  }
  if (r.workers_size() > local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hang.workers: at most %d entries (the node's workers), got %d",
                        local_world_size, r.workers_size()));
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(0, local_world_size)), false);
  for (const v1::WorkerEvidence& w : r.workers()) {
    if (w.local_rank() < 0 || w.local_rank() >= local_world_size || seen[w.local_rank()]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hang.workers.local_rank: expected each of 0..%d at most once, got %d",
                          local_world_size - 1, w.local_rank()));
    }
    seen[w.local_rank()] = true;
    if (!v1::WorkerEvidence::Stack_IsValid(w.stack())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hang.workers.stack: expected UNKNOWN, IN_COLLECTIVE or NOT_IN_COLLECTIVE, got %d",
          static_cast<int>(w.stack())));
    }
    if (w.where().size() > kMaxHangWhereLength || !IsPrintable(w.where())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hang.workers.where: at most %d bytes of printable ASCII", kMaxHangWhereLength));
    }
    if (w.step() < -1 || w.step() > kMaxHangStep) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hang.workers.step: expected -1..%d, got %d", kMaxHangStep, w.step()));
    }
    if (w.progress_age_ms() < -1 || w.progress_age_ms() > kMaxHangMillis) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hang.workers.progress_age_ms: expected -1..%d, got %d", kMaxHangMillis,
                          w.progress_age_ms()));
    }
  }
  return absl::OkStatus();
}

void AddHangCandidates(const v1::HangReport& report, const std::string& node_id,
                       int first_global_rank, std::vector<HangCandidate>* out) {
  for (const v1::WorkerEvidence& w : report.workers()) {
    if (w.exited()) continue;
    HangCandidate c;
    c.node_id = node_id;
    c.rank = first_global_rank + w.local_rank();
    c.local_rank = w.local_rank();
    c.stack = w.stack();
    c.where = w.where();
    c.step = w.step();
    c.progress_age_ms = w.progress_age_ms();
    out->push_back(std::move(c));
  }
}

std::optional<v1::HangVerdict> ChooseHangSuspect(absl::Span<const HangCandidate> candidates) {
  if (candidates.empty()) return std::nullopt;
  Pick all;
  Pick elsewhere;  // stacks not in a collective
  for (const HangCandidate& c : candidates) {
    all.push_back(&c);
    if (c.stack == v1::WorkerEvidence::NOT_IN_COLLECTIVE) elsewhere.push_back(&c);
  }
  const HangCandidate* suspect = nullptr;
  std::string why;
  if (!elsewhere.empty()) {
    suspect = LowestRank(LowestStep(OldestProgress(elsewhere)));
    why =
        absl::StrCat("not in a collective",
                     elsewhere.size() > 1 ? absl::StrCat(" (", elsewhere.size(), " ranks are not)")
                                          : std::string(),
                     suspect->where.empty() ? "" : ": ", suspect->where);
  } else if (all.size() == 1) {
    // Nothing to tell it apart from (one worker, or the only evidence that
    // came): what is known of its stack.
    suspect = all.front();
    why = absl::StrCat(
        "the only rank with evidence; ",
        suspect->stack == v1::WorkerEvidence::IN_COLLECTIVE
            ? absl::StrCat("in a collective", suspect->where.empty() ? "" : ": ", suspect->where)
            : std::string("no Python stack"));
  } else {
    // "No stack outside a collective" would read as if every stack were in
    // one where no worker had a stack at all (none opted in).
    const bool any_stack = std::any_of(all.begin(), all.end(), [](const HangCandidate* c) {
      return c->stack != v1::WorkerEvidence::STACK_UNKNOWN;
    });
    const char* stacks = any_stack ? "no stack outside a collective" : "no Python stack";
    const Pick oldest = OldestProgress(all);
    const Pick lowest = LowestStep(oldest);
    suspect = LowestRank(lowest);
    if (oldest.size() < all.size()) {
      why = absl::StrCat(stacks, "; the oldest progress: ", Age(suspect->progress_age_ms), " ago",
                         suspect->step >= 0 ? absl::StrCat(" at step ", suspect->step) : "");
    } else if (lowest.size() < oldest.size()) {
      why = absl::StrCat(stacks, "; the lowest step: ", suspect->step);
    } else {
      why = absl::StrCat(stacks, "; nothing else told the ranks apart: the lowest rank");
    }
  }
  v1::HangVerdict v;
  v.set_suspect_node_id(suspect->node_id);
  v.set_suspect_rank(suspect->rank);
  v.set_suspect_local_rank(suspect->local_rank);
  std::string summary = absl::StrCat("suspect rank ", suspect->rank, " on ",
                                     SafeForLog(suspect->node_id, 253), " (", why, ")");
  if (summary.size() > kMaxHangSummaryLength) {
    summary.resize(kMaxHangSummaryLength - 4);
    summary += "...)";
  }
  v.set_summary(std::move(summary));
  return v;
}

}  // namespace trainlet::rendezvous

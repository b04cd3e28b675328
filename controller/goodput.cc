#include "controller/goodput.h"

#include <algorithm>

namespace trainlet::controller {
namespace {

using Phase = v1::Goodput::Phase;

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }

void ResetSteps(uint64_t round, v1::Goodput* g) {
  g->set_step_round(round);
  g->set_round_max_step(-1);
  g->set_last_step_unix_ms(0);
  g->set_first_step(-1);
  g->set_first_step_unix_ms(0);
}

void UpdateRedone(v1::RestartTimes* r) {
  if (r->failed_at_step() >= 0 && r->resumed_from_step() >= 0) {
    r->set_redone_steps(std::max<int64_t>(0, r->failed_at_step() - r->resumed_from_step()));
  }
}

}  // namespace

GoodputLedger::GoodputLedger() { ResetSteps(0, &state_); }

void GoodputLedger::Start(absl::Time now, bool waiting) {
  state_.Clear();
  ResetSteps(0, &state_);
  state_.set_started_unix_ms(std::max<int64_t>(1, Ms(now)));
  state_.set_phase(waiting ? v1::Goodput::WAITING : v1::Goodput::STARTUP);
  state_.set_phase_since_unix_ms(state_.started_unix_ms());
  state_.set_resume_phase(v1::Goodput::STARTUP);
}

void GoodputLedger::Restore(const v1::Goodput& stored) {
  if (stored.started_unix_ms() <= 0 || stored.phase_since_unix_ms() < stored.started_unix_ms()) {
    return;  // none kept (an older controller's record): the job starts it afresh.
  }
  state_ = stored;
  // Answers' figures are derived; the kept ones are the closed phases'.
  state_.clear_wall_ms();
  state_.clear_ettr();
}

bool GoodputLedger::InRestart() const {
  return state_.restart_round() > 0 && !state_.restart().done();
}

void GoodputLedger::Add(Phase phase, int64_t ms, v1::Goodput* totals, v1::RestartTimes* restart) {
  switch (phase) {
    case v1::Goodput::WAITING:
      totals->set_waiting_ms(totals->waiting_ms() + ms);
      if (restart != nullptr) restart->set_waiting_ms(restart->waiting_ms() + ms);
      break;
    case v1::Goodput::STARTUP:
      totals->set_startup_ms(totals->startup_ms() + ms);
      break;
    case v1::Goodput::PRODUCTIVE:
      totals->set_productive_ms(totals->productive_ms() + ms);
      break;
    case v1::Goodput::DETECTION:
      totals->set_detection_ms(totals->detection_ms() + ms);
      if (restart != nullptr) restart->set_detection_ms(restart->detection_ms() + ms);
      break;
    case v1::Goodput::RESTART:
      totals->set_restart_ms(totals->restart_ms() + ms);
      if (restart != nullptr) restart->set_restart_ms(restart->restart_ms() + ms);
      break;
    case v1::Goodput::REWARM:
      totals->set_rewarm_ms(totals->rewarm_ms() + ms);
      if (restart != nullptr) restart->set_rewarm_ms(restart->rewarm_ms() + ms);
      break;
    case v1::Goodput::REDONE:
      totals->set_redone_ms(totals->redone_ms() + ms);
      if (restart != nullptr) restart->set_redone_ms(restart->redone_ms() + ms);
      break;
    default:
      break;
  }
}

void GoodputLedger::Move(Phase to, absl::Time at, absl::Time now) {
  const int64_t since = state_.phase_since_unix_ms();
  const int64_t at_ms = std::clamp(Ms(at), since, std::max(since, Ms(now)));
  if (state_.phase() != v1::Goodput::ENDED) {
    Add(state_.phase(), at_ms - since, &state_, InRestart() ? state_.mutable_restart() : nullptr);
  }
  state_.set_phase(to);
  state_.set_phase_since_unix_ms(at_ms);
}

bool GoodputLedger::FirstRound(absl::Time now) {
  if (!started()) return false;
  state_.set_resume_phase(v1::Goodput::STARTUP);
  if (state_.phase() != v1::Goodput::WAITING) return false;
  Move(v1::Goodput::STARTUP, now, now);
  return true;
}

std::optional<v1::RestartTimes> GoodputLedger::Restart(uint64_t round, absl::Time failed,
                                                       absl::Time decided, absl::Time now) {
  if (!started() || state_.phase() == v1::Goodput::ENDED || round <= state_.restart_round()) {
    return std::nullopt;
  }
  // The open phase ends at the failure (counted to a restart still under
  // way: a failure while re-warming or redoing is that restart's cost).
  const Phase closed = state_.phase();
  const int64_t closed_since = state_.phase_since_unix_ms();
  Move(v1::Goodput::DETECTION, failed, now);
  state_.set_failed_phase(closed);
  state_.set_failed_phase_since_unix_ms(closed_since);
  std::optional<v1::RestartTimes> previous;
  if (InRestart()) {
    state_.mutable_restart()->set_done(true);
    previous = state_.restart();
  }
  v1::RestartTimes r;
  r.set_failed_unix_ms(state_.phase_since_unix_ms());
  r.set_failed_at_step(state_.step_round() + 1 == round ? state_.round_max_step() : -1);
  r.set_resumed_from_step(-1);
  r.set_redone_steps(-1);
  r.set_rank(-1);
  state_.set_restart_round(round);
  *state_.mutable_restart() = std::move(r);
  ResetSteps(round, &state_);
  state_.set_resume_phase(v1::Goodput::RESTART);
  Move(v1::Goodput::RESTART, decided, now);
  return previous;
}

bool GoodputLedger::RefineFailure(absl::Time failed) {
  if (!InRestart() || state_.phase() == v1::Goodput::ENDED) return false;
  const Phase closed = state_.failed_phase();
  if (closed != v1::Goodput::PRODUCTIVE && closed != v1::Goodput::STARTUP) return false;
  v1::RestartTimes* r = state_.mutable_restart();
  const int64_t at = std::max(Ms(failed), state_.failed_phase_since_unix_ms());
  const int64_t back = r->failed_unix_ms() - at;
  if (back <= 0) return false;
  // `back` ms of the closed phase were the failure's detection.
  if (closed == v1::Goodput::PRODUCTIVE) {
    state_.set_productive_ms(state_.productive_ms() - back);
  } else {
    state_.set_startup_ms(state_.startup_ms() - back);
  }
  state_.set_detection_ms(state_.detection_ms() + back);
  r->set_detection_ms(r->detection_ms() + back);
  r->set_failed_unix_ms(at);
  return true;
}

bool GoodputLedger::WorkersRunning(absl::Time now) {
  if (state_.phase() != v1::Goodput::RESTART) return false;
  Move(v1::Goodput::REWARM, now, now);
  return true;
}

bool GoodputLedger::Waiting(bool waiting, absl::Time now) {
  const Phase phase = state_.phase();
  if (waiting) {
    // Waiting replaces only phases in which nothing runs yet.
    const bool idle =
        (phase == v1::Goodput::STARTUP && state_.first_step() < 0) || phase == v1::Goodput::RESTART;
    if (!idle) return false;
    state_.set_resume_phase(phase);
    Move(v1::Goodput::WAITING, now, now);
    return true;
  }
  if (phase != v1::Goodput::WAITING || !started()) return false;
  const Phase back =
      state_.resume_phase() == v1::Goodput::RESTART ? v1::Goodput::RESTART : v1::Goodput::STARTUP;
  Move(back, now, now);
  return true;
}

bool GoodputLedger::Progress(uint64_t round, int64_t step, absl::Time at,
                             std::optional<int64_t> first_step, absl::Time first_at,
                             absl::Time now) {
  if (!started() || state_.phase() == v1::Goodput::ENDED || step < 0) return false;
  at = std::min(at, now);
  if (round + 1 == state_.restart_round() && round + 1 == state_.step_round()) {
    // A late report of the failed round: the failure had gone further.
    v1::RestartTimes* r = state_.mutable_restart();
    if (!r->done() && step > r->failed_at_step()) {
      r->set_failed_at_step(step);
      UpdateRedone(r);
    }
    return false;
  }
  if (round < state_.step_round()) return false;
  if (round > state_.step_round()) ResetSteps(round, &state_);
  if (step > state_.round_max_step()) {
    state_.set_round_max_step(step);
    state_.set_last_step_unix_ms(Ms(at));
  }
  if (state_.first_step() < 0) {
    // The agent's first line of the round when it sends one, else this one.
    const bool first_known = first_step.has_value() && *first_step >= 0 && *first_step <= step;
    state_.set_first_step(first_known ? *first_step : step);
    state_.set_first_step_unix_ms(Ms(std::min(first_known ? first_at : at, at)));
  }
  const absl::Time first = absl::FromUnixMillis(state_.first_step_unix_ms());
  bool moved = false;
  const Phase phase = state_.phase();
  if (phase == v1::Goodput::STARTUP || phase == v1::Goodput::WAITING ||
      phase == v1::Goodput::RESTART || phase == v1::Goodput::REWARM) {
    moved = true;
    if (!InRestart()) {
      Move(v1::Goodput::PRODUCTIVE, first, now);
      return true;
    }
    v1::RestartTimes* r = state_.mutable_restart();
    r->set_resumed_from_step(std::max<int64_t>(0, state_.first_step() - 1));
    UpdateRedone(r);
    if (r->failed_at_step() < 0 || state_.first_step() >= r->failed_at_step()) {
      Move(v1::Goodput::PRODUCTIVE, first, now);
      r->set_done(true);
      return true;
    }
    Move(v1::Goodput::REDONE, first, now);
  }
  if (state_.phase() == v1::Goodput::REDONE && InRestart()) {
    v1::RestartTimes* r = state_.mutable_restart();
    if (step < r->failed_at_step()) return moved;
    // Where the workers passed the failure's step, at the rate they step
    // at since their first step (progress lines come at report times).
    const int64_t s1 = state_.first_step();
    absl::Time cross = at;
    if (step > s1 && at > first) {
      const double part = std::clamp(
          static_cast<double>(r->failed_at_step() - s1) / static_cast<double>(step - s1), 0.0, 1.0);
      cross = first + (at - first) * part;
    }
    Move(v1::Goodput::PRODUCTIVE, cross, now);
    r->set_done(true);
    return true;
  }
  return moved;
}

bool GoodputLedger::End(absl::Time ended, std::optional<absl::Time> failed) {
  if (!started() || state_.phase() == v1::Goodput::ENDED) return false;
  if (failed.has_value()) {
    Move(v1::Goodput::DETECTION, *failed, ended);
    // The restart under way ends at the final failure: that failure's
    // detection is the job's, not the restart's cost.
    if (InRestart()) state_.mutable_restart()->set_done(true);
  }
  Move(v1::Goodput::ENDED, ended, ended);
  if (InRestart()) state_.mutable_restart()->set_done(true);
  return true;
}

v1::Goodput GoodputLedger::Answer(absl::Time now) const {
  v1::Goodput g = state_;
  if (!started()) return g;
  if (g.phase() != v1::Goodput::ENDED) {
    Add(g.phase(), std::max<int64_t>(0, Ms(now) - g.phase_since_unix_ms()), &g,
        InRestart() ? g.mutable_restart() : nullptr);
  }
  const int64_t wall = g.productive_ms() + g.startup_ms() + g.waiting_ms() + g.detection_ms() +
                       g.restart_ms() + g.rewarm_ms() + g.redone_ms();
  g.set_wall_ms(wall);
  g.set_ettr(wall > 0 ? static_cast<double>(g.productive_ms()) / static_cast<double>(wall) : 0);
  return g;
}

std::optional<v1::RestartTimes> GoodputLedger::RestartOf(uint64_t round, absl::Time now) const {
  if (round == 0 || round != state_.restart_round()) return std::nullopt;
  v1::RestartTimes r = state_.restart();
  if (InRestart() && state_.phase() != v1::Goodput::ENDED) {
    v1::Goodput scratch;
    Add(state_.phase(), std::max<int64_t>(0, Ms(now) - state_.phase_since_unix_ms()), &scratch, &r);
  }
  return r;
}

std::optional<absl::Time> GoodputLedger::LastStep() const {
  if (state_.round_max_step() < 0 || state_.last_step_unix_ms() <= 0) return std::nullopt;
  return absl::FromUnixMillis(state_.last_step_unix_ms());
}

}  // namespace trainlet::controller

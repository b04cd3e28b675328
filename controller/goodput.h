// A job's goodput: its wall time cut into phases that partition it, and
// what each restart cost (docs/goodput.md defines every phase). The
// controller's core feeds it what the reports say, on its own clock; it
// keeps one open phase and the closed phases' totals, so that the phases
// add up to the wall time exactly, by construction: every boundary is
// clamped between the start of the open phase and now, and a phase closes
// only where the next one opens.
//
//  first report ─> STARTUP ─first step─> PRODUCTIVE ─failure─> DETECTION
//     │  ^  (WAITING instead while      ^      ^                  │ restart decided
//     │  │   too few nodes, from         │      │                  v
//     v  │   STARTUP/RESTART)            │      │   PRODUCTIVE  RESTART
//   WAITING                              │      │       ^          │ workers running
//                                        │      └─ REDONE ─┘       v
//                                        │   (the step the failure REWARM
//                                        │    had reached)           │ first step
//                                        └─(nothing to redo)── ──────┘
//   any phase ─the verdict─> ENDED (a failed job: DETECTION from the
//   failure to the verdict)
//
// The restart under way (Goodput.restart, of Goodput.restart_round) gets
// the durations of its phases from the same segments: one piece of code
// computes both, so a restart's record and the job's ETTR agree.
//
// Threading: none; the core calls it under its mutex.
#ifndef TRAINLET_CONTROLLER_GOODPUT_H_
#define TRAINLET_CONTROLLER_GOODPUT_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "trainlet/v1/controller.pb.h"

namespace trainlet::controller {

class GoodputLedger {
 public:
  GoodputLedger();

  // Begins the timeline at `now` (the job's first report): WAITING when the
  // job waits for nodes, else STARTUP. Everything before it is forgotten.
  void Start(absl::Time now, bool waiting);
  // Puts back what a previous controller kept (JobRecord): its open phase
  // goes on through the time the controller was away.
  void Restore(const v1::Goodput& stored);
  bool started() const { return state_.started_unix_ms() > 0; }

  // The job entered its first round.
  bool FirstRound(absl::Time now);
  // The job restarted into `round`: the failure at `failed`, the decision
  // at `decided` (each clamped into the open phase, up to `now`). The
  // highest step of the round that ended is the failure's step. Returns the
  // restart that was still under way (a failure during a re-warm or redo),
  // now final, for its round's record.
  std::optional<v1::RestartTimes> Restart(uint64_t round, absl::Time failed, absl::Time decided,
                                          absl::Time now);
  // The failure of the restart under way happened at `failed`, earlier
  // than the ledger took it (the failing node's report came after the
  // restart): the boundary moves back, within the phase it closed when
  // that was productive or start-up (the phases still partition the time).
  bool RefineFailure(absl::Time failed);
  // The job's current round has its workers running (an agent says so).
  bool WorkersRunning(absl::Time now);
  // Whether the job now waits for too few nodes.
  bool Waiting(bool waiting, absl::Time now);
  // A progress line of `round` (the job's current round, or the one before
  // it: a late report of the failed round raises the failure's step):
  // `step` written at `at`; the round's first line `first_step` at
  // `first_at`, when known.
  bool Progress(uint64_t round, int64_t step, absl::Time at, std::optional<int64_t> first_step,
                absl::Time first_at, absl::Time now);
  // The job ended at `ended`; a failed one at `failed` (DETECTION from then).
  bool End(absl::Time ended, std::optional<absl::Time> failed);

  // The state to keep (JobRecord): the open phase not counted in.
  const v1::Goodput& state() const { return state_; }
  // The answer at `now`: the open phase counted in, wall time and ETTR.
  v1::Goodput Answer(absl::Time now) const;
  // The restart of `round` with its open phase counted in; null when
  // `round` is not the restart under way.
  std::optional<v1::RestartTimes> RestartOf(uint64_t round, absl::Time now) const;
  // When the current round last made progress; nullopt unknown.
  std::optional<absl::Time> LastStep() const;
  v1::Goodput::Phase phase() const { return state_.phase(); }

 private:
  // Closes the open phase at `at` (clamped into it, up to `now`) and opens
  // `to` there.
  void Move(v1::Goodput::Phase to, absl::Time at, absl::Time now);
  // Adds `ms` of `phase` to `totals` (and to `restart` where the phase is
  // a restart's).
  static void Add(v1::Goodput::Phase phase, int64_t ms, v1::Goodput* totals,
                  v1::RestartTimes* restart);
  bool InRestart() const;

  v1::Goodput state_;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_GOODPUT_H_

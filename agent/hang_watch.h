// HangWatch: hang detection on one node (--hang-timeout), one of the three
// machines of the round (round.h composes it). While the round runs, a
// local worker that reported progress and then stays silent for the hang
// timeout is declared hung. The one declared hung is often a victim,
// waiting in a collective for the real culprit, so nothing is stopped until
// the job has judged: the watch tells the coordinator (a Report whose
// HangReport declares it), takes every local worker's evidence (Python
// stacks first: RequestTraceback, then CheckTraceback until each traceback
// file grew and then stayed quiet for traceback_quiet, at most
// traceback_wait; then CollectHangEvidence) and reports it. The job's
// verdict names the suspect (its node fails with 80); without one within
// hang_verdict_wait, the node that declared the hang judges its own
// workers. Pure: events in, actions out (round_io.h), time from an injected
// Clock. Design: docs/progress.md ("Who hung").
//
//   WATCHING --silence >= hang_timeout: Report(declared)-----------+
//      |  ^  --CollectEvidence directive (the coordinator asks)--+ |
//      |  |                                                      v v
//      |  +-- progress resets the timer   COLLECTING: RequestTraceback each
//      |                                  running worker; CheckTraceback
//      |                                  until settled, or traceback_wait
//      |                                             | CollectHangEvidence
//      |                                             v
//      |                                  SUMMARIZING --HangEvidenceCollected:
//      |                                             | Report(collected)
//      |                                             v
//      |                                  AWAITING VERDICT (heartbeats repeat
//      |                                  the report)
//      |   verdict (TakeVerdict), any step:          | nothing within
//      |   the suspect's node: HangJudged, fails 80  | hang_verdict_wait:
//      +------------------------------> JUDGED <-----+ declared here? judged
//                                                      here (HangJudged, 80)
//
// Threading: not thread-safe; the round drives it from one thread.
#ifndef TRAINLET_AGENT_HANG_WATCH_H_
#define TRAINLET_AGENT_HANG_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/round_io.h"
#include "common/clock.h"
#include "progress/hang_evidence.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

struct HangWatchOptions {
  v1::Member me;
  std::string job_id;
  // RoundOptions' hang_timeout (zero: off), traceback_wait, traceback_quiet,
  // traceback_poll and hang_verdict_wait (round.h).
  absl::Duration hang_timeout = absl::ZeroDuration();
  absl::Duration traceback_wait = absl::Seconds(2);
  absl::Duration traceback_quiet = absl::Milliseconds(100);
  absl::Duration traceback_poll = absl::Milliseconds(20);
  absl::Duration hang_verdict_wait = absl::Seconds(10);
};

// Who this node finds hung: local rank `suspect_local_rank` (of this node;
// -1: another node's) as `summary` names it.
struct HangJudgement {
  int suspect_local_rank = -1;
  std::string summary;
};

class HangWatch {
 public:
  using Actions = std::vector<RoundAction>;

  HangWatch(HangWatchOptions options, Clock* clock);

  // A new round of `workers` local workers, the first of global rank
  // `first_global_rank`: nothing of the previous round counts.
  void BeginRound(uint64_t round, int first_global_rank, int workers);

  // A local worker reported progress (`line`: empty for a touch). Returns
  // its latest progress line, or null when `local_rank` is not this round's.
  const std::string* OnProgress(int local_rank, const std::string& line);
  // A local worker exited: not watched, and no stacks to wait for.
  void OnWorkerExited(int local_rank, Actions* out);
  // The executor's answers while collecting.
  void OnTracebackRequested(const TracebackRequested& e, Actions* out);
  void OnTracebackSize(const TracebackSize& e, Actions* out);
  void OnEvidenceCollected(const HangEvidenceCollected& e, Actions* out);
  // The coordinator asks for this node's evidence (another node declared a
  // hang): taken once a round, unless already under way.
  void OnCollectEvidence(const v1::CollectEvidence& c, Actions* out);

  // Time passed while the round runs: declares a silent worker hung,
  // checks stacks, ends a wait.
  struct TickResult {
    bool declared = false;  // a worker of this node was declared hung now.
    // No verdict in time, and this node declared the hang: it judged its
    // own workers; the round fails with kExitWorkerHung for this suspect.
    std::optional<HangJudgement> judged_here;
  };
  TickResult Tick(absl::Time now, Actions* out);
  // When Tick has something to do; InfiniteFuture when nothing.
  absl::Time NextDeadline() const;

  // A Rejoin's or JobFailed's HangVerdict (may be empty) ends the
  // investigation. When it names one of this node's workers, HangJudged
  // and the judgement (the round fails with kExitWorkerHung). `note`: what
  // the directive's log line adds (where this node's evidence is).
  std::optional<HangJudgement> TakeVerdict(const v1::HangVerdict& verdict, std::string* note,
                                           Actions* out);

  // The report the heartbeats repeat while the verdict is awaited; null
  // otherwise.
  const v1::HangReport* awaited_report() const;

 private:
  enum class Step { kNone, kCollecting, kSummarizing, kAwaitingVerdict, kJudged };

  // Takes the evidence of every running local worker (declared here, or
  // asked by the coordinator: `why`).
  void StartCollecting(absl::string_view why, Actions* out);
  // Every stack settled (or the wait is over): CollectHangEvidence.
  void MaybeFinishCollecting(bool wait_over, Actions* out);
  // No verdict in time: judges this node's workers when it declared the
  // hang.
  std::optional<HangJudgement> JudgeLocally(Actions* out);
  v1::ReportRequest HangReportRequest() const;

  const HangWatchOptions options_;
  Clock* const clock_;

  uint64_t round_ = 0;
  int first_global_rank_ = 0;
  // Progress of this round's local workers, by local rank.
  struct Watched {
    absl::Time last = absl::InfiniteFuture();  // never reported
    bool running = true;
    std::string line;
  };
  std::vector<Watched> watched_;
  Step step_ = Step::kNone;
  // The local worker this node declared hung (-1: none, or asked by the
  // coordinator), and what the watch knows of it.
  int hung_rank_ = -1;
  HangEvidence hang_;
  std::string why_;  // why the evidence is taken
  // Collecting: the end of the stacks' wait; awaiting: of the verdict's.
  absl::Time due_ = absl::InfiniteFuture();
  // Each local worker's traceback file while its stacks are awaited: its
  // size before the signal, its latest size and since when, and when to ask
  // for it next (InfiniteFuture: a CheckTraceback pending, or done).
  struct StackWait {
    bool done = true;
    int64_t before = -1;
    int64_t bytes = -1;
    absl::Time since = absl::InfinitePast();
    absl::Time check_at = absl::InfiniteFuture();
  };
  std::vector<StackWait> stacks_;
  // What this node reports of the hang (declared; then collected), repeated
  // by the heartbeats while the verdict is awaited.
  v1::HangReport report_;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_HANG_WATCH_H_

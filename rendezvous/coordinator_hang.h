// Who hung (docs/progress.md, "Who hung"): the job-wide judgement of a hang
// from every node's evidence. When one worker is declared hung, the others
// are usually its victims, waiting for it in a collective; the culprit is
// the rank that is somewhere else. From the nodes' summaries
// (v1::HangReport) the suspect is
//   1. a rank whose Python stack is not in a collective;
//   2. else the rank whose last progress is the oldest (ages within
//      kProgressAgeTolerance count as equal: they were measured on
//      different nodes, at slightly different moments);
//   3. else the rank with the lowest step;
//   4. else the lowest rank (nothing told them apart; the summary says so).
// Within a rule, the next rules break ties. Ranks that had exited are never
// suspects.
//
// The coordinator (coordinator.h) judges with the evidence of every node;
// an agent whose coordinator gave no verdict judges its own workers the same
// way (agent/round.h). Pure functions; thread-safe.
#ifndef TRAINLET_RENDEZVOUS_COORDINATOR_HANG_H_
#define TRAINLET_RENDEZVOUS_COORDINATOR_HANG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::rendezvous {

namespace v1 = ::trainlet::v1;

// How long the coordinator waits for every member's evidence after a hang
// was declared: an agent waits at most 2 s for its workers' stacks
// (RoundOptions::traceback_wait), and its Report then takes a round trip.
inline constexpr absl::Duration kHangEvidenceWait = absl::Seconds(5);
// Progress ages closer than this are equal (rule 2 above).
inline constexpr absl::Duration kProgressAgeTolerance = absl::Seconds(1);
// WorkerEvidence.where, at most (printable ASCII).
inline constexpr size_t kMaxHangWhereLength = 200;
// HangVerdict.summary, at most.
inline constexpr size_t kMaxHangSummaryLength = 512;
// HangReport.silence_ms, WorkerEvidence.progress_age_ms and .step, at most.
inline constexpr int64_t kMaxHangMillis = int64_t{1} << 40;
inline constexpr int64_t kMaxHangStep = int64_t{1} << 62;

// One worker that may be the suspect.
struct HangCandidate {
  std::string node_id;
  int rank = -1;  // global
  int local_rank = -1;
  v1::WorkerEvidence::Stack stack = v1::WorkerEvidence::STACK_UNKNOWN;
  std::string where;
  int64_t step = -1;             // -1: none
  int64_t progress_age_ms = -1;  // -1: it never reported
};

// OK when `report` is within the bounds of rendezvous.proto's HangReport for
// a node of `local_world_size` workers; INVALID_ARGUMENT naming the field
// otherwise.
absl::Status ValidateHangReport(const v1::HangReport& report, int local_world_size);

// Appends the workers of `report` (a node's collected evidence) that had not
// exited, as candidates of node `node_id` whose local rank 0 is global rank
// `first_global_rank`.
void AddHangCandidates(const v1::HangReport& report, const std::string& node_id,
                       int first_global_rank, std::vector<HangCandidate>* out);

// The suspect by the rules above, with its summary ("suspect rank 2 on
// node-b (not in a collective: in train.py:41 in main)", at most
// kMaxHangSummaryLength bytes, escaped); nullopt without candidates.
std::optional<v1::HangVerdict> ChooseHangSuspect(absl::Span<const HangCandidate> candidates);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_COORDINATOR_HANG_H_

// Progress read from the workers' output (--progress-from-output,
// docs/progress.md "Progress from output"): the step, and the total steps,
// loss and learning rate where printed, recognised in the log lines of the
// common trainers, so that hang detection and the reports work for a script
// that never writes TRAINLET_PROGRESS_FILE. Each format is a hand-written
// matcher, O(line) with no backtracking; a user's REGEX is RE2 (linear time,
// memory-capped), validated at start-up.
//
// OutputProgress parses a copy of what the Supervisor already read from a
// worker's pipe, after it was handed to the writer: the worker's output is
// neither delayed nor changed. Bounded: a line (ended by '\n' or '\r', as a
// tqdm bar redraws itself) over kMaxLineBytes is dropped, and so is every
// match beyond kMaxMatchesPerSecond in a second on the node but each
// worker's first of that second; both are counted. The latest of a
// worker's dropped matches is taken in the next second (Collect), so that a
// burst followed by silence does not leave its step behind.
//
// Threading: not thread-safe; the agent's loop thread feeds it (through the
// Supervisor's reads, which run in WorkerGroup::Wait) and collects it.
#ifndef TRAINLET_PROGRESS_OUTPUT_PROGRESS_H_
#define TRAINLET_PROGRESS_OUTPUT_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "progress/progress.h"

namespace re2 {
class RE2;
}

namespace trainlet::agent {

// The formats, by their --progress-from-output name (docs/progress.md has
// each one's source file and version).
enum class OutputFormat {
  kOff,
  kAuto,         // the first format that matches a worker's line, per worker.
  kHuggingFace,  // "hf": Trainer's tqdm bar and its logged dicts.
  kLightning,    // "lightning": TQDMProgressBar's "Epoch N: ..." bar.
  kTorchtitan,   // "torchtitan": "step: N  loss: X ..." log lines.
  kMegatron,     // "megatron": Megatron-LM's " iteration N/T |" lines, NeMo's ProgressPrinter.
  kDeepSpeed,    // "deepspeed": the engine's "step=N, skipped=..." and the timer's lines.
  kDemo,         // "demo": scripts/demo/train_ddp.py's "step N loss X".
  kRegex,        // a user's regex with named groups step, total, loss, lr.
};

// The --progress-from-output values that name a format, in auto's order.
inline constexpr OutputFormat kBuiltInOutputFormats[] = {
    OutputFormat::kHuggingFace, OutputFormat::kLightning, OutputFormat::kTorchtitan,
    OutputFormat::kMegatron,    OutputFormat::kDeepSpeed, OutputFormat::kDemo};

// "hf", "lightning", ...; "auto", "off", "regex".
absl::string_view OutputFormatName(OutputFormat format);

struct OutputProgressSpec {
  OutputFormat format = OutputFormat::kAuto;
  std::string regex;  // kRegex only.
};

// The value of --progress-from-output: auto, off, a format's name, or else a
// regex (RE2 syntax, at most 1 KiB) with a named group `step` and optionally
// `total`, `loss` and `lr`, no other named group. An error names the flag,
// the value and what to do.
absl::StatusOr<OutputProgressSpec> ParseOutputProgressSpec(absl::string_view value);

// What one line said. `step`/`total`: -1 when not printed; `loss`, `lr`,
// `epoch`: the number as printed (digits, sign, '.', exponent, nan/inf), ""
// when not printed.
struct OutputMatch {
  int64_t step = -1;
  int64_t total = -1;
  std::string loss;
  std::string lr;
  std::string epoch;
  // Hugging Face's tqdm bar: its total tells the training bar from an
  // evaluation bar (whose lines count as progress without their step).
  bool bar = false;
};

// Whether `line` (one line, without its terminator; ANSI colour sequences
// allowed) is a progress line of `format` (a built-in one), and what it says.
std::optional<OutputMatch> MatchOutputLine(OutputFormat format, absl::string_view line);

class OutputProgress {
 public:
  static constexpr size_t kMaxLineBytes = 4096;
  static constexpr int kMaxMatchesPerSecond = 200;
  // auto: lines of another format, with a step, in a row (none of the
  // picked format's between) that replace a pick made from a line that only
  // looked like its format (a preprocessing loop's plain tqdm bar before
  // Megatron's lines).
  static constexpr int kRepickLines = 3;

  struct Stats {
    uint64_t lines = 0;         // lines looked at
    uint64_t matches = 0;       // lines that were progress and counted
    uint64_t dropped_long = 0;  // lines over kMaxLineBytes, not looked at
    uint64_t dropped_rate = 0;  // matches over kMaxMatchesPerSecond
  };

  // Validates `spec` (a regex is compiled; the error names the flag).
  // `clock`: for the rate limit; not owned.
  static absl::StatusOr<std::unique_ptr<OutputProgress>> Create(const OutputProgressSpec& spec,
                                                                Clock* clock);
  ~OutputProgress();
  OutputProgress(const OutputProgress&) = delete;
  OutputProgress& operator=(const OutputProgress&) = delete;

  // A new round of `local_ranks` workers: forgets every worker's format,
  // partial lines and progress.
  void Reset(int local_ranks);

  // Bytes a worker wrote to `stream` (0 stdout, 1 stderr), as read. O(bytes);
  // never blocks. Returns true when a worker's progress changed and no
  // change was pending before (the caller may wake its loop once).
  bool OnOutput(int local_rank, int stream, absl::string_view bytes);

  // The workers whose progress changed since the last call, in rank order,
  // each with its latest line ("step=12 total=100 loss=0.5 lr=1e-4").
  std::vector<ProgressUpdate> Collect();

  // The format a worker's lines were recognised as (auto picks it from its
  // first matching line); kAuto while none matched.
  OutputFormat FormatOf(int local_rank) const;

  const Stats& stats() const { return stats_; }

 private:
  struct Worker;
  OutputProgress(const OutputProgressSpec& spec, std::unique_ptr<re2::RE2> regex, Clock* clock);
  void OnLine(int local_rank, Worker* worker, absl::string_view line);
  std::optional<OutputMatch> MatchRegex(absl::string_view line) const;
  // auto, once a format is picked: `line`'s match in another format that
  // now replaces the pick (kRepickLines in a row), else nullopt.
  std::optional<OutputMatch> MatchRival(int local_rank, Worker* w, absl::string_view line);
  // Counts one match of `w` against the per-second budget; false when over
  // it (never for the worker's first match of the second).
  bool AdmitMatch(Worker* w);
  // Opens the rate limit's next second when a second has passed.
  void NextWindowIfDue();
  // `from`'s fields into `to` (only where `to` has none, when asked).
  static void Merge(OutputMatch from, OutputMatch* to, bool only_missing = false);
  // A match's fields become the worker's progress.
  void Apply(Worker* w, OutputMatch m);

  const OutputProgressSpec spec_;
  const std::unique_ptr<re2::RE2> regex_;
  Clock* const clock_;
  std::vector<Worker> workers_;
  bool pending_ = false;
  bool held_ = false;  // a worker holds a match over the rate (Worker::held)
  absl::Time window_start_ = absl::InfinitePast();
  int window_matches_ = 0;
  uint64_t window_ = 1;  // which second; a worker's 0: none yet
  Stats stats_;
  // At most one line a minute on drops, and only when there are new ones.
  std::unique_ptr<LogLimiter> drop_log_;
  uint64_t dropped_logged_ = 0;
  std::string plain_;  // a line without its ANSI sequences
};

}  // namespace trainlet::agent

#endif  // TRAINLET_PROGRESS_OUTPUT_PROGRESS_H_

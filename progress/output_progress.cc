#include "progress/output_progress.h"

#include <re2/re2.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kFlag = "--progress-from-output";
constexpr size_t kMaxRegexBytes = 1024;
constexpr int64_t kRegexMaxMem = 1 << 20;  // RE2's budget for its automata
constexpr size_t kMaxNumberBytes = 32;
// The longest line after a '\r' read before it ends (a tqdm bar with its
// postfix is 100-300 bytes).
constexpr size_t kMaxBarBytes = 512;

// --- Small O(n) scanners over a string_view; none backtracks. ---

void SkipSpaces(absl::string_view* s) {
  while (!s->empty() && (s->front() == ' ' || s->front() == '\t')) s->remove_prefix(1);
}

bool Consume(absl::string_view* s, absl::string_view prefix) {
  if (!absl::StartsWith(*s, prefix)) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// A non-negative integer of at most 18 digits.
bool TakeInt(absl::string_view* s, int64_t* out) {
  size_t n = 0;
  int64_t v = 0;
  while (n < s->size() && n < 18 && absl::ascii_isdigit((*s)[n])) {
    v = v * 10 + ((*s)[n] - '0');
    ++n;
  }
  if (n == 0 || (n < s->size() && absl::ascii_isdigit((*s)[n]))) return false;
  s->remove_prefix(n);
  *out = v;
  return true;
}

// A number as printed: [+-]digits[.digits][(e|E)[+-]digits], or nan/inf.
// Kept as text: it goes into a progress line as printed.
bool TakeNumber(absl::string_view* s, std::string* out) {
  absl::string_view t = *s;
  size_t n = 0;
  auto digits = [&] {
    size_t start = n;
    while (n < t.size() && absl::ascii_isdigit(t[n])) ++n;
    return n - start;
  };
  if (n < t.size() && (t[n] == '-' || t[n] == '+')) ++n;
  for (absl::string_view word : {"nan", "inf", "NaN", "Inf"}) {
    if (absl::StartsWith(t.substr(n), word)) {
      n += 3;
      *out = std::string(t.substr(0, n));
      s->remove_prefix(n);
      return true;
    }
  }
  size_t whole = digits();
  size_t frac = 0;
  if (n < t.size() && t[n] == '.') {
    ++n;
    frac = digits();
  }
  if (whole + frac == 0) return false;
  if (n + 1 < t.size() && (t[n] == 'e' || t[n] == 'E')) {
    size_t mark = n++;
    if (n < t.size() && (t[n] == '-' || t[n] == '+')) ++n;
    if (digits() == 0) n = mark;
  }
  if (n > kMaxNumberBytes) return false;
  *out = std::string(t.substr(0, n));
  s->remove_prefix(n);
  return true;
}

// The number right after the first `key` in `line` (spaces skipped), or "".
std::string NumberAfter(absl::string_view line, absl::string_view key) {
  size_t at = line.find(key);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = line.substr(at + key.size());
  SkipSpaces(&rest);
  std::string number;
  TakeNumber(&rest, &number);
  return number;
}

// `line` without ANSI CSI sequences (ESC '[' params final), into `buffer`
// when it has any.
absl::string_view WithoutAnsi(absl::string_view line, std::string* buffer) {
  if (line.find('\x1b') == absl::string_view::npos) return line;
  buffer->clear();
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && !(line[i] >= '@' && line[i] <= '~')) ++i;
      continue;  // the final byte is skipped by the loop
    }
    buffer->push_back(line[i]);
  }
  return *buffer;
}

// --- The formats. Each names the source its lines come from; the golden
// lines in output_progress_test.cc were built from the same files. ---

// tqdm's default bar, as Hugging Face Trainer's ProgressCallback makes it
// (transformers src/transformers/trainer_callback.py: `tqdm(total=
// state.max_steps)`, no description): " 5%|▌    | 50/1000 [00:10<03:10,
// 5.00it/s]"; and the logs it writes above the bar, `str(dict)`:
// "{'loss': 0.6931, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.1}".
std::optional<OutputMatch> MatchHuggingFace(absl::string_view line) {
  absl::string_view s = line;
  SkipSpaces(&s);
  if (absl::StartsWith(s, "{'")) {
    if (!absl::EndsWith(absl::StripTrailingAsciiWhitespace(s), "}")) return std::nullopt;
    OutputMatch m;
    m.loss = NumberAfter(s, "'loss': ");
    m.lr = NumberAfter(s, "'learning_rate': ");
    m.epoch = NumberAfter(s, "'epoch': ");
    if (m.loss.empty() && m.lr.empty() && m.epoch.empty()) return std::nullopt;
    return m;
  }
  // The bar: no description, so the line starts with the percentage.
  int64_t percent = 0;
  if (!TakeInt(&s, &percent) || percent > 100 || !Consume(&s, "%|")) return std::nullopt;
  size_t end_of_bar = s.find("| ");
  if (end_of_bar == absl::string_view::npos) return std::nullopt;
  s.remove_prefix(end_of_bar + 2);
  OutputMatch m;
  m.bar = true;
  if (!TakeInt(&s, &m.step) || !Consume(&s, "/")) return std::nullopt;
  if (!Consume(&s, "?") && !TakeInt(&s, &m.total)) return std::nullopt;
  if (!absl::StartsWith(s, " [")) return std::nullopt;
  return m;
}

// PyTorch Lightning's TQDMProgressBar (src/lightning/pytorch/callbacks/
// progress/tqdm_progress.py: description "Epoch {current_epoch}", BAR_FORMAT
// "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining},
// {rate_noinv_fmt}{postfix}]", the postfix the metrics logged with
// prog_bar=True and v_num): "Epoch 1:   4%|▎   | 40/1095 [00:03<01:37,
// 10.84it/s, v_num=10, train_loss=0.123]". n is the batch within the epoch;
// the step is epoch * batches + n (a NeMo bar's global_step where shown).
std::optional<OutputMatch> MatchLightning(absl::string_view line) {
  absl::string_view s = line;
  SkipSpaces(&s);
  int64_t epoch = 0;
  if (!Consume(&s, "Epoch ") || !TakeInt(&s, &epoch) || !Consume(&s, ":")) return std::nullopt;
  const size_t open = s.find(" [");
  if (open == absl::string_view::npos) return std::nullopt;
  const size_t bar_end = s.substr(0, open).rfind("| ");
  if (bar_end == absl::string_view::npos) return std::nullopt;
  absl::string_view counts = s.substr(bar_end + 2, open - bar_end - 2);
  OutputMatch m;
  int64_t n = 0;
  int64_t batches = -1;
  if (!TakeInt(&counts, &n) || !Consume(&counts, "/")) return std::nullopt;
  if (!Consume(&counts, "?") && !TakeInt(&counts, &batches)) return std::nullopt;
  if (!counts.empty()) return std::nullopt;
  m.epoch = absl::StrCat(epoch);
  // epoch x batches + n, or none where that is over int64 (each fits).
  m.step = n;
  if (batches > 0 && (__builtin_mul_overflow(epoch, batches, &m.step) ||
                      __builtin_add_overflow(m.step, n, &m.step))) {
    m.step = -1;
  }
  // The postfix: ", key=value" items up to the closing ']'.
  absl::string_view postfix = s.substr(open + 2);
  postfix = postfix.substr(0, postfix.rfind(']'));
  while (true) {
    size_t comma = postfix.find(", ");
    if (comma == absl::string_view::npos) break;
    postfix.remove_prefix(comma + 2);
    size_t eq = postfix.find('=');
    if (eq == absl::string_view::npos) break;
    absl::string_view key = postfix.substr(0, eq);
    absl::string_view value = postfix.substr(eq + 1);
    std::string number;
    if (!TakeNumber(&value, &number)) continue;
    if (key == "global_step") {
      int64_t step = 0;
      absl::string_view whole = number;
      if (TakeInt(&whole, &step)) m.step = step;
    } else if (m.loss.empty() && absl::EndsWith(key, "loss") && !absl::StartsWith(key, "val")) {
      m.loss = number;
    } else if (m.loss.empty() && absl::StartsWith(key, "train_loss")) {
      m.loss = number;  // train_loss_step, train_loss_epoch
    } else if (m.lr.empty() && (key == "lr" || key == "learning_rate")) {
      m.lr = number;
    }
  }
  return m;
}

// torchtitan's training log line (torchtitan/components/metrics.py,
// MetricsProcessor.log: "step: {step:2}  loss: {loss:8.5f}  grad_norm: ...",
// each field coloured with ANSI codes from torchtitan/tools/utils.py's
// Color), after the logger's "[titan] <time> - root - INFO - ".
std::optional<OutputMatch> MatchTorchtitan(absl::string_view line) {
  size_t at = 0;
  while (true) {
    at = line.find("step:", at);
    if (at == absl::string_view::npos) return std::nullopt;
    // A word of its own, and not "validate step:" (the validation line).
    if ((at == 0 || line[at - 1] == ' ') && !absl::EndsWith(line.substr(0, at), "validate ")) {
      break;
    }
    at += 5;
  }
  absl::string_view s = line.substr(at + 5);
  SkipSpaces(&s);
  OutputMatch m;
  if (!TakeInt(&s, &m.step)) return std::nullopt;
  m.loss = NumberAfter(s, "loss:");
  if (m.loss.empty()) return std::nullopt;
  m.lr = NumberAfter(s, " lr:");
  return m;
}

// Megatron-LM's training_log (megatron/training/training.py: " iteration
// {:8d}/{:8d} | consumed samples: ... | learning rate: {:.6E} | ... | lm loss:
// {:.6E} | loss scale: ..."), and NeMo 2's ProgressPrinter
// (nemo/lightning/pytorch/callbacks/progress_printer.py: "Training epoch E,
// iteration N/T | lr: ... | global_step: G | reduced_train_loss: ...", T the
// total steps less one).
std::optional<OutputMatch> MatchMegatron(absl::string_view line) {
  OutputMatch m;
  if (size_t at = line.find("Training epoch "); at != absl::string_view::npos) {
    absl::string_view s = line.substr(at + 15);
    int64_t epoch = 0;
    int64_t last = 0;
    if (!TakeInt(&s, &epoch) || !Consume(&s, ", iteration ") || !TakeInt(&s, &m.step) ||
        !Consume(&s, "/") || !TakeInt(&s, &last)) {
      return std::nullopt;
    }
    m.total = last + 1;
    m.epoch = absl::StrCat(epoch);
    if (std::string g = NumberAfter(s, "| global_step: "); !g.empty()) {
      absl::string_view whole = g;
      int64_t step = 0;
      if (TakeInt(&whole, &step)) m.step = step;
    }
    m.lr = NumberAfter(s, "| lr: ");
    m.loss = NumberAfter(s, "loss: ");
    return m;
  }
  size_t at = line.find(" iteration ");
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view s = line.substr(at + 11);
  SkipSpaces(&s);
  if (!TakeInt(&s, &m.step) || !Consume(&s, "/")) return std::nullopt;
  SkipSpaces(&s);
  if (!TakeInt(&s, &m.total)) return std::nullopt;
  SkipSpaces(&s);
  if (!absl::StartsWith(s, "|")) return std::nullopt;
  m.lr = NumberAfter(s, "| learning rate: ");
  m.loss = NumberAfter(s, " loss: ");  // "lm loss: " (never "loss scale: ")
  return m;
}

// DeepSpeed's engine (deepspeed/runtime/engine.py, _report_progress:
// "step={step}, skipped={skipped}, lr={lr}, mom={mom}" through log_dist,
// which prefixes "[Rank 0] ") and its throughput timer (deepspeed/utils/
// timer.py: "epoch={}/micro_step={}/global_step={}, RunningAvgSamplesPerSec=").
std::optional<OutputMatch> MatchDeepSpeed(absl::string_view line) {
  OutputMatch m;
  if (size_t at = line.find("/global_step="); at != absl::string_view::npos) {
    if (line.find("epoch=") == absl::string_view::npos ||
        line.find("/micro_step=") == absl::string_view::npos) {
      return std::nullopt;
    }
    absl::string_view s = line.substr(at + 13);
    if (!TakeInt(&s, &m.step)) return std::nullopt;
    m.epoch = NumberAfter(line, "epoch=");
    return m;
  }
  size_t at = line.find("step=");
  if (at == absl::string_view::npos || (at > 0 && line[at - 1] != ' ')) return std::nullopt;
  absl::string_view s = line.substr(at + 5);
  if (!TakeInt(&s, &m.step) || !absl::StartsWith(s, ", skipped=")) return std::nullopt;
  m.lr = NumberAfter(s, ", lr=[");
  return m;
}

// scripts/demo/train_ddp.py: print(f"step {step:3d} loss {loss.item():.5f}").
std::optional<OutputMatch> MatchDemo(absl::string_view line) {
  absl::string_view s = line;
  SkipSpaces(&s);
  OutputMatch m;
  if (!Consume(&s, "step ")) return std::nullopt;
  SkipSpaces(&s);
  if (!TakeInt(&s, &m.step) || !Consume(&s, " ")) return std::nullopt;
  SkipSpaces(&s);
  if (!Consume(&s, "loss ") || !TakeNumber(&s, &m.loss)) return std::nullopt;
  return m;
}

}  // namespace

absl::string_view OutputFormatName(OutputFormat format) {
  switch (format) {
    case OutputFormat::kOff:
      return "off";
    case OutputFormat::kAuto:
      return "auto";
    case OutputFormat::kHuggingFace:
      return "hf";
    case OutputFormat::kLightning:
      return "lightning";
    case OutputFormat::kTorchtitan:
      return "torchtitan";
    case OutputFormat::kMegatron:
      return "megatron";
    case OutputFormat::kDeepSpeed:
      return "deepspeed";
    case OutputFormat::kDemo:
      return "demo";
    case OutputFormat::kRegex:
      return "regex";
  }
  return "?";
}

namespace {

// MatchOutputLine on a line without ANSI sequences.
std::optional<OutputMatch> MatchPlainLine(OutputFormat format, absl::string_view line) {
  switch (format) {
    case OutputFormat::kHuggingFace:
      return MatchHuggingFace(line);
    case OutputFormat::kLightning:
      return MatchLightning(line);
    case OutputFormat::kTorchtitan:
      return MatchTorchtitan(line);
    case OutputFormat::kMegatron:
      return MatchMegatron(line);
    case OutputFormat::kDeepSpeed:
      return MatchDeepSpeed(line);
    case OutputFormat::kDemo:
      return MatchDemo(line);
    default:
      return std::nullopt;
  }
}

absl::StatusOr<std::unique_ptr<re2::RE2>> CompileRegex(absl::string_view value) {
  if (value.size() > kMaxRegexBytes) {
    return absl::InvalidArgumentError(absl::StrCat(kFlag, ": the regex is ", value.size(),
                                                   " bytes, over the limit of ", kMaxRegexBytes));
  }
  re2::RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kRegexMaxMem);
  auto re = std::make_unique<re2::RE2>(re2::StringPiece(value.data(), value.size()), options);
  if (!re->ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, "=", SafeForLog(value, 200),
        ": neither auto, off, a format (hf, lightning, torchtitan, megatron, deepspeed, demo) "
        "nor a valid regex (RE2 syntax): ",
        re->error()));
  }
  bool has_step = false;
  for (const auto& [name, index] : re->NamedCapturingGroups()) {
    if (name == "step") has_step = true;
    if (name != "step" && name != "total" && name != "loss" && name != "lr") {
      return absl::InvalidArgumentError(
          absl::StrCat(kFlag, "=", SafeForLog(value, 200), ": unknown named group (?P<",
                       SafeForLog(name, 64), ">...); the regex may name step, total, loss and lr"));
    }
  }
  if (!has_step) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFlag, "=", SafeForLog(value, 200),
                     ": the regex needs a named group step, e.g. 'iter (?P<step>\\d+)'"));
  }
  return re;
}

}  // namespace

std::optional<OutputMatch> MatchOutputLine(OutputFormat format, absl::string_view line) {
  std::string buffer;
  return MatchPlainLine(format, WithoutAnsi(line, &buffer));
}

absl::StatusOr<OutputProgressSpec> ParseOutputProgressSpec(absl::string_view value) {
  OutputProgressSpec spec;
  if (value == "auto") return spec;
  if (value == "off") {
    spec.format = OutputFormat::kOff;
    return spec;
  }
  for (OutputFormat f : kBuiltInOutputFormats) {
    if (value == OutputFormatName(f)) {
      spec.format = f;
      return spec;
    }
  }
  if (value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFlag,
                     " is empty: give auto, off, a format (hf, lightning, torchtitan, megatron, "
                     "deepspeed, demo) or a regex with a named group step"));
  }
  absl::StatusOr<std::unique_ptr<re2::RE2>> re = CompileRegex(value);
  if (!re.ok()) return re.status();
  spec.format = OutputFormat::kRegex;
  spec.regex = std::string(value);
  return spec;
}

struct OutputProgress::Worker {
  OutputFormat format = OutputFormat::kAuto;
  std::string partial[2];
  bool discarding[2] = {false, false};    // in a line over kMaxLineBytes
  bool after_cr[2] = {false, false};      // the partial line follows a '\r'
  bool partial_read[2] = {false, false};  // the partial line was read as it is
  int64_t step = -1;
  int64_t total = -1;
  std::string loss;
  std::string lr;
  std::string epoch;
  int64_t bar_total = -1;  // hf: the training bar's total (the first bar's)
  bool bar_done = false;   // hf: that bar reached its total
  bool logs_seen = false;  // hf: a Trainer's log line came
  // auto, once picked: another format whose lines with a step came in a
  // row, none of the picked format's between, and how many.
  OutputFormat rival = OutputFormat::kAuto;
  int rival_lines = 0;
  uint64_t window = 0;              // the rate limit's second of its last match
  std::optional<OutputMatch> held;  // over the rate, for the next second
  uint64_t held_window = 0;         // the second it was held in
  bool changed = false;
};

absl::StatusOr<std::unique_ptr<OutputProgress>> OutputProgress::Create(
    const OutputProgressSpec& spec, Clock* clock) {
  std::unique_ptr<re2::RE2> regex;
  if (spec.format == OutputFormat::kRegex) {
    absl::StatusOr<std::unique_ptr<re2::RE2>> re = CompileRegex(spec.regex);
    if (!re.ok()) return re.status();
    regex = *std::move(re);
  }
  return std::unique_ptr<OutputProgress>(new OutputProgress(spec, std::move(regex), clock));
}

OutputProgress::OutputProgress(const OutputProgressSpec& spec, std::unique_ptr<re2::RE2> regex,
                               Clock* clock)
    : spec_(spec),
      regex_(std::move(regex)),
      clock_(clock),
      drop_log_(std::make_unique<LogLimiter>(1, absl::Minutes(1), clock)) {}

OutputProgress::~OutputProgress() = default;

void OutputProgress::Reset(int local_ranks) {
  workers_.assign(static_cast<size_t>(std::max(local_ranks, 0)), Worker{});
  for (Worker& w : workers_) {
    if (spec_.format != OutputFormat::kAuto) w.format = spec_.format;
  }
  pending_ = false;
  held_ = false;
}

OutputFormat OutputProgress::FormatOf(int local_rank) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) {
    return OutputFormat::kAuto;
  }
  return workers_[local_rank].format;
}

bool OutputProgress::OnOutput(int local_rank, int stream, absl::string_view bytes) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size() || stream < 0 ||
      stream > 1 || spec_.format == OutputFormat::kOff) {
    return false;
  }
  Worker* w = &workers_[local_rank];
  const bool was_pending = pending_;
  std::string& partial = w->partial[stream];
  bool& discarding = w->discarding[stream];
  bool& after_cr = w->after_cr[stream];
  bool& partial_read = w->partial_read[stream];
  // Where the next '\n' is, looked for once and kept while lines end in
  // '\r' before it (a tqdm bar's redraws): each byte is scanned once.
  const char* next_nl = nullptr;
  while (!bytes.empty()) {
    // The line ends at the first '\n' or '\r' (a tqdm bar redraws itself
    // after '\r').
    if (next_nl == nullptr || next_nl < bytes.data()) {
      const void* nl = std::memchr(bytes.data(), '\n', bytes.size());
      next_nl = nl == nullptr ? bytes.data() + bytes.size() : static_cast<const char*>(nl);
    }
    size_t end = static_cast<size_t>(next_nl - bytes.data());
    if (const void* cr = std::memchr(bytes.data(), '\r', end); cr != nullptr) {
      end = static_cast<const char*>(cr) - bytes.data();
    }
    const bool complete = end < bytes.size();
    const bool ends_with_cr = complete && bytes[end] == '\r';
    absl::string_view piece = bytes.substr(0, end);
    bytes.remove_prefix(complete ? end + 1 : end);
    if (!piece.empty()) partial_read = false;
    if (discarding) {
      if (complete) discarding = false;
      after_cr = ends_with_cr;
      continue;
    }
    if (partial.size() + piece.size() > kMaxLineBytes) {
      ++stats_.dropped_long;
      partial.clear();
      discarding = !complete;
      after_cr = ends_with_cr;
      continue;
    }
    if (!complete) {
      partial.append(piece.data(), piece.size());
      break;
    }
    if (partial.empty()) {
      OnLine(local_rank, w, piece);
    } else {
      partial.append(piece.data(), piece.size());
      // Read already, as the bar on screen, unless it grew since.
      if (!partial_read) OnLine(local_rank, w, partial);
      partial.clear();
    }
    partial_read = false;
    after_cr = ends_with_cr;
  }
  // A tqdm bar is written as '\r' and the bar, and stays without an end
  // until the next redraw: read what is on screen now, so that the last
  // step before a stop is not one behind. (A read may have cut it: a
  // matcher wants the whole "n/total [", and the line is read again, whole,
  // once it ends if it grew.)
  // Only as long as a bar: a line that grows a byte a read is not read
  // again and again.
  if (after_cr && !partial.empty() && partial.size() <= kMaxBarBytes && !partial_read &&
      !discarding) {
    OnLine(local_rank, w, partial);
    partial_read = true;
  }
  if (const uint64_t dropped = stats_.dropped_long + stats_.dropped_rate;
      dropped > dropped_logged_) {
    int64_t suppressed = 0;
    if (drop_log_->Allow(&suppressed)) {
      dropped_logged_ = dropped;
      TLOG(kWarning) << "progress from output: " << stats_.dropped_long << " worker lines over "
                     << kMaxLineBytes << " bytes and " << stats_.dropped_rate << " matches over "
                     << kMaxMatchesPerSecond
                     << " a second not read for progress so far (the output itself is "
                        "unchanged)";
    }
  }
  return pending_ && !was_pending;
}

void OutputProgress::NextWindowIfDue() {
  const absl::Time now = clock_->Now();
  if (now - window_start_ >= absl::Seconds(1)) {
    window_start_ = now;
    window_matches_ = 0;
    ++window_;
  }
}

bool OutputProgress::AdmitMatch(Worker* w) {
  NextWindowIfDue();
  // Over the node's budget, a worker's first match of the second still
  // counts: a worker that prints rarely is never starved by a chatty one
  // into looking silent (and hung).
  if (window_matches_ >= kMaxMatchesPerSecond && w->window == window_) {
    ++stats_.dropped_rate;
    return false;
  }
  ++window_matches_;
  w->window = window_;
  return true;
}

std::optional<OutputMatch> OutputProgress::MatchRegex(absl::string_view line) const {
  const int groups = regex_->NumberOfCapturingGroups();
  std::vector<re2::StringPiece> found(static_cast<size_t>(groups) + 1);
  if (!regex_->Match(re2::StringPiece(line.data(), line.size()), 0, line.size(),
                     re2::RE2::UNANCHORED, found.data(), groups + 1)) {
    return std::nullopt;
  }
  OutputMatch m;
  for (const auto& [name, index] : regex_->NamedCapturingGroups()) {
    absl::string_view text(found[index].data(), found[index].size());
    if (text.data() == nullptr) continue;  // the group did not take part
    if (name == "step" || name == "total") {
      int64_t v = 0;
      if (!TakeInt(&text, &v) || !text.empty()) return std::nullopt;
      (name == "step" ? m.step : m.total) = v;
    } else {
      std::string number;
      if (!TakeNumber(&text, &number) || !text.empty()) continue;
      (name == "loss" ? m.loss : m.lr) = std::move(number);
    }
  }
  if (m.step < 0) return std::nullopt;
  return m;
}

std::optional<OutputMatch> OutputProgress::MatchRival(int local_rank, Worker* w,
                                                      absl::string_view line) {
  for (OutputFormat f : kBuiltInOutputFormats) {
    if (f == w->format) continue;
    std::optional<OutputMatch> m = MatchPlainLine(f, line);
    if (!m.has_value() || m->step < 0) continue;
    w->rival_lines = f == w->rival ? w->rival_lines + 1 : 1;
    w->rival = f;
    if (w->rival_lines < kRepickLines) return std::nullopt;
    TLOG(kInfo) << "progress from output: local rank " << local_rank << " prints "
                << OutputFormatName(f) << " progress lines, not " << OutputFormatName(w->format)
                << " (" << kRepickLines
                << " in a row; --progress-from-output=auto picked the other from a line that "
                   "only looked like one)";
    // Nothing of the false pick's lines stays in the worker's progress
    // (its partial lines stay: the caller may be reading one).
    w->format = f;
    w->rival = OutputFormat::kAuto;
    w->rival_lines = 0;
    w->step = w->total = w->bar_total = -1;
    w->bar_done = w->logs_seen = false;
    w->loss.clear();
    w->lr.clear();
    w->epoch.clear();
    return m;
  }
  return std::nullopt;
}

void OutputProgress::OnLine(int local_rank, Worker* w, absl::string_view line) {
  ++stats_.lines;
  std::optional<OutputMatch> m;
  if (w->format == OutputFormat::kRegex) {
    m = MatchRegex(line);
  } else if (line = WithoutAnsi(line, &plain_); w->format != OutputFormat::kAuto) {
    m = MatchPlainLine(w->format, line);
    if (spec_.format == OutputFormat::kAuto) {
      if (m.has_value()) {
        w->rival_lines = 0;
      } else {
        m = MatchRival(local_rank, w, line);
      }
    }
  } else {
    for (OutputFormat f : kBuiltInOutputFormats) {
      m = MatchPlainLine(f, line);
      if (m.has_value()) {
        w->format = f;
        TLOG(kInfo) << "progress from output: local rank " << local_rank << " prints "
                    << OutputFormatName(f)
                    << " progress lines (--progress-from-output=auto; a worker that writes "
                       "TRAINLET_PROGRESS_FILE is read from its file instead)";
        break;
      }
    }
  }
  if (!m.has_value()) return;
  if (m->bar) {
    // The first bar was an evaluation's (trainer.evaluate() before
    // train()) when it completed with no training log written (Trainer
    // writes its logs only while the training bar exists): the next bar
    // with another total is the training bar.
    if (w->bar_total >= 0 && m->total != w->bar_total && w->bar_done && !w->logs_seen) {
      w->bar_total = -1;
    }
    // An evaluation bar (another total than the training bar's): alive,
    // but its count is not the training step.
    if (w->bar_total < 0) {
      w->bar_total = m->total;
      w->bar_done = false;
    }
    if (m->total != w->bar_total) {
      m->step = m->total = -1;
    } else if (m->total >= 0 && m->step >= m->total) {
      w->bar_done = true;
    }
  } else if (w->format == OutputFormat::kHuggingFace) {
    w->logs_seen = true;  // a Trainer's log, written only while training
  }
  if (!AdmitMatch(w)) {
    // Over the rate: kept, the latest of each field, for the next second
    // (Collect), so that a burst followed by silence (a hang, a checkpoint)
    // does not leave the step behind until the worker prints again.
    if (!w->held.has_value()) w->held.emplace();
    Merge(std::move(*m), &*w->held);
    w->held_window = window_;
    held_ = true;
    return;
  }
  ++stats_.matches;
  if (w->held.has_value()) {
    Merge(*std::move(w->held), m.operator->(), /*only_missing=*/true);
    w->held.reset();
  }
  Apply(w, std::move(*m));
}

void OutputProgress::Merge(OutputMatch from, OutputMatch* to, bool only_missing) {
  if (from.step >= 0 && (!only_missing || to->step < 0)) to->step = from.step;
  if (from.total >= 0 && (!only_missing || to->total < 0)) to->total = from.total;
  if (!from.loss.empty() && (!only_missing || to->loss.empty())) to->loss = std::move(from.loss);
  if (!from.lr.empty() && (!only_missing || to->lr.empty())) to->lr = std::move(from.lr);
  if (!from.epoch.empty() && (!only_missing || to->epoch.empty())) {
    to->epoch = std::move(from.epoch);
  }
}

void OutputProgress::Apply(Worker* w, OutputMatch m) {
  if (m.step >= 0) w->step = m.step;
  if (m.total >= 0) w->total = m.total;
  if (!m.loss.empty()) w->loss = std::move(m.loss);
  if (!m.lr.empty()) w->lr = std::move(m.lr);
  if (!m.epoch.empty()) w->epoch = std::move(m.epoch);
  w->changed = true;
  pending_ = true;
}

std::vector<ProgressUpdate> OutputProgress::Collect() {
  std::vector<ProgressUpdate> updates;
  if (held_) {
    // The matches held over the rate, once a new second began (each a
    // worker's first of it, so admitted).
    NextWindowIfDue();
    held_ = false;
    for (Worker& w : workers_) {
      if (!w.held.has_value()) continue;
      if (w.held_window == window_ || !AdmitMatch(&w)) {
        held_ = true;
        continue;
      }
      ++stats_.matches;
      Apply(&w, *std::move(w.held));
      w.held.reset();
    }
  }
  if (!pending_) return updates;
  pending_ = false;
  for (size_t rank = 0; rank < workers_.size(); ++rank) {
    Worker& w = workers_[rank];
    if (!w.changed) continue;
    w.changed = false;
    ProgressUpdate u;
    u.local_rank = static_cast<int>(rank);
    ProgressLine line;
    if (w.step >= 0) line.fields.emplace_back("step", absl::StrCat(w.step));
    if (w.total >= 0) line.fields.emplace_back("total", absl::StrCat(w.total));
    if (!w.loss.empty()) line.fields.emplace_back("loss", w.loss);
    if (!w.lr.empty()) line.fields.emplace_back("lr", w.lr);
    if (!w.epoch.empty()) line.fields.emplace_back("epoch", w.epoch);
    if (!line.fields.empty()) u.line = std::move(line);
    updates.push_back(std::move(u));
  }
  return updates;
}

}  // namespace trainlet::agent

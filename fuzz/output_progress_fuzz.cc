// Fuzz target: --progress-from-output's parser (progress/output_progress.h),
// whose input is whatever a worker prints. Input: one byte picking the value
// (auto, a format, or a fixed regex), then pieces of output, each a byte for
// its length, a byte for the worker (0, 1 or 2: one past the round's two)
// and stream, and the bytes. Checked: every progress line it gives is valid
// as a progress file's line would be (keys known, values 1-64 printable
// bytes without spaces, step and total digits), and each format's matcher
// on the whole input gives the same kind of values. Also the whole input as
// the flag's value: parsed or refused, never a crash.
#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "common/clock.h"
#include "common/logging.h"
#include "fuzz/fuzz_util.h"
#include "progress/output_progress.h"

namespace agent = trainlet::agent;

namespace {

bool IsNumber(const std::string& v) {
  if (v.empty() || v.size() > 32) return false;
  for (char c : v) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '+') return false;
  }
  return true;
}

bool IsDigits(const std::string& v) {
  if (v.empty() || v.size() > 18) return false;
  for (char c : v) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

void CheckMatch(const agent::OutputMatch& m, absl::string_view line) {
  const std::string what(line);
  FUZZ_CHECK(m.step >= -1 && m.total >= -1, what);
  FUZZ_CHECK(m.loss.empty() || IsNumber(m.loss), what);
  FUZZ_CHECK(m.lr.empty() || IsNumber(m.lr), what);
  FUZZ_CHECK(m.epoch.empty() || IsNumber(m.epoch), what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainlet::SetLogLevel(trainlet::LogLevel::kError);
  trainlet::fuzz::FuzzInput in(data, size);
  static const char* const kValues[] = {
      "auto",
      "hf",
      "lightning",
      "torchtitan",
      "megatron",
      "deepspeed",
      "demo",
      R"(it (?P<step>\d+)/(?P<total>\d+)(?: loss (?P<loss>\S+))?(?: lr=(?P<lr>\S+))?)"};
  const char* value = kValues[in.Pick(sizeof(kValues) / sizeof(kValues[0]))];
  absl::StatusOr<agent::OutputProgressSpec> spec = agent::ParseOutputProgressSpec(value);
  FUZZ_CHECK(spec.ok(), value);
  trainlet::SimulatedClock clock;
  auto progress = agent::OutputProgress::Create(*spec, &clock);
  FUZZ_CHECK(progress.ok(), value);
  (*progress)->Reset(2);
  std::string all;
  while (!in.empty()) {
    const size_t length = in.Byte();
    const uint8_t who = in.Byte();
    const std::string bytes = in.Bytes(length);
    all += bytes;
    (*progress)->OnOutput(who % 3, (who / 3) % 2, bytes);
    if (who & 0x80) clock.Advance(absl::Milliseconds(300));
    for (const agent::ProgressUpdate& u : (*progress)->Collect()) {
      FUZZ_CHECK(u.local_rank == 0 || u.local_rank == 1, all);
      if (!u.line.has_value()) continue;
      FUZZ_CHECK(!u.line->fields.empty() && u.line->fields.size() <= 5, all);
      for (const auto& [key, v] : u.line->fields) {
        if (key == "step" || key == "total") {
          FUZZ_CHECK(IsDigits(v), all);
        } else {
          FUZZ_CHECK(key == "loss" || key == "lr" || key == "epoch", all);
          FUZZ_CHECK(IsNumber(v), all);
        }
      }
    }
  }
  for (agent::OutputFormat f : agent::kBuiltInOutputFormats) {
    if (std::optional<agent::OutputMatch> m = agent::MatchOutputLine(f, all)) CheckMatch(*m, all);
  }
  // The input as the flag's value: a regex RE2 compiles or refuses.
  (void)agent::ParseOutputProgressSpec(trainlet::fuzz::AsText(data, std::min<size_t>(size, 2048)));
  return 0;
}

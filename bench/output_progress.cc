// What --progress-from-output costs the agent (docs/progress.md, "Progress
// from output"): the parser (progress/output_progress.h) alone, fed as the
// Supervisor feeds it, 64 KiB reads of a worker's output, for each kind of
// output: lines no format matches (auto's worst case: every matcher looks at
// every line, forever), each format's own lines (auto picks it on the first
// and then runs only its matcher), and a user's regex. Printed per case: CPU
// time per line (CLOCK_PROCESS_CPUTIME_ID, best of --runs) and the share of
// one core that costs at 10,000 lines a second; the issue's bound is 1%.
// bench/progress_output.py measures the whole agent with and without the flag.
//
// Build and run (never add to ctest):
//   ninja -C build -j2 bench_output_progress
//   build/bench/bench_output_progress [--lines=200000] [--runs=5] [--only=TEXT]
// (--only: the cases whose name contains TEXT, e.g. lightning).
#include "progress/output_progress.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/flags.h"
#include "common/clock.h"
#include "common/logging.h"

namespace {

using trainlet::Clock;
using trainlet::agent::OutputProgress;
using trainlet::agent::OutputProgressSpec;
using trainlet::agent::ParseOutputProgressSpec;
using trainlet::bench::Flag;

// Time the bench moves by hand, read without a lock as the agent's
// monotonic clock is (SimulatedClock's mutex, with the deadlock detection of
// a build with the tests, would be a third of a match's cost).
class SteppedClock : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::UnixEpoch();
};

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

struct Case {
  const char* name;
  const char* value;               // --progress-from-output
  std::vector<std::string> lines;  // repeated in turn, each with its '\n'
};

// Nanoseconds of CPU per line: `lines` lines of `c` in 64 KiB reads.
double NanosPerLine(const Case& c, int lines, int runs) {
  std::string output;
  for (int i = 0; i < lines; ++i) output += c.lines[static_cast<size_t>(i) % c.lines.size()];
  absl::StatusOr<OutputProgressSpec> spec = ParseOutputProgressSpec(c.value);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name, std::string(spec.status().message()).c_str());
    return -1;
  }
  double best = 1e9;
  for (int run = 0; run < runs; ++run) {
    SteppedClock clock;  // the rate limit's
    auto progress = OutputProgress::Create(*spec, &clock);
    (*progress)->Reset(1);
    const double start = CpuSeconds();
    for (size_t at = 0; at < output.size(); at += 65536) {
      (*progress)->OnOutput(0, 0, absl::string_view(output).substr(at, 65536));
      // The agent collects at most 10 times a second; a second of simulated
      // time per read keeps the rate limit from dropping the matches.
      clock.Advance(absl::Seconds(1));
      (*progress)->Collect();
    }
    best = std::min(best, (CpuSeconds() - start) / lines * 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int lines = 200000;
  int runs = 5;
  std::string only;  // cases whose name contains it
  trainlet::bench::UsageProblem problem;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (Flag(argv[i], "--lines", &v)) {
      problem.Require(absl::SimpleAtoi(v, &lines) && lines > 0, "--lines: a positive integer");
    } else if (Flag(argv[i], "--runs", &v)) {
      problem.Require(absl::SimpleAtoi(v, &runs) && runs > 0, "--runs: a positive integer");
    } else if (Flag(argv[i], "--only", &v)) {
      only = v;
    } else {
      problem.Unknown(argv[i]);
    }
  }
  trainlet::SetLogLevel(trainlet::LogLevel::kError);  // the drops' warnings
  if (problem.Print(argv[0])) {
    std::fprintf(stderr, "usage: %s [--lines=200000] [--runs=5] [--only=TEXT]\n", argv[0]);
    return 2;
  }

  const std::string noise =
      "2026-11-29 12:00:00,123 INFO data.loader: prefetched shard 00042 of 00512 "
      "(1048576 samples, 12.3 MiB/s)\n";
  const std::vector<Case> cases = {
      {"auto, lines no format matches", "auto", {noise}},
      {"off (the agent's own work only)", "off", {noise}},
      {"auto, hf bar and logs",
       "auto",
       {" 10%|#         | 50/500 [00:10<01:30,  4.98it/s]\r",
        " 10%|#         | 51/500 [00:10<01:30,  4.98it/s]\r",
        "{'loss': 0.6931, 'grad_norm': 1.2345678, 'learning_rate': 4.5e-05, 'epoch': 0.1}\n"}},
      {"auto, lightning bar",
       "auto",
       {"Epoch 1:   4%|#         | 40/1095 [00:03<01:37, 10.84it/s, v_num=10, "
        "train_loss=0.123]\r"}},
      {"auto, torchtitan",
       "auto",
       {"[titan] 2026-08-21 21:30:21,123 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  "
        "7.12345  \x1b[38;2;180;60;0mgrad_norm:  1.2345  \x1b[38;2;54;234;195mmemory: "
        "12.34GiB(15.60%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 45.67  \x1b[35mmfu: "
        "12.34%\x1b[39m\n"}},
      {"auto, megatron",
       "auto",
       {" [2026-08-22 15:22:22.123456] iteration       10/    1000 | consumed samples:     "
        "     320 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.000000E-04 | "
        "global batch size:    32 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: "
        "1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"}},
      {"auto, deepspeed",
       "auto",
       {"[2025-02-21 12:05:41,123] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]\n"}},
      {"auto, demo", "auto", {"step 120 loss 0.00012\n"}},
      {"auto, hf among 9 noise lines",
       "auto",
       {"{'loss': 0.6931, 'grad_norm': 1.2345678, 'learning_rate': 4.5e-05, 'epoch': 0.1}\n", noise,
        noise, noise, noise, noise, noise, noise, noise, noise}},
      {"regex, lines it does not match", R"(iter (?P<step>\d+)/(?P<total>\d+))", {noise}},
      {"regex, its lines", R"(iter (?P<step>\d+)/(?P<total>\d+))", {"iter 12/1000 loss 0.5\n"}},
  };
  std::printf("%-36s %10s %18s\n", "case", "ns/line", "core % at 10k/s");
  for (const Case& c : cases) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const double ns = NanosPerLine(c, lines, runs);
    std::printf("%-36s %10.1f %17.3f%%\n", c.name, ns, ns * 10000 / 1e9 * 100);
  }
  return 0;
}

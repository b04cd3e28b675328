#include "progress/output_progress.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

// What a golden line should give; -1 / "" for not printed.
struct Want {
  int64_t step = -1;
  int64_t total = -1;
  std::string loss;
  std::string lr;
  std::string epoch;
};

void ExpectMatch(OutputFormat format, const std::string& line, const Want& want) {
  SCOPED_TRACE(line);
  std::optional<OutputMatch> m = MatchOutputLine(format, line);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, want.step);
  EXPECT_EQ(m->total, want.total);
  EXPECT_EQ(m->loss, want.loss);
  EXPECT_EQ(m->lr, want.lr);
  EXPECT_EQ(m->epoch, want.epoch);
  // No other format claims it: auto's pick does not depend on the order.
  for (OutputFormat other : kBuiltInOutputFormats) {
    if (other != format) {
      EXPECT_FALSE(MatchOutputLine(other, line).has_value()) << OutputFormatName(other);
    }
  }
}

void ExpectNoMatch(const std::string& line) {
  for (OutputFormat f : kBuiltInOutputFormats) {
    EXPECT_FALSE(MatchOutputLine(f, line).has_value()) << OutputFormatName(f) << ": " << line;
  }
}

// Hugging Face transformers at 55093b758b338fdc7903e778509523d755ae080d,
// src/transformers/trainer_callback.py: ProgressCallback makes
// tqdm(total=state.max_steps, dynamic_ncols=True), tqdm's default format
// "{l_bar}{bar}{r_bar}" with no description, and on_log writes
// str(shallow_logs) above the bar (total_flos popped, epoch rounded to 2).
TEST(MatchOutputLine, HuggingFaceTrainer) {
  ExpectMatch(OutputFormat::kHuggingFace,
              " 10%|\xe2\x96\x88         | 50/500 [00:10<01:30,  4.98it/s]",
              {.step = 50, .total = 500});
  ExpectMatch(OutputFormat::kHuggingFace, "100%|##########| 500/500 [01:40<00:00,  4.99it/s]",
              {.step = 500, .total = 500});
  ExpectMatch(OutputFormat::kHuggingFace,
              "{'loss': 0.6931, 'grad_norm': 1.2345678, 'learning_rate': 4.5e-05, 'epoch': 0.1}",
              {.loss = "0.6931", .lr = "4.5e-05", .epoch = "0.1"});
  ExpectMatch(
      OutputFormat::kHuggingFace,
      "{'train_runtime': 100.5, 'train_samples_per_second': 39.8, 'train_steps_per_second': "
      "4.975, 'train_loss': 0.51, 'epoch': 3.0}",
      {.epoch = "3.0"});
}

// PyTorch Lightning at 7f0c3436cd3f6ad3753125672024fc415cbcb414 (2.6.0+169),
// src/lightning/pytorch/callbacks/progress/tqdm_progress.py: the train bar's
// description f"Epoch {trainer.current_epoch}", BAR_FORMAT "{l_bar}{bar}|
// {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]",
// the postfix get_metrics(): v_num and the prog_bar metrics
// (progress_bar.py's docstring shows "Epoch 1:   4%|▎ | 40/1095 [00:03<01:37,
// 10.84it/s, v_num=10]").
TEST(MatchOutputLine, Lightning) {
  ExpectMatch(OutputFormat::kLightning,
              "Epoch 1:   4%|\xe2\x96\x8e         | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]",
              {.step = 1135, .epoch = "1"});
  ExpectMatch(OutputFormat::kLightning,
              "Epoch 0:  50%|#####     | 50/100 [00:05<00:05, 9.80it/s, v_num=3, train_loss=0.123, "
              "lr=0.001]",
              {.step = 50, .loss = "0.123", .lr = "0.001", .epoch = "0"});
  ExpectMatch(OutputFormat::kLightning,
              "Epoch 2: |          | 7/? [00:01<00:00, 5.00it/s, v_num=0, train_loss_step=1.5e+00]",
              {.step = 7, .loss = "1.5e+00", .epoch = "2"});
  // NeMo's Lightning bar carries the global step.
  ExpectMatch(OutputFormat::kLightning,
              "Epoch 0: : 100%|##########| 10/10 [00:02<00:00, 4.50it/s, v_num=0, "
              "reduced_train_loss=2.340, global_step=9.000]",
              {.step = 9, .loss = "2.340", .epoch = "0"});
}

TEST(MatchOutputLine, LightningsStepNeverOverflows) {
  // epoch x batches over int64 (each fits): still a progress line, with no
  // step rather than a wrapped one (signed overflow is undefined).
  std::optional<OutputMatch> m = MatchOutputLine(
      OutputFormat::kLightning,
      "Epoch 999999999999999999:   1%|          | 5/999999999999999999 [00:01<00:00, 1.00it/s]");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, -1);
  EXPECT_EQ(m->epoch, "999999999999999999");
  m = MatchOutputLine(OutputFormat::kLightning,
                      "Epoch 307445734561825860: |  | 7/30 [00:01<00:00, 1.00it/s]");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 307445734561825860LL * 30 + 7);
}

// torchtitan at b5bcd76c66d0acb1a08b176d9639425bc55e0b2a,
// torchtitan/components/metrics.py (MetricsProcessor.log's logger.info), the
// colours of torchtitan/tools/utils.py's Color, the format of
// torchtitan/tools/logging.py's init_logger.
TEST(MatchOutputLine, Torchtitan) {
  ExpectMatch(OutputFormat::kTorchtitan,
              "[titan] 2026-08-21 21:30:21,123 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  "
              "7.12345  \x1b[38;2;180;60;0mgrad_norm:  1.2345  \x1b[38;2;54;234;195mmemory: "
              "12.34GiB(15.60%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 45.67  \x1b[35mmfu: "
              "12.34%\x1b[39m",
              {.step = 10, .loss = "7.12345"});
  ExpectMatch(OutputFormat::kTorchtitan,
              "[titan] 2026-08-21 21:30:21,123 - root - INFO - step:  1  loss: 12.25000  "
              "grad_norm:  3.1000  memory: 12.34GiB(15.60%)  tps: 512  tflops: 1.00  mfu: N/A",
              {.step = 1, .loss = "12.25000"});
  // The validation line is not a training step.
  ExpectNoMatch(
      "[titan] 2026-08-21 21:30:21,123 - root - INFO - \x1b[33mvalidate step: 10  "
      "\x1b[32mloss:  7.1234  \x1b[38;2;54;234;195mmemory: 12.34GiB(15.60%)  \x1b[34mtps: "
      "1,234\x1b[39m");
}

// Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553,
// megatron/training/training.py training_log(); the loss key 'lm loss' is
// pretrain_gpt.py's. NeMo at 8e2ee3d4e2183c2f9813af64cfd45f6b7f800301,
// nemo/lightning/pytorch/callbacks/progress_printer.py: prefix
// f"Training epoch {epoch}, iteration {n-1}/{total-1}", then
// f" | {metric}: {val}" (integers as such, else {val:.4}).
TEST(MatchOutputLine, MegatronAndNemo) {
  ExpectMatch(OutputFormat::kMegatron,
              " [2026-08-22 15:22:22.123456] iteration       10/    1000 | consumed samples:     "
              "     320 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.000000E-04 | "
              "global batch size:    32 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: "
              "1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |",
              {.step = 10, .total = 1000, .loss = "7.123456E+00", .lr = "1.000000E-04"});
  ExpectMatch(OutputFormat::kMegatron,
              "Training epoch 0, iteration 9/99 | lr: 0.0001 | global_batch_size: 32 | "
              "global_step: 9 | reduced_train_loss: 2.346 | train_step_timing in s: 0.5012",
              {.step = 9, .total = 100, .loss = "2.346", .lr = "0.0001", .epoch = "0"});
  ExpectNoMatch("Validation: iteration 5/10");
}

// DeepSpeed at 38327e07f6cd39b63418f60cedd1651b0be3e7c3 (v0.16.4+6):
// deepspeed/runtime/engine.py _report_progress() through log_dist
// ("[Rank {}] {}"), deepspeed/utils/timer.py ThroughputTimer.stop(), the
// logger format of deepspeed/utils/logging.py.
TEST(MatchOutputLine, DeepSpeed) {
  ExpectMatch(OutputFormat::kDeepSpeed,
              "[2025-02-21 12:05:41,123] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, "
              "skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
              {.step = 10, .lr = "0.0001"});
  ExpectMatch(OutputFormat::kDeepSpeed,
              "[2025-02-21 12:05:41,123] [INFO] [timer.py:264:stop] epoch=0/micro_step=40/"
              "global_step=10, RunningAvgSamplesPerSec=123.4, CurrSamplesPerSec=120.1, "
              "MemAllocated=1.23GB, MaxMemAllocated=2.34GB",
              {.step = 10, .epoch = "0"});
}

// scripts/demo/train_ddp.py: print(f"step {step:3d} loss {loss.item():.5f}").
TEST(MatchOutputLine, Demo) {
  ExpectMatch(OutputFormat::kDemo, "step   0 loss 0.52341", {.step = 0, .loss = "0.52341"});
  ExpectMatch(OutputFormat::kDemo, "step 120 loss 0.00012", {.step = 120, .loss = "0.00012"});
}

TEST(MatchOutputLine, OtherLinesAreNotProgress) {
  ExpectNoMatch("");
  ExpectNoMatch("Validation DataLoader 0:  50%|#####     | 5/10 [00:00<00:00, 20.00it/s]");
  ExpectNoMatch("Map: 100%|##########| 1000/1000 [00:00<00:00, 9000.00 examples/s]");
  ExpectNoMatch("rank 0/2 (local rank 0, pid 12) starting");
  ExpectNoMatch("step 12 of the data pipeline");
  ExpectNoMatch("the global_step=12 was saved");
  ExpectNoMatch(std::string(4000, '9') + "%|");
  ExpectNoMatch("\x1b[31m\x1b[");
  ExpectNoMatch(" 10%|#| 99999999999999999999/5 [");
}

TEST(ParseOutputProgressSpec, NamesAndRegexes) {
  EXPECT_EQ(ParseOutputProgressSpec("auto")->format, OutputFormat::kAuto);
  EXPECT_EQ(ParseOutputProgressSpec("off")->format, OutputFormat::kOff);
  for (OutputFormat f : kBuiltInOutputFormats) {
    EXPECT_EQ(ParseOutputProgressSpec(OutputFormatName(f))->format, f);
  }
  absl::StatusOr<OutputProgressSpec> re =
      ParseOutputProgressSpec(R"(it (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>\S+))");
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_EQ(re->format, OutputFormat::kRegex);

  for (const std::string& bad :
       {std::string(""), std::string("it (\\d+"), std::string("(?P<loss>\\S+)"),
        std::string("(?P<step>\\d+) (?P<speed>\\d+)"), std::string(2000, 'a') + "(?P<step>x)"}) {
    absl::StatusOr<OutputProgressSpec> s = ParseOutputProgressSpec(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("--progress-from-output"));
  }
  EXPECT_THAT(ParseOutputProgressSpec("(?P<step>\\d+) (?P<speed>\\d+)").status().message(),
              HasSubstr("speed"));
}

class OutputProgressTest : public ::testing::Test {
 protected:
  std::unique_ptr<OutputProgress> Make(absl::string_view value, int ranks = 2) {
    absl::StatusOr<OutputProgressSpec> spec = ParseOutputProgressSpec(value);
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::unique_ptr<OutputProgress>> p = OutputProgress::Create(*spec, &clock_);
    EXPECT_TRUE(p.ok()) << p.status();
    (*p)->Reset(ranks);
    return *std::move(p);
  }
  // The latest line of each worker that changed, "rank: line".
  static std::vector<std::string> Lines(OutputProgress* p) {
    std::vector<std::string> out;
    for (const ProgressUpdate& u : p->Collect()) {
      out.push_back(absl::StrCat(u.local_rank, ": ", u.line ? u.line->Text() : "(touch)"));
    }
    return out;
  }
  SimulatedClock clock_;
};

TEST_F(OutputProgressTest, TqdmRedrawsAndLogsAcrossReads) {
  auto p = Make("auto");
  // A tqdm bar redraws after '\r'; a read may end anywhere in a line.
  EXPECT_TRUE(p->OnOutput(0, 1, "\r  0%|          | 0/100 [00:00<?, ?it/s]\r  1%|      "));
  EXPECT_FALSE(p->OnOutput(0, 1, "    | 1/100 [00:00<00:10,  9.90it/s]\r  2%|          | 2/10"));
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kHuggingFace);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=1 total=100"));
  // The bar now on screen (no '\r' after it yet) is read too, once whole.
  EXPECT_TRUE(p->OnOutput(0, 1, "0 [00:00<00:10,  9.90it/s]"));
  p->OnOutput(0, 0, "{'loss': 0.69, 'learning_rate': 5e-05, 'epoch': 0.02}\n");
  EXPECT_THAT(Lines(p.get()),
              ::testing::ElementsAre("0: step=2 total=100 loss=0.69 lr=5e-05 epoch=0.02"));
  p->OnOutput(0, 1, "\r");  // its redraw: read already
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  // An evaluation bar (another total): progress, but not the step.
  p->OnOutput(0, 1, "\r 30%|###       | 3/10 [00:00<00:01,  6.00it/s]\r");
  EXPECT_THAT(Lines(p.get()),
              ::testing::ElementsAre("0: step=2 total=100 loss=0.69 lr=5e-05 epoch=0.02"));
  EXPECT_EQ(p->stats().matches, 5u);
}

TEST_F(OutputProgressTest, HfEvaluationBeforeTrainingLeavesTheTrainingBarsSteps) {
  auto p = Make("auto");
  // trainer.evaluate() before trainer.train(): the evaluation's bar comes
  // first and completes; no training log was written (ProgressCallback
  // writes logs only while its training bar exists).
  p->OnOutput(0, 1,
              "\r  0%|          | 0/8 [00:00<?, ?it/s]\r100%|##########| 8/8 [00:01<00:00]\n");
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kHuggingFace);
  Lines(p.get());
  // The training bar: its steps are the worker's.
  p->OnOutput(0, 1,
              "\r  0%|          | 0/100 [00:00<?, ?it/s]\r  3%|3         | 3/100 [00:01<00:30]");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=3 total=100"));
  // Evaluations during and after training (a log came) stay evaluations,
  // also once the training bar completed.
  p->OnOutput(0, 1, "\r 50%|#####     | 4/8 [00:00<00:00]\r");
  p->OnOutput(0, 0, "{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n");
  p->OnOutput(0, 1, "\r100%|##########| 100/100 [00:30<00:00]\n");
  p->OnOutput(0, 0, "{'train_runtime': 30.0, 'epoch': 1.0}\n");
  p->OnOutput(0, 1, "\r 50%|#####     | 4/8 [00:00<00:00]\r");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=100 total=100 loss=0.5 lr=1e-05 "
                                                     "epoch=1.0"));
}

TEST_F(OutputProgressTest, OnlyABarsLengthIsReadBeforeItsEnd) {
  auto p = Make("demo", 1);
  // After a '\r', a line not ended yet is read as it is on screen, once
  // per growth, while it is as short as a bar; a longer one when it ends.
  p->OnOutput(0, 0, "\rstep 3 loss 0.5");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=3 loss=0.5"));
  const std::string long_line = "\rstep 4 loss 0.4 " + std::string(600, 'x');
  p->OnOutput(0, 0, long_line);
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  p->OnOutput(0, 0, "\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=4 loss=0.4"));
  EXPECT_EQ(p->stats().matches, 2u);
}

TEST_F(OutputProgressTest, AutoPicksPerWorkerAndKeepsIt) {
  auto p = Make("auto", 3);
  p->OnOutput(0, 0, "loading...\nstep   1 loss 0.5\n");
  p->OnOutput(1, 0,
              "[2025-02-21 12:05:41,123] [INFO] [logging.py:128:log_dist] [Rank 0] step=4, "
              "skipped=0, lr=[0.001], mom=[(0.9, 0.999)]\n");
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kDemo);
  EXPECT_EQ(p->FormatOf(1), OutputFormat::kDeepSpeed);
  EXPECT_EQ(p->FormatOf(2), OutputFormat::kAuto);
  // Once picked, another format's lines are not progress of this worker.
  p->OnOutput(0, 0, " iteration 9/10 | lm loss: 1.0 |\nstep   2 loss 0.4\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=2 loss=0.4", "1: step=4 lr=0.001"));
  p->Reset(3);
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kAuto);
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
}

TEST_F(OutputProgressTest, AutoLeavesAFalsePickForAFormatThatKeepsMatching) {
  auto p = Make("auto", 1);
  // A preprocessing loop's plain tqdm bar (no description) looks like the
  // Trainer's: auto picks hf, falsely, for a Megatron worker.
  p->OnOutput(0, 1, "100%|##########| 500/500 [00:01<00:00, 400.00it/s]\n");
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kHuggingFace);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=500 total=500"));
  // Two lines of another format: not yet (one stray line never switches).
  p->OnOutput(0, 0,
              " iteration        1/     100 | lm loss: 9.0E+00 |\nsome other line\n"
              " iteration        2/     100 | lm loss: 8.0E+00 |\n");
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kHuggingFace);
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  // The third in a row, with no line of the picked format between: the
  // worker prints Megatron's lines, and only they count from now on, with
  // nothing of the false pick's left in them.
  p->OnOutput(0, 0, " iteration        3/     100 | lm loss: 7.0E+00 |\n");
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kMegatron);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=3 total=100 loss=7.0E+00"));
  p->OnOutput(0, 1, "100%|##########| 600/600 [00:01<00:00, 400.00it/s]\n");
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
}

TEST_F(OutputProgressTest, AutoKeepsItsPickWhileItsFormatMatchesBetween) {
  auto p = Make("auto", 1);
  // Hugging Face Trainer with DeepSpeed: the bar redraws between the
  // engine's lines, which never take over.
  for (int step = 1; step <= 40; ++step) {
    p->OnOutput(0, 1, absl::StrCat("\r", step, "%|#   | ", step, "/100 [00:01<00:10, 9.0it/s]"));
    if (step % 10 == 0) {
      p->OnOutput(0, 0, absl::StrCat("[Rank 0] step=", step, ", skipped=0, lr=[0.001]\n"));
    }
  }
  EXPECT_EQ(p->FormatOf(0), OutputFormat::kHuggingFace);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=40 total=100"));
}

TEST_F(OutputProgressTest, NamedFormatReadsOnlyItsLines) {
  auto p = Make("megatron", 1);
  p->OnOutput(0, 0, "step   1 loss 0.5\n");
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  p->OnOutput(0, 0,
              " [x] iteration        3/      10 | learning rate: 1.0E-04 | lm loss: 2.5E+00 |\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=3 total=10 loss=2.5E+00 lr=1.0E-04"));
}

TEST_F(OutputProgressTest, RegexGroups) {
  auto p = Make(R"(it (?P<step>\d+)/(?P<total>\d+)(?: loss (?P<loss>\S+))?)", 1);
  p->OnOutput(0, 0, "it 7/70\nit 8/70 loss 1e-3\nit x/70 loss 5\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=8 total=70 loss=1e-3"));
  EXPECT_EQ(p->stats().matches, 2u);
}

TEST_F(OutputProgressTest, LongLinesAreDroppedAndCounted) {
  auto p = Make("demo", 1);
  // Over 4 KiB, in pieces: dropped up to its end, the next line is read.
  p->OnOutput(0, 0, "step 5 loss 1.0 " + std::string(3000, 'x'));
  p->OnOutput(0, 0, std::string(3000, 'x'));
  p->OnOutput(0, 0, std::string(3000, 'x') + "\nstep 6 loss 0.9\n");
  p->OnOutput(0, 0, "step 7 loss 0.8 " + std::string(5000, 'y') + "\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=6 loss=0.9"));
  EXPECT_EQ(p->stats().dropped_long, 2u);
  EXPECT_EQ(p->stats().matches, 1u);
  // A line of exactly the limit is read.
  std::string line = "step 8 loss 0.7 ";
  line.append(OutputProgress::kMaxLineBytes - line.size(), 'z');
  p->OnOutput(0, 0, line + "\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=8 loss=0.7"));
}

TEST_F(OutputProgressTest, MatchesOverTheRateAreDropped) {
  auto p = Make("demo", 2);
  std::string lines;
  for (int i = 1; i <= 250; ++i) absl::StrAppend(&lines, "step ", i, " loss 1\n");
  p->OnOutput(0, 0, lines);
  EXPECT_EQ(p->stats().matches, 200u);
  EXPECT_EQ(p->stats().dropped_rate, 50u);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=200 loss=1"));
  // Another worker's first match of the second counts, over the budget:
  // a chatty worker cannot make a quiet one look silent. Its second not.
  p->OnOutput(1, 0, "step 9 loss 2\nstep 10 loss 2\n");
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("1: step=9 loss=2"));
  EXPECT_EQ(p->stats().dropped_rate, 51u);
  clock_.Advance(absl::Seconds(1));
  p->OnOutput(0, 0, "step 251 loss 1\n");
  // Worker 1's dropped line is taken in the next second (below).
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=251 loss=1", "1: step=10 loss=2"));
}

TEST_F(OutputProgressTest, TheLastMatchOverTheRateIsTakenInTheNextSecond) {
  auto p = Make("auto", 1);
  // A burst, then nothing (the worker hangs, or saves a checkpoint): the
  // step it reached must not stay 50 behind until it prints again.
  std::string lines;
  for (int i = 1; i <= 250; ++i) absl::StrAppend(&lines, "step ", i, " loss ", i, "\n");
  p->OnOutput(0, 0, lines);
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=200 loss=200"));
  EXPECT_EQ(p->stats().dropped_rate, 50u);
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(Lines(p.get()), ::testing::ElementsAre("0: step=250 loss=250"));
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
  // Fields from different dropped lines are kept together (a Trainer's
  // loss from its log, its step from the bar).
  auto hf = Make("hf", 1);
  std::string burst;
  for (int i = 1; i <= 201; ++i) absl::StrAppend(&burst, " 1%|#   | ", i, "/1000 [00:01<00:10]\n");
  hf->OnOutput(0, 1, burst);
  hf->OnOutput(0, 0, "{'loss': 0.25, 'learning_rate': 1e-05, 'epoch': 0.2}\n");
  hf->OnOutput(0, 1, " 20%|#   | 202/1000 [00:01<00:10]\n");
  EXPECT_THAT(Lines(hf.get()), ::testing::ElementsAre("0: step=200 total=1000"));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Lines(hf.get()),
              ::testing::ElementsAre("0: step=202 total=1000 loss=0.25 lr=1e-05 epoch=0.2"));
}

TEST_F(OutputProgressTest, OffAndUnknownRanksReadNothing) {
  auto off = Make("off", 1);
  EXPECT_FALSE(off->OnOutput(0, 0, "step 1 loss 1\n"));
  EXPECT_THAT(Lines(off.get()), ::testing::IsEmpty());
  auto p = Make("auto", 1);
  EXPECT_FALSE(p->OnOutput(1, 0, "step 1 loss 1\n"));
  EXPECT_FALSE(p->OnOutput(-1, 0, "step 1 loss 1\n"));
  EXPECT_FALSE(p->OnOutput(0, 2, "step 1 loss 1\n"));
  EXPECT_THAT(Lines(p.get()), ::testing::IsEmpty());
}

}  // namespace
}  // namespace trainlet::agent

// HangWatch on its own: declaring a silent worker hung, waiting for its
// stacks, the evidence, and the verdict (or judging here), on a simulated
// clock.
#include "agent/hang_watch.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kHangTimeout = absl::Seconds(10);

// What the actions asked for, by kind.
struct Asked {
  std::vector<int> tracebacks;  // RequestTraceback
  std::vector<int> checks;      // CheckTraceback
  std::vector<CollectHangEvidence> collects;
  std::vector<v1::ReportRequest> reports;
  std::vector<HangJudged> judged;
};
Asked Sort(const std::vector<RoundAction>& actions) {
  Asked a;
  for (const RoundAction& x : actions) {
    if (const auto* r = std::get_if<RequestTraceback>(&x)) a.tracebacks.push_back(r->local_rank);
    if (const auto* c = std::get_if<CheckTraceback>(&x)) a.checks.push_back(c->local_rank);
    if (const auto* e = std::get_if<CollectHangEvidence>(&x)) a.collects.push_back(*e);
    if (const auto* s = std::get_if<SendReport>(&x)) a.reports.push_back(s->request);
    if (const auto* j = std::get_if<HangJudged>(&x)) a.judged.push_back(*j);
  }
  return a;
}

class HangWatchTest : public ::testing::Test {
 protected:
  HangWatchTest() : watch_(Options(kHangTimeout), &clock_) {
    watch_.BeginRound(/*round=*/3, /*first_global_rank=*/4, /*workers=*/2);
  }
  static HangWatchOptions Options(absl::Duration hang_timeout) {
    HangWatchOptions o;
    o.me.set_node_id("n1");
    o.me.set_incarnation(7);
    o.job_id = "job";
    o.hang_timeout = hang_timeout;
    return o;
  }
  HangWatch::TickResult Tick(std::vector<RoundAction>* out) {
    return watch_.Tick(clock_.Now(), out);
  }
  // Worker 0 reported, then stayed silent for the hang timeout.
  void Declare(std::vector<RoundAction>* out) {
    watch_.OnProgress(0, "step=7");
    watch_.OnProgress(1, "step=8");
    clock_.Advance(absl::Seconds(1));
    watch_.OnProgress(1, "step=9");
    clock_.Advance(kHangTimeout - absl::Seconds(1));
    ASSERT_TRUE(Tick(out).declared);
  }

  SimulatedClock clock_;
  HangWatch watch_;
};

TEST_F(HangWatchTest, SilentWorker_IsDeclaredHungAtTheTimeout) {
  EXPECT_EQ(*watch_.OnProgress(0, "step=7"), "step=7");
  EXPECT_EQ(*watch_.OnProgress(0, ""), "step=7") << "a touch keeps the line";
  EXPECT_EQ(watch_.NextDeadline(), clock_.Now() + kHangTimeout);
  std::vector<RoundAction> out;
  clock_.Advance(kHangTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(Tick(&out).declared);
  EXPECT_TRUE(out.empty());
  clock_.Advance(absl::Milliseconds(1));
  HangWatch::TickResult r = Tick(&out);
  EXPECT_TRUE(r.declared);
  EXPECT_FALSE(r.judged_here.has_value());
  Asked a = Sort(out);
  ASSERT_EQ(a.reports.size(), 1u);
  const v1::ReportRequest& report = a.reports[0];
  EXPECT_EQ(report.round(), 3u);
  EXPECT_EQ(report.state(), v1::ReportRequest::RUNNING);
  EXPECT_EQ(report.member().node_id(), "n1");
  EXPECT_TRUE(report.hang().declared());
  EXPECT_EQ(report.hang().declared_local_rank(), 0);
  EXPECT_EQ(report.hang().silence_ms(), 10000);
  // Every running worker's stacks, the silent one's and its peers'.
  EXPECT_THAT(a.tracebacks, ElementsAre(0, 1));
  EXPECT_EQ(watch_.awaited_report(), nullptr);
}

TEST_F(HangWatchTest, Progress_ResetsTheTimer_AndSilentFromTheStartIsNotWatched) {
  std::vector<RoundAction> out;
  EXPECT_EQ(watch_.NextDeadline(), absl::InfiniteFuture()) << "nobody reported yet";
  clock_.Advance(kHangTimeout * 3);
  EXPECT_FALSE(Tick(&out).declared);
  watch_.OnProgress(1, "step=1");
  clock_.Advance(kHangTimeout - absl::Seconds(1));
  watch_.OnProgress(1, "step=2");
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(Tick(&out).declared);
  EXPECT_EQ(watch_.NextDeadline(), clock_.Now() + kHangTimeout - absl::Seconds(1));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(watch_.OnProgress(2, "step=1"), nullptr) << "not a local rank of this round";
}

TEST_F(HangWatchTest, NoTimeout_NothingIsDeclared) {
  HangWatch off(Options(absl::ZeroDuration()), &clock_);
  off.BeginRound(1, 0, 1);
  off.OnProgress(0, "step=1");
  clock_.Advance(absl::Hours(1));
  std::vector<RoundAction> out;
  EXPECT_FALSE(off.Tick(clock_.Now(), &out).declared);
  EXPECT_EQ(off.NextDeadline(), absl::InfiniteFuture());
}

TEST_F(HangWatchTest, Stacks_AreAwaitedUntilTheTracebackFileGrewAndWentQuiet) {
  std::vector<RoundAction> out;
  Declare(&out);
  out.clear();
  watch_.OnTracebackRequested(TracebackRequested{0, /*sent=*/true, /*bytes=*/-1}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, /*sent=*/false}, &out);  // not opted in
  EXPECT_TRUE(out.empty());
  // Polled every traceback_poll (20 ms); written at 40 ms, still at 140 ms.
  int64_t bytes = -1;
  absl::Duration since_signal;
  while (Sort(out).collects.empty()) {
    ASSERT_LT(since_signal, absl::Seconds(1));
    const absl::Time next = watch_.NextDeadline();
    since_signal += next - clock_.Now();
    clock_.Advance(next - clock_.Now());
    out.clear();
    Tick(&out);
    ASSERT_THAT(Sort(out).checks, ElementsAre(0));
    if (since_signal >= absl::Milliseconds(40)) bytes = 900;
    out.clear();
    watch_.OnTracebackSize(TracebackSize{0, bytes}, &out);
  }
  EXPECT_EQ(since_signal, absl::Milliseconds(140)) << "written at 40 ms, quiet for 100 ms";
  const Asked asked = Sort(out);
  const CollectHangEvidence& collect = asked.collects[0];
  ASSERT_EQ(collect.evidence.size(), 2u);
  EXPECT_TRUE(collect.evidence[0].declared);
  EXPECT_EQ(collect.evidence[0].global_rank, 4);
  EXPECT_EQ(collect.evidence[0].last_progress, "step=7");
  EXPECT_EQ(collect.evidence[0].silence, kHangTimeout);
  EXPECT_FALSE(collect.evidence[1].declared);
  EXPECT_EQ(collect.evidence[1].global_rank, 5);
  EXPECT_EQ(collect.evidence[1].last_progress, "step=9");
  EXPECT_THAT(collect.evidence[1].why, HasSubstr("this node declared worker rank 4 hung"));
}

TEST_F(HangWatchTest, Stacks_AreAwaitedAtMostTracebackWait) {
  std::vector<RoundAction> out;
  Declare(&out);
  const absl::Time declared = clock_.Now();
  out.clear();
  watch_.OnTracebackRequested(TracebackRequested{0, true, 100}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, true, -1}, &out);
  while (Sort(out).collects.empty()) {
    clock_.Advance(watch_.NextDeadline() - clock_.Now());
    out.clear();
    Tick(&out);
    for (int rank : Sort(out).checks) {
      // The file never grows past what it held before the signal.
      watch_.OnTracebackSize(TracebackSize{rank, rank == 0 ? 100 : -1}, &out);
    }
  }
  EXPECT_EQ(clock_.Now() - declared, absl::Seconds(2));
}

TEST_F(HangWatchTest, AWorkerThatExits_HasNoStacksToWaitFor) {
  std::vector<RoundAction> out;
  Declare(&out);
  out.clear();
  watch_.OnTracebackRequested(TracebackRequested{0, false}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, true, -1}, &out);
  EXPECT_TRUE(Sort(out).collects.empty());
  watch_.OnWorkerExited(1, &out);
  Asked a = Sort(out);
  ASSERT_EQ(a.collects.size(), 1u);
  EXPECT_FALSE(a.collects[0].evidence[0].exited);
  EXPECT_TRUE(a.collects[0].evidence[1].exited);
}

TEST_F(HangWatchTest, Evidence_IsReportedAndRepeated_ThenJudgedHereWithoutAVerdict) {
  std::vector<RoundAction> out;
  Declare(&out);
  watch_.OnTracebackRequested(TracebackRequested{0, false}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, false}, &out);
  ASSERT_EQ(Sort(out).collects.size(), 1u);
  out.clear();
  HangEvidenceCollected collected;
  v1::WorkerEvidence* w0 = collected.report.add_workers();
  w0->set_local_rank(0);
  w0->set_stack(v1::WorkerEvidence::IN_COLLECTIVE);
  w0->set_step(7);
  v1::WorkerEvidence* w1 = collected.report.add_workers();
  w1->set_local_rank(1);
  w1->set_stack(v1::WorkerEvidence::NOT_IN_COLLECTIVE);
  w1->set_where("train.py:41 in main");
  w1->set_step(9);
  watch_.OnEvidenceCollected(collected, &out);
  Asked a = Sort(out);
  ASSERT_EQ(a.reports.size(), 1u);
  EXPECT_TRUE(a.reports[0].hang().declared());
  EXPECT_TRUE(a.reports[0].hang().collected());
  EXPECT_EQ(a.reports[0].hang().workers_size(), 2);
  ASSERT_NE(watch_.awaited_report(), nullptr);
  EXPECT_TRUE(watch_.awaited_report()->collected());
  // No verdict within hang_verdict_wait (10 s): this node judges its own
  // workers, by the job's rules (the one not in a collective).
  EXPECT_EQ(watch_.NextDeadline(), clock_.Now() + absl::Seconds(10));
  clock_.Advance(absl::Seconds(10));
  out.clear();
  HangWatch::TickResult r = Tick(&out);
  ASSERT_TRUE(r.judged_here.has_value());
  EXPECT_EQ(r.judged_here->suspect_local_rank, 1);
  EXPECT_THAT(r.judged_here->summary, HasSubstr("suspect rank 5 on n1"));
  a = Sort(out);
  ASSERT_EQ(a.judged.size(), 1u);
  EXPECT_EQ(a.judged[0].suspect_local_rank, 1);
  EXPECT_EQ(watch_.awaited_report(), nullptr);
  EXPECT_EQ(watch_.NextDeadline(), absl::InfiniteFuture()) << "once a round";
}

TEST_F(HangWatchTest, AskedByTheCoordinator_CollectsOnce_AndLeavesJudgingToTheDeclarer) {
  watch_.OnProgress(0, "step=7");
  std::vector<RoundAction> out;
  v1::CollectEvidence ask;
  ask.set_declared_by_node("n2");
  ask.set_declared_rank(0);
  watch_.OnCollectEvidence(ask, &out);
  EXPECT_THAT(Sort(out).tracebacks, ElementsAre(0, 1));
  out.clear();
  watch_.OnCollectEvidence(ask, &out);
  EXPECT_TRUE(out.empty()) << "already under way";
  watch_.OnTracebackRequested(TracebackRequested{0, false}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, false}, &out);
  Asked a = Sort(out);
  ASSERT_EQ(a.collects.size(), 1u);
  EXPECT_THAT(a.collects[0].evidence[0].why, HasSubstr("node n2 declared worker rank 0 hung"));
  EXPECT_EQ(a.collects[0].evidence[1].silence, absl::InfiniteDuration()) << "never reported";
  out.clear();
  watch_.OnEvidenceCollected(HangEvidenceCollected{}, &out);
  ASSERT_EQ(Sort(out).reports.size(), 1u);
  EXPECT_FALSE(Sort(out).reports[0].hang().declared());
  clock_.Advance(absl::Seconds(10));
  out.clear();
  EXPECT_FALSE(Tick(&out).judged_here.has_value());
  EXPECT_TRUE(out.empty());
}

TEST_F(HangWatchTest, Verdict_NamingAWorkerOfThisNode_IsJudgedHere) {
  std::vector<RoundAction> out;
  Declare(&out);
  watch_.OnTracebackRequested(TracebackRequested{0, false}, &out);
  watch_.OnTracebackRequested(TracebackRequested{1, false}, &out);
  watch_.OnEvidenceCollected(HangEvidenceCollected{}, &out);
  out.clear();
  v1::HangVerdict verdict;
  verdict.set_suspect_node_id("n1");
  verdict.set_suspect_local_rank(1);
  verdict.set_summary("suspect rank 5 on n1 (not in a collective: in train.py:41 in main)");
  std::string note;
  std::optional<HangJudgement> judged = watch_.TakeVerdict(verdict, &note, &out);
  ASSERT_TRUE(judged.has_value());
  EXPECT_EQ(judged->suspect_local_rank, 1);
  EXPECT_EQ(judged->summary, verdict.summary());
  EXPECT_THAT(note, HasSubstr("'hang evidence:' lines"));
  ASSERT_EQ(Sort(out).judged.size(), 1u);
  EXPECT_EQ(watch_.NextDeadline(), absl::InfiniteFuture());
}

TEST_F(HangWatchTest, Verdict_NamingAnotherNode_OrNone_JudgesNothingHere) {
  std::vector<RoundAction> out;
  v1::HangVerdict other;
  other.set_suspect_node_id("n2");
  other.set_suspect_local_rank(1);
  std::string note;
  EXPECT_FALSE(watch_.TakeVerdict(other, &note, &out).has_value());
  EXPECT_TRUE(note.empty()) << "this node took no evidence";
  EXPECT_FALSE(watch_.TakeVerdict(v1::HangVerdict{}, &note, &out).has_value());
  EXPECT_TRUE(out.empty());
  // Judged: nothing more is declared this round.
  watch_.OnProgress(0, "step=1");
  clock_.Advance(kHangTimeout);
  EXPECT_FALSE(Tick(&out).declared);
}

TEST_F(HangWatchTest, BeginRound_ForgetsThePreviousRound) {
  std::vector<RoundAction> out;
  Declare(&out);
  watch_.BeginRound(4, 0, 1);
  EXPECT_EQ(watch_.NextDeadline(), absl::InfiniteFuture());
  EXPECT_EQ(watch_.OnProgress(1, "step=1"), nullptr) << "one worker now";
  watch_.OnProgress(0, "step=1");
  clock_.Advance(kHangTimeout);
  out.clear();
  EXPECT_TRUE(Tick(&out).declared) << "a new round watches again";
  EXPECT_EQ(Sort(out).reports[0].round(), 4u);
}

}  // namespace
}  // namespace trainlet::agent

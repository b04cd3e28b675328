// The suspect of a hang, from the nodes' evidence (coordinator_hang.h).
#include "rendezvous/coordinator_hang.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

constexpr auto kIn = v1::WorkerEvidence::IN_COLLECTIVE;
constexpr auto kOut = v1::WorkerEvidence::NOT_IN_COLLECTIVE;
constexpr auto kUnknown = v1::WorkerEvidence::STACK_UNKNOWN;

HangCandidate C(const std::string& node, int rank, v1::WorkerEvidence::Stack stack,
                int64_t age_ms = 10000, int64_t step = 6, const std::string& where = "") {
  HangCandidate c;
  c.node_id = node;
  c.rank = rank;
  c.local_rank = rank % 2;
  c.stack = stack;
  c.where = where;
  c.progress_age_ms = age_ms;
  c.step = step;
  return c;
}

TEST(ChooseHangSuspect, TheRankNotInACollective_EvenWithNewerProgress) {
  // Ranks 0, 1 and 3 wait in all_reduce for rank 2, which sleeps; rank 0's
  // progress is the oldest and its step the lowest: the stack decides.
  const std::vector<HangCandidate> c = {
      C("n0", 0, kIn, 15000, 5, "all_reduce (distributed_c10d.py:2050) from train.py:30 in step"),
      C("n0", 1, kIn), C("n1", 2, kOut, 9000, 6, "train.py:41 in main"), C("n1", 3, kUnknown)};
  const std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_node_id(), "n1");
  EXPECT_EQ(v->suspect_rank(), 2);
  EXPECT_EQ(v->suspect_local_rank(), 0);
  EXPECT_EQ(v->summary(), "suspect rank 2 on n1 (not in a collective: train.py:41 in main)");
}

TEST(ChooseHangSuspect, SeveralNotInACollective_TheOldestProgressOfThem) {
  const std::vector<HangCandidate> c = {C("n0", 0, kIn, 30000), C("n0", 1, kOut, 9000, 6, "a.py:1"),
                                        C("n1", 2, kOut, 12000, 6, "b.py:2")};
  const std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_rank(), 2);
  EXPECT_EQ(v->summary(), "suspect rank 2 on n1 (not in a collective (2 ranks are not): b.py:2)");
}

TEST(ChooseHangSuspect, NoStackSaysMore_TheOldestProgress_AgesWithinASecondAreEqual) {
  // Rank 3 stopped 4 s before the others; ranks 0-2 within 0.9 s of each other.
  std::vector<HangCandidate> c = {C("n0", 0, kIn, 10000), C("n0", 1, kUnknown, 10900),
                                  C("n1", 2, kUnknown, 10100), C("n1", 3, kUnknown, 14000, 7)};
  std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_rank(), 3);
  EXPECT_THAT(v->summary(), HasSubstr("the oldest progress: 14s ago at step 7"));

  // Without rank 3: equal ages (within the tolerance), so the lowest step.
  c.pop_back();
  c[2].step = 4;
  v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_rank(), 2);
  EXPECT_THAT(v->summary(), HasSubstr("the lowest step: 4"));

  // Nothing tells them apart: the lowest rank, and the summary says so.
  c[2].step = 6;
  v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_rank(), 0);
  EXPECT_THAT(v->summary(), HasSubstr("nothing else told the ranks apart"));
}

TEST(ChooseHangSuspect, TheSummarySaysWhenNoRankHadAStack_OrOnlyOneHadEvidence) {
  // No worker opted in to stacks: "no stack outside a collective" would
  // read as if every stack were in one.
  std::vector<HangCandidate> c = {C("n0", 0, kUnknown, 10000), C("n1", 1, kUnknown, 14000)};
  std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->summary(),
            "suspect rank 1 on n1 (no Python stack; the oldest progress: 14s ago "
            "at step 6)");
  // One worker, the one declared (a single-node job of one worker): nothing
  // to tell it apart from, and the summary says what is known of it.
  v = ChooseHangSuspect({C("n0", 0, kUnknown)});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->summary(), "suspect rank 0 on n0 (the only rank with evidence; no Python stack)");
  v = ChooseHangSuspect({C("n0", 0, kIn, 10000, 6, "barrier (distributed_c10d.py:4159)")});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->summary(),
            "suspect rank 0 on n0 (the only rank with evidence; in a collective: "
            "barrier (distributed_c10d.py:4159))");
}

TEST(ChooseHangSuspect, WorkersThatNeverReportedAreNotTheOldest_AndNoneIsNoVerdict) {
  const std::vector<HangCandidate> c = {C("n0", 0, kUnknown, -1, -1), C("n0", 1, kUnknown, 5000)};
  const std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->suspect_rank(), 1);
  EXPECT_FALSE(ChooseHangSuspect({}).has_value());
}

TEST(ChooseHangSuspect, TheSummaryIsBoundedAndEscaped) {
  const std::vector<HangCandidate> c = {
      C("n\nforged", 0, kOut, 1000, 1, std::string(600, 'w')),
  };
  const std::optional<v1::HangVerdict> v = ChooseHangSuspect(c);
  ASSERT_TRUE(v.has_value());
  EXPECT_LE(v->summary().size(), kMaxHangSummaryLength);
  EXPECT_THAT(v->summary(), ::testing::StartsWith("suspect rank 0 on n\\nforged ("));
  EXPECT_THAT(v->summary(), ::testing::EndsWith("...)"));
}

TEST(AddHangCandidates, GlobalRanksFromTheNode_ExitedWorkersLeftOut) {
  v1::HangReport r;
  r.set_collected(true);
  for (int l : {0, 1, 2}) {
    v1::WorkerEvidence* w = r.add_workers();
    w->set_local_rank(l);
    w->set_stack(kIn);
    w->set_exited(l == 1);
  }
  std::vector<HangCandidate> out;
  AddHangCandidates(r, "n4", 12, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 12);
  EXPECT_EQ(out[1].rank, 14);
  EXPECT_EQ(out[1].local_rank, 2);
  EXPECT_EQ(out[1].node_id, "n4");
}

TEST(ValidateHangReport, EveryFieldIsBounded) {
  auto valid = [] {
    v1::HangReport r;
    r.set_declared(true);
    r.set_declared_local_rank(1);
    r.set_silence_ms(10000);
    r.set_collected(true);
    for (int l : {0, 1}) {
      v1::WorkerEvidence* w = r.add_workers();
      w->set_local_rank(l);
      w->set_where("train.py:41 in main");
      w->set_step(6);
      w->set_progress_age_ms(-1);
    }
    return r;
  };
  EXPECT_TRUE(ValidateHangReport(valid(), 2).ok());
  struct Case {
    const char* field;
    std::function<void(v1::HangReport*)> spoil;
  };
  const std::vector<Case> cases = {
      {"declared_local_rank", [](v1::HangReport* r) { r->set_declared_local_rank(2); }},
      {"silence_ms", [](v1::HangReport* r) { r->set_silence_ms(-5); }},
      {"hang.workers:", [](v1::HangReport* r) { r->add_workers()->set_local_rank(0); }},
      {"local_rank", [](v1::HangReport* r) { r->mutable_workers(1)->set_local_rank(0); }},
      {"local_rank", [](v1::HangReport* r) { r->mutable_workers(1)->set_local_rank(-1); }},
      {"stack",
       [](v1::HangReport* r) {
         r->mutable_workers(0)->set_stack(static_cast<v1::WorkerEvidence::Stack>(9));
       }},
      {"where", [](v1::HangReport* r) { r->mutable_workers(0)->set_where(std::string(201, 'w')); }},
      {"where", [](v1::HangReport* r) { r->mutable_workers(0)->set_where("a\nb"); }},
      {"step", [](v1::HangReport* r) { r->mutable_workers(0)->set_step(-2); }},
      {"progress_age_ms",
       [](v1::HangReport* r) { r->mutable_workers(0)->set_progress_age_ms(-7); }},
  };
  for (const Case& c : cases) {
    v1::HangReport r = valid();
    c.spoil(&r);
    const absl::Status s = ValidateHangReport(r, 2);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace trainlet::rendezvous

#include "controller/history_store.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/testing/temp_root.h"
#include "controller/testing/core_reports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

HistoryRecord Record(const std::string& job, v1::HistoryEntry::Kind kind, uint64_t round,
                     absl::Time at, const std::string& cause = "") {
  HistoryRecord r;
  r.job_id = job;
  r.entry.set_kind(kind);
  r.entry.set_round(round);
  r.entry.set_at_unix_ms(absl::ToUnixMillis(at));
  r.entry.set_node_id("pod-0");
  r.entry.set_cause(cause);
  return r;
}

absl::Status AppendEntries(HistoryStore& store, std::vector<HistoryRecord> entries) {
  HistoryBatch batch;
  batch.entries = std::move(entries);
  return store.Append(batch);
}

class HistoryStoreTest : public ::testing::Test {
 protected:
  HistoryStoreOptions Options(int retention = 1000) const {
    HistoryStoreOptions o;
    o.path = root_.path() + "/history.db";
    o.max_entries_per_job = retention;
    return o;
  }
  // A controller started afresh on the database: its store, and its core
  // with what the store loaded put back (null where opening failed).
  struct Restarted {
    std::unique_ptr<HistoryStore> store;
    std::unique_ptr<ControllerCore> core;
  };
  Restarted RestartController() {
    Restarted r;
    auto store = HistoryStore::Open(Options(), &clock_);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return r;
    r.store = std::move(*store);
    auto loaded = r.store->Load(ControllerOptions().max_jobs, kEntriesRestoredPerJob);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return r;
    r.core = std::make_unique<ControllerCore>(ControllerOptions{}, &clock_, r.store.get());
    r.core->Restore(*loaded);
    return r;
  }
  trainlet::testing::TempRoot root_;
  SimulatedClock clock_{absl::FromUnixSeconds(1800000000)};
};

TEST_F(HistoryStoreTest, Reopen_KeepsEveryEntryWithItsFields) {
  {
    auto store = HistoryStore::Open(Options(), &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    HistoryRecord hang = Record("job", v1::HistoryEntry::HANG, 2, clock_.Now(), "no progress 5m");
    hang.entry.set_evidence("thread 7: futex_wait\n\xc3\xa9");
    hang.entry.set_verdict("hung");
    ASSERT_TRUE(AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now()),
                                        Record("job", v1::HistoryEntry::RESTART, 2, clock_.Now(),
                                               "worker 0 killed by signal 9"),
                                        hang})
                    .ok());
    ASSERT_TRUE(
        AppendEntries(**store, {Record("other", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
  }
  auto store = HistoryStore::Open(Options(), &clock_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->Load(100, 100);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_THAT(loaded->entries, SizeIs(4));
  EXPECT_EQ(loaded->entries[1].entry.kind(), v1::HistoryEntry::RESTART);
  EXPECT_EQ(loaded->entries[1].entry.cause(), "worker 0 killed by signal 9");
  EXPECT_EQ(loaded->entries[2].entry.evidence(), "thread 7: futex_wait\n\xc3\xa9");
  EXPECT_EQ(loaded->entries[2].entry.verdict(), "hung");
  EXPECT_EQ(loaded->entries[2].entry.round(), 2u);
  EXPECT_EQ(loaded->entries[2].entry.at_unix_ms(), absl::ToUnixMillis(clock_.Now()));
  EXPECT_EQ(loaded->entries[3].job_id, "other");
}

TEST_F(HistoryStoreTest, Retention_KeepsTheNewestEntriesPerJob) {
  auto store = HistoryStore::Open(Options(/*retention=*/3), &clock_);
  ASSERT_TRUE(store.ok()) << store.status();
  for (uint64_t round = 1; round <= 5; ++round) {
    ASSERT_TRUE(
        AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, round, clock_.Now())}).ok());
  }
  ASSERT_TRUE(AppendEntries(**store, {Record("b", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
  EXPECT_EQ(*(*store)->Count(), 4);
  auto loaded = (*store)->Load(100, 100);
  ASSERT_TRUE(loaded.ok());
  ASSERT_THAT(loaded->entries, SizeIs(4));
  EXPECT_EQ(loaded->entries[0].entry.round(), 3u);
  EXPECT_EQ(loaded->entries[2].entry.round(), 5u);
}

TEST_F(HistoryStoreTest, Load_LimitsEachJobToTheNewest) {
  auto store = HistoryStore::Open(Options(), &clock_);
  ASSERT_TRUE(store.ok());
  std::vector<HistoryRecord> records;
  for (uint64_t round = 1; round <= 10; ++round) {
    records.push_back(Record("job", v1::HistoryEntry::ROUND, round, clock_.Now()));
  }
  ASSERT_TRUE(AppendEntries(**store, records).ok());
  auto loaded = (*store)->Load(100, 2);
  ASSERT_TRUE(loaded.ok());
  ASSERT_THAT(loaded->entries, SizeIs(2));
  EXPECT_EQ(loaded->entries[0].entry.round(), 9u);
  EXPECT_EQ(loaded->entries[1].entry.round(), 10u);
}

TEST_F(HistoryStoreTest, MaxAge_DropsOldEntriesAtAppendAndAtOpen) {
  HistoryStoreOptions o = Options();
  o.max_age = absl::Hours(1);
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(
        AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
    clock_.Advance(absl::Minutes(50));
    ASSERT_TRUE(
        AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 2, clock_.Now())}).ok());
    clock_.Advance(absl::Minutes(20));
    ASSERT_TRUE(
        AppendEntries(**store, {Record("b", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
    EXPECT_EQ(*(*store)->Count(), 2);
  }
  clock_.Advance(absl::Minutes(45));
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->Count(), 1);
}

TEST_F(HistoryStoreTest, Open_UnwritableDirectory_NamesThePath) {
  HistoryStoreOptions o;
  o.path = root_.path() + "/missing/dir/history.db";
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(o.path));
}

TEST_F(HistoryStoreTest, Open_NotADatabase_IsDamaged) {
  HistoryStoreOptions o;
  o.path = root_.Write("junk.db", std::string(4096, 'x'));
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("junk.db"));
}

TEST_F(HistoryStoreTest, CoreRestartedOnTheStore_KeepsItsHistory) {
  v1::HealthReport r;
  r.set_job_id("job");
  r.set_node_id("pod-0");
  r.set_incarnation(1);
  r.set_sequence(1);
  r.set_round(1);
  {
    auto store = HistoryStore::Open(Options(), &clock_);
    ASSERT_TRUE(store.ok());
    ControllerCore core({}, &clock_, store->get());
    ASSERT_TRUE(core.Report(r).ok());
    r.set_sequence(2);
    r.set_round(2);
    r.set_last_failure("worker 1 exited with code 3");
    ASSERT_TRUE(core.Report(r).ok());
  }
  auto store = HistoryStore::Open(Options(), &clock_);
  ASSERT_TRUE(store.ok());
  ControllerCore core({}, &clock_, store->get());
  auto loaded = (*store)->Load(ControllerOptions().max_jobs, kEntriesRestoredPerJob);
  ASSERT_TRUE(loaded.ok());
  core.Restore(*loaded);
  auto status = core.GetStatus("job");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->summary().restarts(), 1);
  ASSERT_EQ(status->history_size(), 3);
  EXPECT_EQ(status->history(1).cause(), "worker 1 exited with code 3");
}

// ---- Schema 2: job summaries, evidence on demand, bounds, damage, modes.

TEST_F(HistoryStoreTest, ControllerRestart_KeepsVerdictsFailuresStepsAndTimes) {
  using testing::AddWorker;
  using testing::MakeReport;
  using testing::SetProgress;
  int64_t started = 0, ended = 0;
  v1::Goodput ok_goodput;
  v1::RestartTimes ok_restart;
  {
    auto store = HistoryStore::Open(Options(), &clock_);
    ASSERT_TRUE(store.ok());
    ControllerCore core({}, &clock_, store->get());
    // "ok" runs two rounds (node-b's rank 2 fails once) and succeeds at
    // step 500; "bad" fails.
    v1::HealthReport a = MakeReport("ok", "node-a", 1, 1, 1);
    a.set_command("python train.py");
    SetProgress(&a, 100);
    started = absl::ToUnixMillis(clock_.Now());
    ASSERT_TRUE(core.Report(a).ok());
    v1::HealthReport b = MakeReport("ok", "node-b", 2, 1, 1);
    ASSERT_TRUE(core.Report(b).ok());
    clock_.Advance(absl::Seconds(30));
    b = MakeReport("ok", "node-b", 2, 2, 1);
    b.set_state(v1::HealthReport::STOPPING);
    AddWorker(&b, 0, 2, v1::WorkerHealth::FAILED, 3);
    ASSERT_TRUE(core.Report(b).ok());
    clock_.Advance(absl::Seconds(1));
    a = MakeReport("ok", "node-a", 1, 2, 2);
    a.set_last_failure("rank 2 on node-b exited with code 3");
    ASSERT_TRUE(core.Report(a).ok());
    clock_.Advance(absl::Minutes(5));
    for (auto [node, inc] : {std::pair<const char*, int>{"node-a", 1}, {"node-b", 2}}) {
      v1::HealthReport done = MakeReport("ok", node, inc, 5, 2);
      done.set_state(v1::HealthReport::DONE);
      done.set_exit_code(0);
      SetProgress(&done, 500);
      ASSERT_TRUE(core.Report(done).ok());
    }
    ended = absl::ToUnixMillis(clock_.Now());
    v1::HealthReport bad = MakeReport("bad", "node-c", 3, 1, 1);
    ASSERT_TRUE(core.Report(bad).ok());
    bad = MakeReport("bad", "node-c", 3, 2, 1);
    bad.set_state(v1::HealthReport::DONE);
    bad.set_exit_code(3);
    AddWorker(&bad, 0, 0, v1::WorkerHealth::FAILED, 3);
    ASSERT_TRUE(core.Report(bad).ok());
    core.Flush();
    auto before = core.GetStatus("ok");
    ASSERT_TRUE(before.ok());
    ok_goodput = before->summary().goodput();
    ok_restart = before->rounds(1).restart();
  }
  clock_.Advance(absl::Hours(1));
  Restarted restarted = RestartController();
  ASSERT_NE(restarted.core, nullptr);
  ControllerCore& core = *restarted.core;

  auto ok = core.GetStatus("ok");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->summary().state(), v1::JobSummary::SUCCEEDED);
  EXPECT_EQ(ok->summary().restarts(), 1);
  EXPECT_EQ(ok->summary().failures(), 1);
  EXPECT_EQ(ok->summary().progress_step(), 500);
  EXPECT_EQ(ok->summary().started_unix_ms(), started);
  EXPECT_EQ(ok->summary().ended_unix_ms(), ended);
  EXPECT_EQ(ok->summary().command(), "python train.py");
  EXPECT_EQ(ok->summary().root_cause().node_id(), "node-b");
  EXPECT_EQ(ok->summary().root_cause().rank(), 2);
  EXPECT_TRUE(ok->summary().restored());
  ASSERT_EQ(ok->rounds_size(), 2);
  EXPECT_EQ(ok->rounds(0).ended_by().exit_code(), 3);
  EXPECT_THAT(ok->rounds(1).restart_cause(), HasSubstr("exited with code 3"));
  // Its goodput and its restart's cost, as they were (docs/goodput.md).
  EXPECT_EQ(ok->summary().goodput().phase(), v1::Goodput::ENDED);
  EXPECT_EQ(ok->summary().goodput().wall_ms(), ended - started);
  EXPECT_EQ(ok->summary().goodput().SerializeAsString(), ok_goodput.SerializeAsString());
  EXPECT_TRUE(ok_restart.done());
  EXPECT_EQ(ok->rounds(1).restart().SerializeAsString(), ok_restart.SerializeAsString());
  ASSERT_EQ(ok->nodes_size(), 2);
  EXPECT_TRUE(ok->nodes(0).restored());
  EXPECT_EQ(ok->nodes(0).report().state(), v1::HealthReport::DONE);
  EXPECT_THAT(ok->history_size(), ::testing::Ge(3));
  auto bad = core.GetStatus("bad");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->summary().state(), v1::JobSummary::FAILED);
  EXPECT_EQ(bad->summary().failures(), 1);
  EXPECT_EQ(bad->summary().root_cause().text(), "rank 0 on node-c exited with code 3");
  // Numbering goes on where it stopped.
  int64_t max_seq = 0;
  for (const auto& e : ok->history()) max_seq = std::max(max_seq, e.seq());
  EXPECT_GT(max_seq, 0);
}

TEST_F(HistoryStoreTest, ControllerRestart_RunningJobsGoodputGoesOnThroughTheGap) {
  using testing::MakeReport;
  using testing::SetProgress;
  const absl::Time started = clock_.Now();
  int64_t productive = 0;
  {
    auto store = HistoryStore::Open(Options(), &clock_);
    ASSERT_TRUE(store.ok());
    ControllerCore core({}, &clock_, store->get());
    ASSERT_TRUE(core.Report(MakeReport("job", "node-a", 1, 1, 1)).ok());
    clock_.Advance(absl::Seconds(10));
    v1::HealthReport a = MakeReport("job", "node-a", 1, 2, 1);
    SetProgress(&a, 7);
    ASSERT_TRUE(core.Report(a).ok());
    // Within the staleness window (a job no node reports for is counted to
    // its last report: GoodputTest.AJobWhoseNodesAllWentSilent_...).
    clock_.Advance(absl::Seconds(10));
    v1::HealthReport b = MakeReport("job", "node-a", 1, 3, 1);
    SetProgress(&b, 9);
    ASSERT_TRUE(core.Report(b).ok());
    clock_.Advance(absl::Seconds(10));
    core.Flush();
    productive = core.GetStatus("job")->summary().goodput().productive_ms();
  }
  EXPECT_EQ(productive, 20000);
  clock_.Advance(absl::Minutes(2));  // the controller is away.
  Restarted restarted = RestartController();
  ASSERT_NE(restarted.core, nullptr);
  const v1::Goodput g = restarted.core->GetStatus("job")->summary().goodput();
  EXPECT_EQ(g.phase(), v1::Goodput::PRODUCTIVE);
  EXPECT_EQ(g.startup_ms(), 10000);
  EXPECT_EQ(g.productive_ms(), productive + 120000);
  EXPECT_EQ(g.wall_ms(), absl::ToInt64Milliseconds(clock_.Now() - started));
}

TEST_F(HistoryStoreTest, Load_CutsEvidence_EvidenceReadsItWhole) {
  auto store = HistoryStore::Open(Options(), &clock_);
  ASSERT_TRUE(store.ok());
  HistoryRecord hang = Record("job", v1::HistoryEntry::HANG, 1, clock_.Now(), "hung");
  std::string evidence;
  for (int i = 0; i < 400; ++i) evidence += "\xc3\xa9";  // 800 bytes of 2-byte characters.
  hang.entry.set_evidence(evidence);
  hang.entry.set_seq(7);
  ASSERT_TRUE(AppendEntries(**store, {hang}).ok());
  auto loaded = (*store)->Load(10, 10);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->entries.size(), 1u);
  EXPECT_EQ(loaded->entries[0].entry.evidence().size(), kEvidenceSummaryBytes);
  EXPECT_EQ(loaded->entries[0].entry.evidence_bytes(), 800);
  EXPECT_EQ(loaded->entries[0].entry.seq(), 7);
  auto whole = (*store)->Evidence("job", 7);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, evidence);
  EXPECT_EQ((*store)->Evidence("job", 8).status().code(), absl::StatusCode::kNotFound);

  // Through the core: the summary at start, the whole when asked for.
  ControllerCore core({}, &clock_, store->get());
  core.Restore(*loaded);
  auto status = core.GetStatus("job");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->history(0).evidence().size(), kEvidenceSummaryBytes);
  auto asked = core.Evidence("job", 7);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(*asked, evidence);
}

TEST_F(HistoryStoreTest, Evidence_IsBoundedPerJob_TheOldestGoesFirst) {
  auto store = HistoryStore::Open(Options(), &clock_);
  ASSERT_TRUE(store.ok());
  const int64_t each = kMaxEvidenceBytesPerJob / 4;
  for (int i = 1; i <= 6; ++i) {
    HistoryRecord hang = Record("job", v1::HistoryEntry::HANG, 1, clock_.Now(), "hung");
    hang.entry.set_evidence(std::string(each, 'a' + i));
    hang.entry.set_seq(i);
    ASSERT_TRUE(AppendEntries(**store, {hang}).ok());
  }
  EXPECT_EQ(*(*store)->Count(), 6);  // the entries stay ...
  // ... the oldest evidence goes.
  EXPECT_EQ((*store)->Evidence("job", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT((*store)->Evidence("job", 2).status().message(), HasSubstr("bounds"));
  for (int i = 3; i <= 6; ++i) EXPECT_TRUE((*store)->Evidence("job", i).ok()) << i;
}

// Each entry with evidence summed the evidence of the whole file to apply
// the bound in all: with 1,000 jobs of 1,000 entries, a hang took 130 ms
// of the store's lock, so a burst of hangs stalled every report. No write
// reads the whole file now (what the bounds need is kept as it goes).
TEST_F(HistoryStoreTest, Append_NeverScansTheWholeFile) {
  HistoryStoreOptions o = Options();
  o.max_jobs = 5;
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  for (int j = 0; j < 5; ++j) {
    std::vector<HistoryRecord> records;
    for (int i = 0; i < 1000; ++i) {
      HistoryRecord r = Record(absl::StrCat("job-", j),
                               i % 10 == 0 ? v1::HistoryEntry::HANG : v1::HistoryEntry::ROUND, 1,
                               clock_.Now(), "cause");
      if (i % 10 == 0) r.entry.set_evidence(std::string(100, 'e'));
      r.entry.set_seq(i + 1);
      records.push_back(std::move(r));
    }
    ASSERT_TRUE(AppendEntries(**store, std::move(records)).ok());
    clock_.Advance(absl::Seconds(1));
  }
  const int64_t before = (*store)->stats().scan_steps;
  for (int k = 0; k < 3; ++k) {
    HistoryRecord hang = Record("job-1", v1::HistoryEntry::HANG, 2, clock_.Now(), "hung");
    hang.entry.set_evidence(std::string(16 * 1024, 'x'));
    hang.entry.set_seq(2000 + k);
    HistoryBatch batch;
    batch.entries.push_back(hang);
    v1::JobRecord rec;
    rec.mutable_summary()->set_job_id("job-1");
    batch.jobs.emplace_back("job-1", rec);
    ASSERT_TRUE((*store)->Append(batch).ok());
  }
  // A sixth job: the one heard from longest ago (job-0) goes.
  ASSERT_TRUE(
      AppendEntries(**store, {Record("job-5", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
  EXPECT_LT((*store)->stats().scan_steps - before, 100);
  EXPECT_EQ((*store)->Evidence("job-0", 1).status().code(), absl::StatusCode::kNotFound);
  // What the bound in all needs is right: 4 jobs x 100 x 100 bytes, and
  // 3 x 16 KiB for job-1, whose 3 oldest entries went (one with evidence).
  const int64_t expected = 4 * 100 * 100 + 3 * 16 * 1024 - 100;
  EXPECT_EQ((*store)->stats().evidence_bytes, expected);
  store->reset();
  auto reopened = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->stats().evidence_bytes, expected);
}

// The -wal kept the size of the largest transaction ever written (a big
// batch, the upgrade of a large schema-1 file) for good: a second copy of
// the history on the volume.
TEST_F(HistoryStoreTest, Wal_ShrinksBackAfterALargeWrite) {
  HistoryStoreOptions o = Options(100000);
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  std::vector<HistoryRecord> records;
  for (int i = 0; i < 20000; ++i) {
    HistoryRecord r =
        Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now(), std::string(900, 'c'));
    r.entry.set_seq(i + 1);
    records.push_back(std::move(r));
  }
  ASSERT_TRUE(AppendEntries(**store, std::move(records)).ok());
  struct stat st;
  ASSERT_EQ(::stat((o.path + "-wal").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 16 << 20);
  for (int i = 0; i < 3; ++i) {
    HistoryRecord r = Record("job", v1::HistoryEntry::ROUND, 2, clock_.Now());
    r.entry.set_seq(30000 + i);
    ASSERT_TRUE(AppendEntries(**store, {r}).ok());
  }
  ASSERT_EQ(::stat((o.path + "-wal").c_str(), &st), 0);
  EXPECT_LE(st.st_size, kWalSizeLimit + (64 << 10));
}

TEST_F(HistoryStoreTest, Jobs_AreBounded_TheOneHeardFromLongestAgoGoes) {
  HistoryStoreOptions o = Options();
  o.max_jobs = 3;
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  for (int i = 0; i < 5; ++i) {
    HistoryBatch batch;
    batch.entries.push_back(
        Record(absl::StrCat("job-", i), v1::HistoryEntry::ROUND, 1, clock_.Now()));
    v1::JobRecord rec;
    rec.mutable_summary()->set_job_id(absl::StrCat("job-", i));
    batch.jobs.emplace_back(absl::StrCat("job-", i), rec);
    ASSERT_TRUE((*store)->Append(batch).ok());
    clock_.Advance(absl::Seconds(1));
  }
  auto loaded = (*store)->Load(100, 100);
  ASSERT_TRUE(loaded.ok());
  std::vector<std::string> jobs;
  for (const auto& [id, rec] : loaded->jobs) jobs.push_back(id);
  EXPECT_THAT(jobs, ::testing::ElementsAre("job-2", "job-3", "job-4"));
  EXPECT_EQ(*(*store)->Count(), 3);
  // Load reads only the newest jobs.
  loaded = (*store)->Load(1, 100);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->jobs.size(), 1u);
  EXPECT_EQ(loaded->jobs[0].first, "job-4");
  ASSERT_EQ(loaded->entries.size(), 1u);
  EXPECT_EQ(loaded->entries[0].job_id, "job-4");
}

// A write that fails in the middle of a batch (a full disk) is rolled
// back; the jobs it named were still counted, so once the disk had room
// the job bound dropped real jobs to make room for jobs never written.
TEST_F(HistoryStoreTest, FailedAppend_CountsNoJobItDidNotWrite) {
  HistoryStoreOptions o = Options();
  o.max_jobs = 3;
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  auto append = [&](const std::string& job) {
    HistoryBatch batch;
    batch.entries.push_back(Record(job, v1::HistoryEntry::ROUND, 1, clock_.Now()));
    v1::JobRecord rec;
    rec.mutable_summary()->set_job_id(job);
    batch.jobs.emplace_back(job, rec);
    clock_.Advance(absl::Seconds(1));
    return (*store)->Append(batch);
  };
  for (const char* job : {"a", "b", "c"}) ASSERT_TRUE(append(job).ok());
  // Summaries of jobs x-* fail to be written (as on a full disk).
  auto exec = [&](const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  exec(
      "CREATE TRIGGER full BEFORE INSERT ON jobs WHEN NEW.job_id LIKE 'x-%' "
      "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;");
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(append(absl::StrCat("x-", i)).ok()) << i;
  exec("DROP TRIGGER full;");
  ASSERT_TRUE(append("d").ok());
  auto loaded = (*store)->Load(100, 100);
  ASSERT_TRUE(loaded.ok());
  std::vector<std::string> jobs;
  for (const auto& [id, rec] : loaded->jobs) jobs.push_back(id);
  EXPECT_THAT(jobs, ::testing::ElementsAre("b", "c", "d"));
}

// A COMMIT that fails (the disk fills as the WAL grows) left the
// transaction open: every later write failed ("cannot start a transaction
// within a transaction") until the controller restarted, though the disk
// had room again.
TEST_F(HistoryStoreTest, FailedCommit_LaterWritesWorkOnceThereIsRoom) {
  HistoryStoreOptions o = Options();
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(
      AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
  // The files may not grow (EFBIG: as ENOSPC, an error as the commit
  // writes the WAL).
  off_t largest = 0;
  for (const char* suffix : {"", "-wal"}) {
    struct stat st;
    if (::stat((o.path + suffix).c_str(), &st) == 0) largest = std::max(largest, st.st_size);
  }
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = static_cast<rlim_t>(largest);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  HistoryRecord big = Record("job", v1::HistoryEntry::HANG, 1, clock_.Now(), "hung");
  big.entry.set_evidence(std::string(256 * 1024, 'e'));
  big.entry.set_seq(2);
  const absl::Status failed = AppendEntries(**store, {big});
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(failed.ok());
  // Room again: the next write works, and the failed one left nothing.
  HistoryRecord next = Record("job", v1::HistoryEntry::ROUND, 2, clock_.Now());
  next.entry.set_seq(3);
  absl::Status s = AppendEntries(**store, {next});
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*(*store)->Count(), 2);
}

TEST_F(HistoryStoreTest, Files_AreOnlyTheOwners) {
  const mode_t old_umask = ::umask(022);
  HistoryStoreOptions o = Options();
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(
        AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
    for (const char* suffix : {"", "-wal", "-shm"}) {
      struct stat st;
      ASSERT_EQ(::stat((o.path + suffix).c_str(), &st), 0) << suffix;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << suffix;
    }
  }
  // A file an older controller made 0644 is made private.
  ASSERT_EQ(::chmod(o.path.c_str(), 0644), 0);
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok());
    struct stat st;
    ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  ::umask(old_umask);
}

// --db may be a symbolic link (to a file on another volume), as for any
// tool: it was refused ("Too many levels of symbolic links", exit 78).
// SQLite puts the -wal and -shm beside the file the link points to; that is
// the file made private, and the one moved aside when damaged.
TEST_F(HistoryStoreTest, DbPathASymbolicLink_IsTheFileItPointsTo) {
  const std::string volume = root_.path() + "/volume";
  ASSERT_EQ(::mkdir(volume.c_str(), 0700), 0);
  const std::string target = volume + "/history.db";
  HistoryStoreOptions o = Options();
  ASSERT_EQ(::symlink("volume/history.db", o.path.c_str()), 0);  // dangling at first.
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        AppendEntries(**store, {Record("job", v1::HistoryEntry::ROUND, 1, clock_.Now())}).ok());
    struct stat st;
    ASSERT_EQ(::stat((target + "-wal").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::lstat(o.path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
  }
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->Count(), 1);
  }
  // Damaged: the file it points to is moved aside; the link stays, and a
  // fresh file is made where it points.
  {
    FILE* f = std::fopen(target.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite("garbage garbage garbage", 1, 23, f), 23u);
    std::fclose(f);
  }
  auto damaged = HistoryStore::Open(o, &clock_);
  ASSERT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss) << damaged.status();
  auto moved = HistoryStore::MoveAside(o.path, clock_.Now());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->rfind(volume + "/history.db.damaged-", 0), 0u) << *moved;
  auto fresh = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*(*fresh)->Count(), 0);
  struct stat st;
  ASSERT_EQ(::lstat(o.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_F(HistoryStoreTest, DamagedPage_IsDataLoss_AndMovedAside) {
  HistoryStoreOptions o = Options();
  {
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok());
    std::vector<HistoryRecord> records;
    for (int i = 0; i < 200; ++i) {
      records.push_back(
          Record("job", v1::HistoryEntry::ROUND, i + 1, clock_.Now(), std::string(900, 'c')));
    }
    ASSERT_TRUE(AppendEntries(**store, records).ok());
  }
  // Page 3 (of 4 KiB pages) overwritten: a b-tree page of the table.
  {
    FILE* f = std::fopen(o.path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, 2 * 4096, SEEK_SET), 0);
    const std::string junk(4096, '\x5a');
    ASSERT_EQ(std::fwrite(junk.data(), 1, junk.size(), f), junk.size());
    std::fclose(f);
  }
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(o.path));
  EXPECT_THAT(store.status().message(), HasSubstr("damaged"));

  auto moved = HistoryStore::MoveAside(o.path, absl::FromUnixSeconds(1800000000));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, o.path + ".damaged-20270115T080000Z");
  struct stat st;
  EXPECT_EQ(::stat(moved->c_str(), &st), 0);
  EXPECT_NE(::stat(o.path.c_str(), &st), 0);
  auto fresh = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*(*fresh)->Count(), 0);
}

TEST_F(HistoryStoreTest, SchemaOne_IsUpgradedInPlace) {
  HistoryStoreOptions o = Options();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(db,
                     "CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT "
                     "NOT NULL, kind INTEGER NOT NULL, at_unix_ms INTEGER NOT NULL, round "
                     "INTEGER NOT NULL, node_id TEXT NOT NULL, cause TEXT NOT NULL, evidence "
                     "TEXT NOT NULL, verdict TEXT NOT NULL);"
                     "INSERT INTO history(job_id, kind, at_unix_ms, round, node_id, cause, "
                     "evidence, verdict) VALUES('old', 2, 1800000000000, 2, 'n', 'why', "
                     "'stack', 'hung');"
                     "PRAGMA user_version=1;",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->Load(10, 10);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->entries.size(), 1u);
  EXPECT_EQ(loaded->entries[0].entry.seq(), 1);
  EXPECT_EQ(loaded->entries[0].entry.cause(), "why");
  EXPECT_EQ(*(*store)->Evidence("old", 1), "stack");
  ControllerCore core({}, &clock_, store->get());
  core.Restore(*loaded);
  EXPECT_EQ(core.GetStatus("old")->summary().restarts(), 1);
}

// The upgrade ran as separate statements: a controller stopped after the
// ALTER TABLE (schema 1 with the new column) failed at every start
// ("duplicate column name: seq", exit 78), and so did a file a schema-1
// controller had made but not yet numbered (version 0, the old table).
TEST_F(HistoryStoreTest, SchemaOne_InterruptedUpgradeOrUnnumbered_IsUpgraded) {
  constexpr char kSchemaOne[] =
      "CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, kind "
      "INTEGER NOT NULL, at_unix_ms INTEGER NOT NULL, round INTEGER NOT NULL, node_id TEXT NOT "
      "NULL, cause TEXT NOT NULL, evidence TEXT NOT NULL, verdict TEXT NOT NULL);"
      "CREATE INDEX history_job ON history(job_id, id);"
      "CREATE INDEX history_at ON history(at_unix_ms);"
      "INSERT INTO history(job_id, kind, at_unix_ms, round, node_id, cause, evidence, verdict) "
      "VALUES('old', 2, 1800000000000, 2, 'n', 'why', 'stack', 'hung');";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"interrupted.db",
       absl::StrCat(kSchemaOne,
                    "ALTER TABLE history ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;"
                    "PRAGMA user_version=1;")},
      {"unnumbered.db", kSchemaOne},
  };
  for (const auto& [name, sql] : files) {
    HistoryStoreOptions o = Options();
    o.path = root_.path() + "/" + name;
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
    auto store = HistoryStore::Open(o, &clock_);
    ASSERT_TRUE(store.ok()) << name << ": " << store.status();
    auto loaded = (*store)->Load(10, 10);
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    ASSERT_EQ(loaded->entries.size(), 1u) << name;
    EXPECT_EQ(loaded->entries[0].entry.seq(), 1) << name;
    EXPECT_EQ(*(*store)->Evidence("old", 1), "stack") << name;
    EXPECT_TRUE(
        AppendEntries(**store, {Record("old", v1::HistoryEntry::ROUND, 3, clock_.Now())}).ok())
        << name;
  }
}

TEST_F(HistoryStoreTest, NewerSchema_IsRefusedNotMovedAside) {
  HistoryStoreOptions o = Options();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=9;", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 9"));
}

}  // namespace
}  // namespace trainlet::controller

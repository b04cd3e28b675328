#include "controller/history_store.h"

#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/testing/temp_root.h"
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
  testing::TempRoot root_;
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
  auto loaded = (*store)->Load(100);
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
  auto loaded = (*store)->Load(100);
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
  auto loaded = (*store)->Load(2);
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

TEST_F(HistoryStoreTest, Open_NotADatabase_IsRefused) {
  HistoryStoreOptions o;
  o.path = root_.Write("junk.db", std::string(4096, 'x'));
  auto store = HistoryStore::Open(o, &clock_);
  ASSERT_FALSE(store.ok());
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
  auto loaded = (*store)->Load(ControllerOptions().max_history_per_job);
  ASSERT_TRUE(loaded.ok());
  core.Restore(*loaded);
  auto status = core.GetStatus("job");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->summary().restarts(), 1);
  ASSERT_EQ(status->history_size(), 3);
  EXPECT_EQ(status->history(1).cause(), "worker 1 exited with code 3");
}

}  // namespace
}  // namespace trainlet::controller

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <string>
#include "absl/strings/str_cat.h"
#include "controller/history_store.h"
#include "common/testing/temp_root.h"
#include "gtest/gtest.h"
namespace trainlet::controller {
TEST(Probe, EvidenceBoundCost) {
  trainlet::testing::TempRoot root;
  SimulatedClock clock{absl::FromUnixSeconds(1800000000)};
  HistoryStoreOptions o; o.path = root.path() + "/big.db";
  auto store = HistoryStore::Open(o, &clock);
  ASSERT_TRUE(store.ok());
  // 1000 jobs x 1000 entries, some with 4 KiB evidence.
  auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < 1000; ++j) {
    HistoryBatch b;
    for (int i = 0; i < 1000; ++i) {
      HistoryRecord r; r.job_id = absl::StrCat("job-", j); r.entry.set_kind(i % 50 == 0 ? v1::HistoryEntry::HANG : v1::HistoryEntry::ROUND);
      r.entry.set_seq(i + 1); r.entry.set_at_unix_ms(absl::ToUnixMillis(clock.Now())); r.entry.set_cause("round whatever 123");
      if (i % 50 == 0) r.entry.set_evidence(std::string(2048, 'e'));
      b.entries.push_back(r);
    }
    ASSERT_TRUE((*store)->Append(b).ok());
  }
  auto t1 = std::chrono::steady_clock::now();
  struct stat st; stat(o.path.c_str(), &st);
  printf("fill %.1f s, file %ld MB\n", std::chrono::duration<double>(t1 - t0).count(), (long)st.st_size >> 20);
  for (int k = 0; k < 5; ++k) {
    HistoryBatch b; HistoryRecord r; r.job_id = "job-7"; r.entry.set_kind(v1::HistoryEntry::HANG); r.entry.set_seq(5000 + k);
    r.entry.set_at_unix_ms(absl::ToUnixMillis(clock.Now())); r.entry.set_evidence(std::string(16384, 'x')); b.entries.push_back(r);
    auto a = std::chrono::steady_clock::now();
    ASSERT_TRUE((*store)->Append(b).ok());
    auto z = std::chrono::steady_clock::now();
    HistoryBatch b2; HistoryRecord r2 = r; r2.entry.clear_evidence(); r2.entry.set_kind(v1::HistoryEntry::ROUND); r2.entry.set_seq(6000+k); b2.entries.push_back(r2);
    auto a2 = std::chrono::steady_clock::now();
    ASSERT_TRUE((*store)->Append(b2).ok());
    auto z2 = std::chrono::steady_clock::now();
    printf("hang append %.1f ms, plain append %.1f ms\n", std::chrono::duration<double, std::milli>(z - a).count(), std::chrono::duration<double, std::milli>(z2 - a2).count());
  }
  for (int k = 0; k < 3; ++k) {
    HistoryBatch b; v1::JobRecord rec; rec.mutable_summary()->set_job_id("job-7"); b.jobs.emplace_back("job-7", rec);
    auto a = std::chrono::steady_clock::now();
    ASSERT_TRUE((*store)->Append(b).ok());
    auto z = std::chrono::steady_clock::now();
    printf("summary append %.1f ms\n", std::chrono::duration<double, std::milli>(z - a).count());
  }
  auto a = std::chrono::steady_clock::now();
  auto reopened = HistoryStore::Open(o, &clock);
  auto z = std::chrono::steady_clock::now();
  printf("reopen %.1f ms\n", std::chrono::duration<double, std::milli>(z - a).count());
}
}

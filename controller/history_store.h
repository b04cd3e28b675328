// The controller's history on disk (--db): every round, restart, hang, node
// gone silent or lost and agent finished, per job, and each job's summary, in
// one SQLite file, so that a controller restart loses nothing that matters.
// At start only the bounded summaries are read back (Load); hang evidence is
// read when asked for (Evidence). What is kept, its bounds, the 0600 files,
// WAL, and what a damaged file gets (DataLoss; MoveAside): docs/controller.md,
// "What the controller keeps".
//
// Schema 2 (PRAGMA user_version): table `history`, one row per entry (id,
// job_id, kind, at_unix_ms, round, node_id, cause, evidence, verdict, seq),
// and table `jobs`, one row per job (job_id, updated_unix_ms, record: a
// trainlet.v1.JobRecord). The upgrade from 1 is one transaction and adds
// what the tables lack, whatever the version says (a version-0 file with
// schema 1's table, or one stopped mid-upgrade).
//
// Threading: thread-safe; one connection behind a mutex. Append runs on the
// caller's thread (the core calls it outside its own lock) and writes one
// transaction.
#ifndef TRAINLET_CONTROLLER_HISTORY_STORE_H_
#define TRAINLET_CONTROLLER_HISTORY_STORE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "controller/controller_core.h"

struct sqlite3;

namespace trainlet::controller {

inline constexpr int64_t kMaxEvidenceBytesPerJob = int64_t{1} << 20;
inline constexpr int64_t kMaxEvidenceBytesStored = int64_t{64} << 20;
// What the -wal is cut back to once its frames are in the file (it grows
// with the largest transaction: a big batch, an upgrade).
inline constexpr int64_t kWalSizeLimit = int64_t{4} << 20;
// History entries per job read back at start (the rest stays on disk).
inline constexpr int kEntriesRestoredPerJob = 64;

struct HistoryStoreOptions {
  std::string path;                               // the SQLite file; created when missing.
  int max_entries_per_job = 1000;                 // --history-retention, >= 1.
  absl::Duration max_age = absl::Hours(24 * 30);  // --history-max-age; 0: no age limit.
  int max_jobs = 1000;                            // --history-max-jobs, >= 1.
};

class HistoryStore : public HistorySink {
 public:
  // Opens (or creates) the file and its schema, checks it, then applies the
  // age limit. DataLoss naming the path and what is wrong when the file is
  // damaged; FailedPrecondition naming the path and SQLite's reason when it
  // cannot be opened or written, or holds a newer schema. `clock` (wall
  // time) must outlive the store.
  static absl::StatusOr<std::unique_ptr<HistoryStore>> Open(HistoryStoreOptions options,
                                                            Clock* clock = Clock::Real());
  // Renames a damaged `path` (and its -wal and -shm; the file a link
  // points to) to PATH.damaged-YYYYMMDDTHHMMSSZ; returns the new name of
  // the file.
  static absl::StatusOr<std::string> MoveAside(const std::string& path, absl::Time now);

  ~HistoryStore() override;
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // One transaction: the entries, the job summaries, then the bounds of each
  // job it touched.
  absl::Status Append(const HistoryBatch& batch) override;
  absl::StatusOr<std::string> Evidence(const std::string& job_id, int64_t seq) override;

  // The summaries of the `max_jobs` jobs heard from last, and their newest
  // `max_per_job` entries, oldest first (the order ControllerCore::Restore
  // wants), evidence cut to kEvidenceSummaryBytes. DataLoss when a page
  // turns out damaged.
  absl::StatusOr<StoredHistory> Load(int max_jobs, int max_per_job) const;

  // Entries in the file.
  absl::StatusOr<int64_t> Count() const;

  struct Stats {
    // Rows SQLite stepped through in full table scans since Open (a write
    // reads only what the bounds need: the scans are Open's and Load's).
    int64_t scan_steps = 0;
    int64_t evidence_bytes = 0;  // hang evidence in the file.
  };
  Stats stats() const;

 private:
  HistoryStore(HistoryStoreOptions options, Clock* clock, sqlite3* db);
  absl::Status ExecLocked(const char* sql) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings the file (of `version`, its user_version) to kSchemaVersion in
  // one transaction.
  absl::Status MigrateLocked(int version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a transaction changes in what the store keeps in memory, applied
  // once it is committed (ApplyLocked).
  struct Pending {
    std::map<std::string, int64_t> heard;                  // job -> the latest time written.
    std::vector<std::string> dropped;                      // by the job bound.
    int64_t cutoff = std::numeric_limits<int64_t>::min();  // the age limit.
    int64_t evidence = 0;                                  // bytes added, less those removed.
  };
  void ApplyLocked(const Pending& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The age limit, and the retention of `jobs`.
  absl::Status PruneLocked(const std::set<std::string>& jobs, Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the jobs heard from longest ago while the file, as the
  // transaction leaves it, holds more than max_jobs.
  absl::Status BoundJobsLocked(Pending* pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BoundEvidenceLocked(const std::set<std::string>& jobs, Pending* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition naming the file and SQLite's reason; DataLoss when
  // SQLite says the file is damaged.
  absl::Status Error(absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HistoryStoreOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
  // What the bounds need, as of the last commit, so that no write reads
  // the whole file: each job the file holds and when it was last heard
  // from (its newest entry or summary), and the evidence in all.
  std::map<std::string, int64_t> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t evidence_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> scan_steps_{0};
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HISTORY_STORE_H_

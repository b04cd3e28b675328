// The controller's history on disk: every round, restart (with its cause),
// hang (with the agent's evidence and verdict), node gone silent or lost and
// agent finished, per job, and each job's summary (verdict, root cause,
// rounds, counts, last step, nodes, command, start and end), in one SQLite
// file (--db), so that a controller restart loses nothing that matters. At
// start the controller reads back only the bounded summary (Load); hang
// evidence is read when asked for (Evidence).
//
// Schema (version 2, PRAGMA user_version; a version 1 file is upgraded in
// place): table `history`, one row per entry (id, job_id, kind, at_unix_ms,
// round, node_id, cause, evidence, verdict, seq), and table `jobs`, one row
// per job (job_id, updated_unix_ms, record: a trainlet.v1.JobRecord),
// readable with the sqlite3 shell. WAL journal, synchronous=NORMAL: a power
// loss may lose the last entries, never corrupt the file.
//
// Bounds (docs/controller.md): at most `max_entries_per_job` entries per job
// (the oldest go first, --history-retention), none older than `max_age`
// (--history-max-age), at most `max_jobs` jobs (--history-max-jobs; the job
// heard from longest ago goes whole), and hang evidence within
// kMaxEvidenceBytesPerJob per job and kMaxEvidenceBytesStored in all (the
// oldest evidence is dropped first, its entry stays).
//
// The file and its -wal and -shm are created 0600 (they hold the workers'
// output), and tightened to 0600 when found wider. A file that is damaged
// (not a database, a page that fails SQLite's quick_check) is refused with
// DataLoss; MoveAside puts it out of the way.
//
// Threading: thread-safe; one connection behind a mutex. Append runs on the
// caller's thread (the core calls it outside its own lock) and writes one
// transaction.
#ifndef TRAINLET_CONTROLLER_HISTORY_STORE_H_
#define TRAINLET_CONTROLLER_HISTORY_STORE_H_

#include <cstdint>
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
  // Renames a damaged `path` (and its -wal and -shm) to
  // PATH.damaged-YYYYMMDDTHHMMSSZ; returns the new name of the file.
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

 private:
  HistoryStore(HistoryStoreOptions options, Clock* clock, sqlite3* db);
  absl::Status ExecLocked(const char* sql) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PruneLocked(const std::set<std::string>& jobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BoundJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BoundEvidenceLocked(const std::set<std::string>& jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition naming the file and SQLite's reason; DataLoss when
  // SQLite says the file is damaged.
  absl::Status Error(absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HistoryStoreOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
  // The jobs the file holds (for the job bound).
  std::set<std::string> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HISTORY_STORE_H_

// The controller's history on disk: every round, restart (with its cause),
// hang (with the agent's evidence and verdict), node gone silent and agent
// finished, per job, in one SQLite file (--db), so that a controller restart
// loses nothing. The controller reloads it at start (Load) into its core.
//
// Schema (version 1, PRAGMA user_version): one table `history` with one row
// per entry (id, job_id, kind, at_unix_ms, round, node_id, cause, evidence,
// verdict), readable with the sqlite3 shell. WAL journal, synchronous=NORMAL:
// a power loss may lose the last entries, never corrupt the file.
//
// Retention (docs/controller.md): at most `max_entries_per_job` entries per
// job (the oldest go first, --history-retention) and none older than
// `max_age` (--history-max-age), applied as entries are appended and at
// open. Every text is at most the report bounds (report_limits.h), so an
// entry is at most ~20 KiB and the file at most about
// retention x jobs x 20 KiB.
//
// Threading: thread-safe; one connection behind a mutex. Append runs on the
// caller's thread (the core calls it outside its own lock) and writes one
// transaction.
#ifndef TRAINLET_CONTROLLER_HISTORY_STORE_H_
#define TRAINLET_CONTROLLER_HISTORY_STORE_H_

#include <cstdint>
#include <memory>
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

struct HistoryStoreOptions {
  std::string path;                               // the SQLite file; created when missing.
  int max_entries_per_job = 1000;                 // --history-retention, >= 1.
  absl::Duration max_age = absl::Hours(24 * 30);  // --history-max-age; 0: no age limit.
};

class HistoryStore : public HistorySink {
 public:
  // Opens (or creates) the file and its schema, then applies the age limit.
  // FailedPrecondition naming the path and SQLite's reason when the file
  // cannot be opened or written, or holds another schema. `clock` (wall
  // time) must outlive the store.
  static absl::StatusOr<std::unique_ptr<HistoryStore>> Open(HistoryStoreOptions options,
                                                            Clock* clock = Clock::Real());
  ~HistoryStore() override;
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // One transaction; then the retention of each job it touched.
  absl::Status Append(const HistoryBatch& batch) override;

  // The newest `max_per_job` entries of each job, oldest first (the order
  // ControllerCore::Restore wants).
  absl::StatusOr<StoredHistory> Load(int max_per_job) const;

  // Entries in the file.
  absl::StatusOr<int64_t> Count() const;

 private:
  HistoryStore(HistoryStoreOptions options, Clock* clock, sqlite3* db);
  absl::Status ExecLocked(const char* sql) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PruneLocked(const std::vector<std::string>& jobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HistoryStoreOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HISTORY_STORE_H_

#include "controller/history_store.h"

#include <sqlite3.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::controller {
namespace {

constexpr int kSchemaVersion = 1;

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS history ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  job_id TEXT NOT NULL,"
    "  kind INTEGER NOT NULL,"
    "  at_unix_ms INTEGER NOT NULL,"
    "  round INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL,"
    "  cause TEXT NOT NULL,"
    "  evidence TEXT NOT NULL,"
    "  verdict TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS history_job ON history(job_id, id);"
    "CREATE INDEX IF NOT EXISTS history_at ON history(at_unix_ms);";

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() const { return stmt_; }
  void Text(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  std::string ColumnText(int i) const {
    const unsigned char* p = sqlite3_column_text(stmt_, i);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p),
                                      static_cast<size_t>(sqlite3_column_bytes(stmt_, i)));
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

}  // namespace

HistoryStore::HistoryStore(HistoryStoreOptions options, Clock* clock, sqlite3* db)
    : options_(std::move(options)), clock_(clock), db_(db) {}

HistoryStore::~HistoryStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close_v2(db_);
}

absl::Status HistoryStore::Error(absl::string_view what) const {
  return absl::FailedPreconditionError(absl::StrCat("history database ", options_.path, ": ", what,
                                                    ": ", sqlite3_errmsg(db_),
                                                    "; check the --db file and its directory"));
}

absl::Status HistoryStore::ExecLocked(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message == nullptr ? "" : message;
    sqlite3_free(message);
    return absl::FailedPreconditionError(
        absl::StrCat("history database ", options_.path, ": ", text, "; check the --db file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HistoryStore>> HistoryStore::Open(HistoryStoreOptions options,
                                                                 Clock* clock) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("history database: --db needs a file path");
  }
  if (options.max_entries_per_job < 1) {
    return absl::InvalidArgumentError("history database: --history-retention must be at least 1");
  }
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(options.path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<HistoryStore> store(new HistoryStore(std::move(options), clock, db));
  absl::MutexLock lock(&store->mu_);
  if (rc != SQLITE_OK) return store->Error("cannot open");
  sqlite3_busy_timeout(db, 1000);
  sqlite3_extended_result_codes(db, 1);
  // journal_mode answers a row; sqlite3_exec ignores it.
  if (absl::Status s = store->ExecLocked("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
      !s.ok()) {
    return s;
  }
  int version = 0;
  {
    Statement st(db, "PRAGMA user_version");
    if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return store->Error("cannot read");
    version = sqlite3_column_int(st.get(), 0);
  }
  if (version != 0 && version != kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("history database ", store->options_.path, " has schema version ", version,
                     ", this trainlet writes version ", kSchemaVersion,
                     "; use another --db file or the matching trainlet"));
  }
  if (absl::Status s = store->ExecLocked(kSchema); !s.ok()) return s;
  if (absl::Status s =
          store->ExecLocked(absl::StrCat("PRAGMA user_version=", kSchemaVersion, ";").c_str());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = store->PruneLocked({}); !s.ok()) return s;
  return store;
}

absl::Status HistoryStore::Append(const HistoryBatch& batch) {
  const std::vector<HistoryRecord>& records = batch.entries;
  if (records.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ExecLocked("BEGIN IMMEDIATE"); !s.ok()) return s;
  std::set<std::string> jobs;
  {
    Statement st(db_,
                 "INSERT INTO history(job_id, kind, at_unix_ms, round, node_id, cause, evidence, "
                 "verdict) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    if (!st.ok()) {
      absl::Status s = Error("cannot prepare an insert");
      ExecLocked("ROLLBACK").IgnoreError();
      return s;
    }
    for (const HistoryRecord& r : records) {
      const v1::HistoryEntry& e = r.entry;
      sqlite3_reset(st.get());
      st.Text(1, r.job_id);
      st.Int(2, e.kind());
      st.Int(3, e.at_unix_ms());
      st.Int(4, static_cast<int64_t>(e.round()));
      st.Text(5, e.node_id());
      st.Text(6, e.cause());
      st.Text(7, e.evidence());
      st.Text(8, e.verdict());
      if (sqlite3_step(st.get()) != SQLITE_DONE) {
        absl::Status s = Error("cannot write");
        ExecLocked("ROLLBACK").IgnoreError();
        return s;
      }
      jobs.insert(r.job_id);
    }
  }
  if (absl::Status s = PruneLocked({jobs.begin(), jobs.end()}); !s.ok()) {
    ExecLocked("ROLLBACK").IgnoreError();
    return s;
  }
  return ExecLocked("COMMIT");
}

absl::Status HistoryStore::PruneLocked(const std::vector<std::string>& jobs) {
  if (options_.max_age > absl::ZeroDuration()) {
    Statement st(db_, "DELETE FROM history WHERE at_unix_ms < ?1");
    if (!st.ok()) return Error("cannot prepare the age limit");
    st.Int(1, absl::ToUnixMillis(clock_->Now() - options_.max_age));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("cannot apply the age limit");
  }
  Statement st(db_,
               "DELETE FROM history WHERE job_id = ?1 AND id <= (SELECT id FROM history WHERE "
               "job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)");
  if (!st.ok()) return Error("cannot prepare the retention");
  for (const std::string& job : jobs) {
    sqlite3_reset(st.get());
    st.Text(1, job);
    st.Int(2, options_.max_entries_per_job);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("cannot apply the retention");
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredHistory> HistoryStore::Load(int max_per_job) const {
  absl::MutexLock lock(&mu_);
  Statement st(db_,
               "SELECT job_id, kind, at_unix_ms, round, node_id, cause, evidence, verdict FROM "
               "(SELECT *, ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY id DESC) AS newer "
               "FROM history) WHERE newer <= ?1 ORDER BY id");
  if (!st.ok()) return Error("cannot prepare the load");
  st.Int(1, max_per_job);
  StoredHistory stored;
  std::vector<HistoryRecord>& out = stored.entries;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    HistoryRecord r;
    r.job_id = st.ColumnText(0);
    const int kind = sqlite3_column_int(st.get(), 1);
    r.entry.set_kind(v1::HistoryEntry::Kind_IsValid(kind)
                         ? static_cast<v1::HistoryEntry::Kind>(kind)
                         : v1::HistoryEntry::KIND_UNSPECIFIED);
    r.entry.set_at_unix_ms(sqlite3_column_int64(st.get(), 2));
    r.entry.set_round(static_cast<uint64_t>(sqlite3_column_int64(st.get(), 3)));
    r.entry.set_node_id(st.ColumnText(4));
    r.entry.set_cause(st.ColumnText(5));
    r.entry.set_evidence(st.ColumnText(6));
    r.entry.set_verdict(st.ColumnText(7));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return Error("cannot read");
  return stored;
}

absl::StatusOr<int64_t> HistoryStore::Count() const {
  absl::MutexLock lock(&mu_);
  Statement st(db_, "SELECT COUNT(*) FROM history");
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return Error("cannot count");
  return sqlite3_column_int64(st.get(), 0);
}

}  // namespace trainlet::controller

#include "controller/history_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "controller/report_limits.h"

namespace trainlet::controller {
namespace {

constexpr int kSchemaVersion = 2;

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
    "  verdict TEXT NOT NULL,"
    "  seq INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS history_job ON history(job_id, id);"
    "CREATE INDEX IF NOT EXISTS history_at ON history(at_unix_ms);"
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  job_id TEXT PRIMARY KEY,"
    "  updated_unix_ms INTEGER NOT NULL,"
    "  record BLOB NOT NULL);";

// Version 1 had no seq and no jobs table: each entry's id numbers it.
constexpr char kUpgradeFrom1[] =
    "ALTER TABLE history ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;"
    "UPDATE history SET seq = id;";

// The file and what SQLite keeps beside it.
constexpr const char* kSuffixes[] = {"", "-wal", "-shm"};

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
  void Blob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  std::string ColumnText(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p),
                                      static_cast<size_t>(sqlite3_column_bytes(stmt_, i)));
  }
  int64_t ColumnInt(int i) const { return sqlite3_column_int64(stmt_, i); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

bool IsDamage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

// The file 0600, created so when missing (its -wal and -shm then get the
// same mode from SQLite), tightened when wider (older controllers made it
// 0644).
absl::Status PrivateFiles(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("history database ", path,
                                                      ": cannot open: ", std::strerror(errno),
                                                      "; check the --db file and its directory"));
  }
  ::close(fd);
  for (const char* suffix : kSuffixes) {
    const std::string file = path + suffix;
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if ((st.st_mode & 077) == 0) continue;
    if (::chmod(file.c_str(), st.st_mode & 0700) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "history database ", file, ": cannot make it private (0600): ", std::strerror(errno),
          "; it holds the workers' output"));
    }
    TLOG(kInfo) << "history database " << SafeForLog(file, 256)
                << " was readable by others; it is now 0600 (it holds the workers' output)";
  }
  return absl::OkStatus();
}

}  // namespace

HistoryStore::HistoryStore(HistoryStoreOptions options, Clock* clock, sqlite3* db)
    : options_(std::move(options)), clock_(clock), db_(db) {}

HistoryStore::~HistoryStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close_v2(db_);
}

absl::Status HistoryStore::Error(absl::string_view what) const {
  const int rc = sqlite3_extended_errcode(db_);
  if (IsDamage(rc)) {
    return absl::DataLossError(absl::StrCat("history database ", options_.path, " is damaged (",
                                            what, ": ", sqlite3_errmsg(db_), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat("history database ", options_.path, ": ", what,
                                                    ": ", sqlite3_errmsg(db_),
                                                    "; check the --db file and its directory"));
}

absl::Status HistoryStore::ExecLocked(const char* sql) const {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    std::string text = message == nullptr ? sqlite3_errstr(rc) : message;
    sqlite3_free(message);
    if (IsDamage(rc)) {
      return absl::DataLossError(
          absl::StrCat("history database ", options_.path, " is damaged (", text, ")"));
    }
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
  if (options.max_jobs < 1) {
    return absl::InvalidArgumentError("history database: --history-max-jobs must be at least 1");
  }
  if (absl::Status s = PrivateFiles(options.path); !s.ok()) return s;
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(options.path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
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
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("history database ", store->options_.path, " has schema version ", version,
                     ", this trainlet writes version ", kSchemaVersion,
                     "; use another --db file or the matching trainlet"));
  }
  // Every page is read once: a damaged one is found now, not in the
  // middle of a job (the file is bounded, see above).
  {
    Statement st(db, "PRAGMA quick_check(1)");
    if (!st.ok()) return store->Error("cannot check");
    const int step = sqlite3_step(st.get());
    if (step != SQLITE_ROW) return store->Error("cannot check");
    const std::string result = st.ColumnText(0);
    if (result != "ok") {
      return absl::DataLossError(absl::StrCat("history database ", store->options_.path,
                                              " is damaged (", SafeForLog(result, 200), ")"));
    }
  }
  if (version == 1) {
    if (absl::Status s = store->ExecLocked(kUpgradeFrom1); !s.ok()) return s;
    TLOG(kInfo) << "history database " << SafeForLog(store->options_.path, 256)
                << " upgraded from schema 1 to " << kSchemaVersion;
  }
  if (absl::Status s = store->ExecLocked(kSchema); !s.ok()) return s;
  if (absl::Status s =
          store->ExecLocked(absl::StrCat("PRAGMA user_version=", kSchemaVersion, ";").c_str());
      !s.ok()) {
    return s;
  }
  {
    Statement st(db, "SELECT job_id FROM jobs UNION SELECT DISTINCT job_id FROM history");
    if (!st.ok()) return store->Error("cannot read the jobs");
    int step;
    while ((step = sqlite3_step(st.get())) == SQLITE_ROW) store->jobs_.insert(st.ColumnText(0));
    if (step != SQLITE_DONE) return store->Error("cannot read the jobs");
  }
  if (absl::Status s = store->PruneLocked({}); !s.ok()) return s;
  if (absl::Status s = store->BoundJobsLocked(); !s.ok()) return s;
  return store;
}

absl::StatusOr<std::string> HistoryStore::MoveAside(const std::string& path, absl::Time now) {
  const std::string suffix =
      absl::StrCat(".damaged-", absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()));
  std::string moved;
  for (const char* s : kSuffixes) {
    const std::string from = path + s;
    const std::string to = path + suffix + s;
    if (::rename(from.c_str(), to.c_str()) != 0) {
      if (errno == ENOENT && *s != '\0') continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "history database ", from, ": cannot move it aside to ", to, ": ", std::strerror(errno)));
    }
    if (*s == '\0') moved = to;
  }
  return moved;
}

absl::Status HistoryStore::Append(const HistoryBatch& batch) {
  if (batch.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ExecLocked("BEGIN IMMEDIATE"); !s.ok()) return s;
  auto fail = [this](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ExecLocked("ROLLBACK").IgnoreError();
    return s;
  };
  std::set<std::string> touched;
  bool evidence = false;
  const size_t known = jobs_.size();
  if (!batch.entries.empty()) {
    Statement st(db_,
                 "INSERT INTO history(job_id, kind, at_unix_ms, round, node_id, cause, evidence, "
                 "verdict, seq) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    if (!st.ok()) return fail(Error("cannot prepare an insert"));
    for (const HistoryRecord& r : batch.entries) {
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
      st.Int(9, e.seq());
      if (sqlite3_step(st.get()) != SQLITE_DONE) return fail(Error("cannot write"));
      touched.insert(r.job_id);
      jobs_.insert(r.job_id);
      evidence = evidence || !e.evidence().empty();
    }
  }
  if (!batch.jobs.empty()) {
    Statement st(db_,
                 "INSERT OR REPLACE INTO jobs(job_id, updated_unix_ms, record) VALUES(?1, ?2, ?3)");
    if (!st.ok()) return fail(Error("cannot prepare a job's summary"));
    const int64_t now = absl::ToUnixMillis(clock_->Now());
    for (const auto& [job_id, record] : batch.jobs) {
      sqlite3_reset(st.get());
      st.Text(1, job_id);
      st.Int(2, now);
      st.Blob(3, record.SerializeAsString());
      if (sqlite3_step(st.get()) != SQLITE_DONE) return fail(Error("cannot write a job's summary"));
      jobs_.insert(job_id);
    }
  }
  if (absl::Status s = PruneLocked(touched); !s.ok()) return fail(s);
  if (evidence) {
    if (absl::Status s = BoundEvidenceLocked(touched); !s.ok()) return fail(s);
  }
  if (jobs_.size() > known) {
    if (absl::Status s = BoundJobsLocked(); !s.ok()) return fail(s);
  }
  return ExecLocked("COMMIT");
}

absl::Status HistoryStore::PruneLocked(const std::set<std::string>& jobs) {
  if (options_.max_age > absl::ZeroDuration()) {
    Statement st(db_, "DELETE FROM history WHERE at_unix_ms < ?1");
    if (!st.ok()) return Error("cannot prepare the age limit");
    st.Int(1, absl::ToUnixMillis(clock_->Now() - options_.max_age));
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("cannot apply the age limit");
    Statement jobs_st(db_, "DELETE FROM jobs WHERE updated_unix_ms < ?1");
    if (!jobs_st.ok()) return Error("cannot prepare the age limit");
    jobs_st.Int(1, absl::ToUnixMillis(clock_->Now() - options_.max_age));
    if (sqlite3_step(jobs_st.get()) != SQLITE_DONE) return Error("cannot apply the age limit");
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

absl::Status HistoryStore::BoundJobsLocked() {
  if (static_cast<int>(jobs_.size()) <= options_.max_jobs) return absl::OkStatus();
  // The jobs heard from longest ago go whole.
  const int excess = static_cast<int>(jobs_.size()) - options_.max_jobs;
  std::vector<std::string> victims;
  {
    Statement st(db_,
                 "SELECT job_id FROM (SELECT job_id, MAX(at_unix_ms) AS at FROM history GROUP BY "
                 "job_id UNION ALL SELECT job_id, updated_unix_ms AS at FROM jobs) GROUP BY job_id "
                 "ORDER BY MAX(at) LIMIT ?1");
    if (!st.ok()) return Error("cannot prepare the job bound");
    st.Int(1, excess);
    int step;
    while ((step = sqlite3_step(st.get())) == SQLITE_ROW) victims.push_back(st.ColumnText(0));
    if (step != SQLITE_DONE) return Error("cannot apply the job bound");
  }
  Statement history(db_, "DELETE FROM history WHERE job_id = ?1");
  Statement jobs(db_, "DELETE FROM jobs WHERE job_id = ?1");
  if (!history.ok() || !jobs.ok()) return Error("cannot prepare the job bound");
  for (const std::string& job : victims) {
    for (Statement* st : {&history, &jobs}) {
      sqlite3_reset(st->get());
      st->Text(1, job);
      if (sqlite3_step(st->get()) != SQLITE_DONE) return Error("cannot apply the job bound");
    }
    jobs_.erase(job);
    TLOG(kInfo) << "history database: job " << SafeForLog(job, 64)
                << " dropped to keep the file within " << options_.max_jobs
                << " jobs (--history-max-jobs)";
  }
  return absl::OkStatus();
}

absl::Status HistoryStore::BoundEvidenceLocked(const std::set<std::string>& jobs) {
  // Drops the oldest evidence matching `where` (bound to ?1 when `job` is
  // set) until at most `max` bytes remain.
  auto bound = [this](const char* total_sql, const char* oldest_sql, const std::string* job,
                      int64_t max) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    int64_t total = 0;
    {
      Statement st(db_, total_sql);
      if (!st.ok()) return Error("cannot prepare the evidence bound");
      if (job != nullptr) st.Text(1, *job);
      if (sqlite3_step(st.get()) != SQLITE_ROW) return Error("cannot apply the evidence bound");
      total = st.ColumnInt(0);
    }
    if (total <= max) return absl::OkStatus();
    std::vector<std::pair<int64_t, int64_t>> oldest;  // (id, bytes)
    {
      Statement st(db_, oldest_sql);
      if (!st.ok()) return Error("cannot prepare the evidence bound");
      if (job != nullptr) st.Text(1, *job);
      int step;
      while (total > max && (step = sqlite3_step(st.get())) == SQLITE_ROW) {
        oldest.emplace_back(st.ColumnInt(0), st.ColumnInt(1));
        total -= st.ColumnInt(1);
      }
    }
    Statement clear(db_, "UPDATE history SET evidence = '' WHERE id = ?1");
    if (!clear.ok()) return Error("cannot prepare the evidence bound");
    for (const auto& [id, bytes] : oldest) {
      sqlite3_reset(clear.get());
      clear.Int(1, id);
      if (sqlite3_step(clear.get()) != SQLITE_DONE) return Error("cannot apply the evidence bound");
    }
    return absl::OkStatus();
  };
  for (const std::string& job : jobs) {
    if (absl::Status s =
            bound("SELECT COALESCE(SUM(LENGTH(CAST(evidence AS BLOB))), 0) FROM history WHERE "
                  "job_id = ?1",
                  "SELECT id, LENGTH(CAST(evidence AS BLOB)) FROM history WHERE job_id = ?1 AND "
                  "evidence != '' ORDER BY id",
                  &job, kMaxEvidenceBytesPerJob);
        !s.ok()) {
      return s;
    }
  }
  return bound("SELECT COALESCE(SUM(LENGTH(CAST(evidence AS BLOB))), 0) FROM history",
               "SELECT id, LENGTH(CAST(evidence AS BLOB)) FROM history WHERE evidence != '' "
               "ORDER BY id",
               nullptr, kMaxEvidenceBytesStored);
}

absl::StatusOr<std::string> HistoryStore::Evidence(const std::string& job_id, int64_t seq) {
  absl::MutexLock lock(&mu_);
  Statement st(db_, "SELECT evidence FROM history WHERE job_id = ?1 AND seq = ?2 ORDER BY id DESC");
  if (!st.ok()) return Error("cannot prepare a read");
  st.Text(1, job_id);
  st.Int(2, seq);
  const int step = sqlite3_step(st.get());
  if (step == SQLITE_DONE) {
    return absl::NotFoundError(absl::StrCat("no entry ", seq, " of job ", SafeForLog(job_id, 64),
                                            " in the history database (retention)"));
  }
  if (step != SQLITE_ROW) return Error("cannot read");
  std::string evidence = st.ColumnText(0);
  if (evidence.empty()) {
    return absl::NotFoundError(
        absl::StrCat("the evidence of entry ", seq, " of job ", SafeForLog(job_id, 64),
                     " was dropped to keep the history database within its bounds"));
  }
  return evidence;
}

absl::StatusOr<StoredHistory> HistoryStore::Load(int max_jobs, int max_per_job) const {
  absl::MutexLock lock(&mu_);
  StoredHistory stored;
  // The jobs heard from last (a summary's time, else the newest entry's).
  constexpr char kRecent[] =
      "SELECT job_id FROM (SELECT job_id, MAX(at_unix_ms) AS at FROM history GROUP BY job_id "
      "UNION ALL SELECT job_id, updated_unix_ms AS at FROM jobs) GROUP BY job_id ORDER BY MAX(at) "
      "DESC LIMIT ?1";
  {
    Statement st(db_, absl::StrCat("SELECT job_id, record FROM jobs WHERE job_id IN (", kRecent,
                                   ") ORDER BY updated_unix_ms")
                          .c_str());
    if (!st.ok()) return Error("cannot prepare the load");
    st.Int(1, max_jobs);
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      v1::JobRecord record;
      const std::string job_id = st.ColumnText(0);
      if (!record.ParseFromString(st.ColumnText(1))) {
        TLOG(kWarning) << "history database " << SafeForLog(options_.path, 256)
                       << ": the summary of job " << SafeForLog(job_id, 64)
                       << " is unreadable; its entries are restored without it";
        continue;
      }
      stored.jobs.emplace_back(job_id, std::move(record));
    }
    if (rc != SQLITE_DONE) return Error("cannot read");
  }
  Statement st(
      db_, absl::StrCat("SELECT job_id, kind, at_unix_ms, round, node_id, cause, "
                        "SUBSTR(evidence, 1, ?3), LENGTH(CAST(evidence AS BLOB)), verdict, seq "
                        "FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY id DESC) "
                        "AS newer FROM history WHERE job_id IN (",
                        kRecent, ")) WHERE newer <= ?2 ORDER BY id")
               .c_str());
  if (!st.ok()) return Error("cannot prepare the load");
  st.Int(1, max_jobs);
  st.Int(2, max_per_job);
  st.Int(3, static_cast<int64_t>(kEvidenceSummaryBytes));
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    HistoryRecord r;
    r.job_id = st.ColumnText(0);
    const int kind = sqlite3_column_int(st.get(), 1);
    r.entry.set_kind(v1::HistoryEntry::Kind_IsValid(kind)
                         ? static_cast<v1::HistoryEntry::Kind>(kind)
                         : v1::HistoryEntry::KIND_UNSPECIFIED);
    r.entry.set_at_unix_ms(st.ColumnInt(2));
    r.entry.set_round(static_cast<uint64_t>(st.ColumnInt(3)));
    r.entry.set_node_id(st.ColumnText(4));
    r.entry.set_cause(st.ColumnText(5));
    std::string evidence = st.ColumnText(6);
    FitText(&evidence, kEvidenceSummaryBytes);
    r.entry.set_evidence(std::move(evidence));
    r.entry.set_evidence_bytes(static_cast<int>(st.ColumnInt(7)));
    r.entry.set_verdict(st.ColumnText(8));
    r.entry.set_seq(st.ColumnInt(9));
    stored.entries.push_back(std::move(r));
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

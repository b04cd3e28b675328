#include "controller/history_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
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
    "  record BLOB NOT NULL);"
    // The bounds read only what they need: the entries with evidence (few),
    // per job and oldest first, and the jobs past the age limit.
    "CREATE INDEX IF NOT EXISTS history_evidence_job ON history(job_id, id) WHERE evidence != '';"
    "CREATE INDEX IF NOT EXISTS history_evidence ON history(id) WHERE evidence != '';"
    "CREATE INDEX IF NOT EXISTS jobs_updated ON jobs(updated_unix_ms);";

// Version 1 had no seq and no jobs table: each entry's id numbers it (an
// entry with seq 0 is one an interrupted upgrade did not number).
constexpr char kAddSeq[] = "ALTER TABLE history ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;";
constexpr char kNumberEntries[] = "UPDATE history SET seq = id WHERE seq = 0;";

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
  // Steps to the end, adding up column 0 of each row (a DELETE's
  // RETURNING); false on an error.
  bool SumRows(int64_t* sum) {
    int step;
    while ((step = sqlite3_step(stmt_)) == SQLITE_ROW) *sum += ColumnInt(0);
    return step == SQLITE_DONE;
  }

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

// The file `path` (--db) names: a symbolic link (to a file on another
// volume) is followed, as SQLite follows it for its -wal and -shm, and a
// dangling one names the file to make there.
absl::StatusOr<std::string> FileOf(const std::string& path) {
  std::string file = path;
  for (int links = 0; links < 8; ++links) {
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return file;
    char target[PATH_MAX];
    const ssize_t n = ::readlink(file.c_str(), target, sizeof(target) - 1);
    if (n <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "history database ", path, ": cannot read the link ", file, ": ", std::strerror(errno)));
    }
    std::string next(target, static_cast<size_t>(n));
    if (next[0] != '/') {
      // Relative to the link's directory, as the kernel reads it.
      const size_t slash = file.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash + 1);
      char real[PATH_MAX];
      if (::realpath(dir.c_str(), real) == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("history database ", path, ": ", dir, ": ", std::strerror(errno)));
      }
      next = absl::StrCat(real, "/", next);
    }
    file = std::move(next);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "history database ", path, ": more than 8 symbolic links; point --db at the file"));
}

// Adds up, for Stats::scan_steps, the rows each statement stepped through
// in full table scans.
int CountScans(unsigned type, void* context, void* statement, void*) {
  if (type == SQLITE_TRACE_PROFILE) {
    static_cast<std::atomic<int64_t>*>(context)->fetch_add(sqlite3_stmt_status(
        static_cast<sqlite3_stmt*>(statement), SQLITE_STMTSTATUS_FULLSCAN_STEP, /*reset=*/1));
  }
  return 0;
}

constexpr char kEvidenceBytes[] = "LENGTH(CAST(evidence AS BLOB))";

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
  absl::StatusOr<std::string> file = FileOf(options.path);
  if (!file.ok()) return file.status();
  if (*file != options.path) {
    TLOG(kInfo) << "history database " << SafeForLog(options.path, 256) << " is a link to "
                << SafeForLog(*file, 256);
    options.path = *std::move(file);
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
  sqlite3_trace_v2(db, SQLITE_TRACE_PROFILE, CountScans, &store->scan_steps_);
  // journal_mode answers a row; sqlite3_exec ignores it. The -wal is cut
  // back to kWalSizeLimit once checkpointed.
  if (absl::Status s =
          store->ExecLocked(absl::StrCat("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                                         "PRAGMA journal_size_limit=",
                                         kWalSizeLimit, ";")
                                .c_str());
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
  if (absl::Status s = store->MigrateLocked(version); !s.ok()) return s;
  // What the bounds need, read once: each job's latest time, and the
  // evidence in all (then kept as the store writes).
  {
    Statement st(db,
                 "SELECT job_id, MAX(at) FROM (SELECT job_id, MAX(at_unix_ms) AS at FROM history "
                 "GROUP BY job_id UNION ALL SELECT job_id, updated_unix_ms AS at FROM jobs) GROUP "
                 "BY job_id");
    if (!st.ok()) return store->Error("cannot read the jobs");
    int step;
    while ((step = sqlite3_step(st.get())) == SQLITE_ROW) {
      store->jobs_[st.ColumnText(0)] = st.ColumnInt(1);
    }
    if (step != SQLITE_DONE) return store->Error("cannot read the jobs");
  }
  {
    Statement st(db, absl::StrCat("SELECT COALESCE(SUM(", kEvidenceBytes,
                                  "), 0) FROM history WHERE evidence != ''")
                         .c_str());
    if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return store->Error("cannot read");
    store->evidence_bytes_ = st.ColumnInt(0);
  }
  Pending pending;
  if (absl::Status s = store->PruneLocked({}, &pending); !s.ok()) return s;
  if (absl::Status s = store->BoundJobsLocked(&pending); !s.ok()) return s;
  store->ApplyLocked(pending);
  return store;
}

absl::Status HistoryStore::MigrateLocked(int version) {
  // One transaction: a controller stopped in the middle leaves the file as
  // it was. What is upgraded is what the table lacks, whatever user_version
  // says (a schema-1 controller numbered its file only after making it).
  if (absl::Status s = ExecLocked("BEGIN IMMEDIATE"); !s.ok()) return s;
  auto fail = [this](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ExecLocked("ROLLBACK").IgnoreError();
    return s;
  };
  bool has_history = false, has_seq = false;
  {
    Statement st(db_, "PRAGMA table_info(history)");
    if (!st.ok()) return fail(Error("cannot read the schema"));
    int step;
    while ((step = sqlite3_step(st.get())) == SQLITE_ROW) {
      has_history = true;
      has_seq = has_seq || st.ColumnText(1) == "seq";
    }
    if (step != SQLITE_DONE) return fail(Error("cannot read the schema"));
  }
  const bool upgrade = has_history && (!has_seq || version < kSchemaVersion);
  if (has_history && !has_seq) {
    if (absl::Status s = ExecLocked(kAddSeq); !s.ok()) return fail(s);
  }
  if (upgrade) {
    if (absl::Status s = ExecLocked(kNumberEntries); !s.ok()) return fail(s);
  }
  if (absl::Status s = ExecLocked(kSchema); !s.ok()) return fail(s);
  if (absl::Status s =
          ExecLocked(absl::StrCat("PRAGMA user_version=", kSchemaVersion, ";").c_str());
      !s.ok()) {
    return fail(s);
  }
  if (absl::Status s = ExecLocked("COMMIT"); !s.ok()) return fail(s);
  if (upgrade) {
    TLOG(kInfo) << "history database " << SafeForLog(options_.path, 256)
                << " upgraded from schema 1 to " << kSchemaVersion;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HistoryStore::MoveAside(const std::string& link, absl::Time now) {
  absl::StatusOr<std::string> file = FileOf(link);
  if (!file.ok()) return file.status();
  const std::string& path = *file;
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
  // What the transaction changes, applied once it is committed (a batch
  // rolled back changes nothing).
  Pending pending;
  auto heard = [&pending](const std::string& job, int64_t at) {
    auto [it, added] = pending.heard.emplace(job, at);
    if (!added) it->second = std::max(it->second, at);
  };
  std::set<std::string> touched;
  bool evidence = false;
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
      heard(r.job_id, e.at_unix_ms());
      pending.evidence += static_cast<int64_t>(e.evidence().size());
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
      heard(job_id, now);
    }
  }
  if (absl::Status s = PruneLocked(touched, &pending); !s.ok()) return fail(s);
  if (evidence) {
    if (absl::Status s = BoundEvidenceLocked(touched, &pending); !s.ok()) return fail(s);
  }
  const bool new_job = std::any_of(pending.heard.begin(), pending.heard.end(),
                                   [this](const auto& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                     return jobs_.count(h.first) == 0;
                                   });
  if (new_job) {
    if (absl::Status s = BoundJobsLocked(&pending); !s.ok()) return fail(s);
  }
  // SQLite rolls a failed COMMIT back itself (a full disk), and recommends
  // a ROLLBACK anyway: the next batch must not find a transaction open.
  if (absl::Status s = ExecLocked("COMMIT"); !s.ok()) return fail(s);
  ApplyLocked(pending);
  return absl::OkStatus();
}

void HistoryStore::ApplyLocked(const Pending& pending) {
  for (const auto& [job, at] : pending.heard) {
    auto [it, added] = jobs_.emplace(job, at);
    if (!added) it->second = std::max(it->second, at);
  }
  for (const std::string& job : pending.dropped) jobs_.erase(job);
  // Jobs the age limit emptied (every entry and the summary older).
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    it = it->second < pending.cutoff ? jobs_.erase(it) : std::next(it);
  }
  evidence_bytes_ += pending.evidence;
}

absl::Status HistoryStore::PruneLocked(const std::set<std::string>& jobs, Pending* pending) {
  if (options_.max_age > absl::ZeroDuration()) {
    const int64_t cutoff = absl::ToUnixMillis(clock_->Now() - options_.max_age);
    Statement st(
        db_, absl::StrCat("DELETE FROM history WHERE at_unix_ms < ?1 RETURNING ", kEvidenceBytes)
                 .c_str());
    if (!st.ok()) return Error("cannot prepare the age limit");
    st.Int(1, cutoff);
    int64_t gone = 0;
    if (!st.SumRows(&gone)) return Error("cannot apply the age limit");
    pending->evidence -= gone;
    Statement jobs_st(db_, "DELETE FROM jobs WHERE updated_unix_ms < ?1");
    if (!jobs_st.ok()) return Error("cannot prepare the age limit");
    jobs_st.Int(1, cutoff);
    if (sqlite3_step(jobs_st.get()) != SQLITE_DONE) return Error("cannot apply the age limit");
    pending->cutoff = cutoff;
  }
  Statement st(db_, absl::StrCat("DELETE FROM history WHERE job_id = ?1 AND id <= (SELECT id FROM "
                                 "history WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2) "
                                 "RETURNING ",
                                 kEvidenceBytes)
                        .c_str());
  if (!st.ok()) return Error("cannot prepare the retention");
  for (const std::string& job : jobs) {
    sqlite3_reset(st.get());
    st.Text(1, job);
    st.Int(2, options_.max_entries_per_job);
    int64_t gone = 0;
    if (!st.SumRows(&gone)) return Error("cannot apply the retention");
    pending->evidence -= gone;
  }
  return absl::OkStatus();
}

absl::Status HistoryStore::BoundJobsLocked(Pending* pending) {
  // Every job the file holds once the transaction commits, by the time it
  // was last heard from (from memory: the file is not read for it).
  std::vector<std::pair<int64_t, std::string>> jobs;
  jobs.reserve(jobs_.size() + pending->heard.size());
  for (const auto& [job, at] : jobs_) {
    auto h = pending->heard.find(job);
    jobs.emplace_back(h == pending->heard.end() ? at : std::max(at, h->second), job);
  }
  for (const auto& [job, at] : pending->heard) {
    if (jobs_.count(job) == 0) jobs.emplace_back(at, job);
  }
  jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                            [&](const auto& j) { return j.first < pending->cutoff; }),
             jobs.end());
  if (static_cast<int>(jobs.size()) <= options_.max_jobs) return absl::OkStatus();
  // The jobs heard from longest ago go whole.
  const size_t excess = jobs.size() - static_cast<size_t>(options_.max_jobs);
  std::partial_sort(jobs.begin(), jobs.begin() + static_cast<std::ptrdiff_t>(excess), jobs.end());
  Statement history(
      db_,
      absl::StrCat("DELETE FROM history WHERE job_id = ?1 RETURNING ", kEvidenceBytes).c_str());
  Statement summary(db_, "DELETE FROM jobs WHERE job_id = ?1");
  if (!history.ok() || !summary.ok()) return Error("cannot prepare the job bound");
  for (size_t i = 0; i < excess; ++i) {
    const std::string& job = jobs[i].second;
    sqlite3_reset(history.get());
    history.Text(1, job);
    int64_t gone = 0;
    if (!history.SumRows(&gone)) return Error("cannot apply the job bound");
    pending->evidence -= gone;
    sqlite3_reset(summary.get());
    summary.Text(1, job);
    if (sqlite3_step(summary.get()) != SQLITE_DONE) return Error("cannot apply the job bound");
    pending->dropped.push_back(job);
    TLOG(kInfo) << "history database: job " << SafeForLog(job, 64)
                << " dropped to keep the file within " << options_.max_jobs
                << " jobs (--history-max-jobs)";
  }
  return absl::OkStatus();
}

absl::Status HistoryStore::BoundEvidenceLocked(const std::set<std::string>& jobs,
                                               Pending* pending) {
  // Clears the oldest evidence `oldest_sql` lists (bound to ?1 when `job`
  // is set) until at most `max` of `total` bytes remain.
  auto bound = [this, pending](int64_t total, const std::string& oldest_sql, const std::string* job,
                               int64_t max) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (total <= max) return absl::OkStatus();
    std::vector<std::pair<int64_t, int64_t>> oldest;  // (id, bytes)
    {
      Statement st(db_, oldest_sql.c_str());
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
      pending->evidence -= bytes;
    }
    return absl::OkStatus();
  };
  // Per job: its entries with evidence only (an index holds them).
  const std::string job_total = absl::StrCat("SELECT COALESCE(SUM(", kEvidenceBytes,
                                             "), 0) FROM history WHERE job_id = ?1 AND "
                                             "evidence != ''");
  const std::string job_oldest =
      absl::StrCat("SELECT id, ", kEvidenceBytes,
                   " FROM history WHERE job_id = ?1 AND evidence != '' ORDER BY id");
  for (const std::string& job : jobs) {
    int64_t total = 0;
    {
      Statement st(db_, job_total.c_str());
      if (!st.ok()) return Error("cannot prepare the evidence bound");
      st.Text(1, job);
      if (sqlite3_step(st.get()) != SQLITE_ROW) return Error("cannot apply the evidence bound");
      total = st.ColumnInt(0);
    }
    if (absl::Status s = bound(total, job_oldest, &job, kMaxEvidenceBytesPerJob); !s.ok()) {
      return s;
    }
  }
  // In all: the total is kept as the store writes.
  return bound(
      evidence_bytes_ + pending->evidence,
      absl::StrCat("SELECT id, ", kEvidenceBytes, " FROM history WHERE evidence != '' ORDER BY id"),
      nullptr, kMaxEvidenceBytesStored);
}

HistoryStore::Stats HistoryStore::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{scan_steps_.load(), evidence_bytes_};
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

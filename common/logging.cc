#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainlet {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
absl::Mutex g_prefix_mu;
std::string* g_prefix ABSL_GUARDED_BY(g_prefix_mu) = new std::string();
std::string* g_last_error ABSL_GUARDED_BY(g_prefix_mu) = new std::string();
constexpr size_t kMaxLastError = 4096;

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void SetLogPrefix(absl::string_view prefix) {
  absl::MutexLock lock(&g_prefix_mu);
  g_prefix->assign(prefix.data(), prefix.size());
}

std::string LastErrorMessage() {
  absl::MutexLock lock(&g_prefix_mu);
  return *g_last_error;
}

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  if (text == "debug") {
    *level = LogLevel::kDebug;
  } else if (text == "info") {
    *level = LogLevel::kInfo;
  } else if (text == "warning" || text == "warn") {
    *level = LogLevel::kWarning;
  } else if (text == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

LogLimiter::LogLimiter(int burst, absl::Duration period, Clock* clock)
    : burst_(burst), period_(period), clock_(clock ? clock : Clock::Monotonic()) {}

bool LogLimiter::Allow(int64_t* suppressed) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (now - window_start_ >= period_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

std::string SuppressedNote(int64_t suppressed) {
  if (suppressed == 0) return "";
  return absl::StrCat(" (", suppressed, " similar line", suppressed == 1 ? "" : "s",
                      " suppressed)");
}

namespace internal {
LogLine::~LogLine() {
  std::string prefix;
  const std::string message = stream_.str();
  {
    absl::MutexLock lock(&g_prefix_mu);
    prefix = *g_prefix;
    if (level_ == LogLevel::kError) g_last_error->assign(message.substr(0, kMaxLastError));
  }
  std::string line = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  line += ' ';
  line += LevelLetter(level_);
  line += " trainlet";
  if (!prefix.empty()) {
    line += '[';
    line += prefix;
    line += ']';
  }
  line += ' ';
  line += message;
  line += '\n';
  // One write(2) per line keeps lines whole when threads log concurrently.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}
}  // namespace internal
}  // namespace trainlet

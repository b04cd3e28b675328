// Minimal leveled logger for the agent's own lines (worker output does not go
// through here). Lines go to stderr, each prefixed with who is speaking:
//
//   2026-11-21T10:00:00.123Z I trainlet[node=pod-0 rank=0 inc=1a2b3c4d] joined round 1
//
// Why our own: Abseil 20220623 has no absl/log, and glog installs its own
// signal handlers and log files, which a PID 1 must not have. This is ~100
// lines, thread-safe (one write(2) per line), and allocation-light.
#ifndef TRAINLET_COMMON_LOGGING_H_
#define TRAINLET_COMMON_LOGGING_H_

#include <cstdint>
#include <sstream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace trainlet {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Process-wide settings; safe to call at any time from any thread.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// The "[node=... rank=... inc=...]" part; empty until the agent knows it.
void SetLogPrefix(absl::string_view prefix);
// Parses "debug", "info", "warning", "error"; false on anything else.
bool ParseLogLevel(absl::string_view text, LogLevel* level);
// The message of the latest ERROR line (without time, level and prefix; at
// most 4 KiB), or "" when there was none: why a command failed where its
// caller knows only the exit code (the termination message,
// launcher/termination_log.h).
std::string LastErrorMessage();

// Makes text from the network, the environment or flags safe to put in a log
// line: at most `max` input bytes are kept (longer text ends in
// "...(+N bytes)"), and every byte that is not printable ASCII, plus the
// backslash, is escaped (\n, \r, \t, \\, \xNN), so a value can neither
// forge a log line nor flood the log. Quotes are left alone.
std::string SafeForLog(absl::string_view text, size_t max = 128);

// Rate limit for a repeated log line (rejected requests, say): lets `burst`
// lines through per `period` and counts the others, so that the next line let
// through can say how many were dropped. Thread-safe.
//
//   int64_t suppressed = 0;
//   if (limiter.Allow(&suppressed)) TLOG(kWarning) << "..." << SuppressedNote(suppressed);
class LogLimiter {
 public:
  LogLimiter(int burst, absl::Duration period, Clock* clock = nullptr);
  // True when the caller may log now; *suppressed is then the number of
  // lines dropped since the last one let through.
  bool Allow(int64_t* suppressed);

 private:
  const int burst_;
  const absl::Duration period_;
  Clock* const clock_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// "" for 0, else " (N similar lines suppressed)".
std::string SuppressedNote(int64_t suppressed);

namespace internal {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Turns `TLOG(...) << a << b` into a void expression: `&` binds more loosely
// than `<<`, so the whole chain is its right operand (glog's idiom).
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace trainlet

// TLOG is one expression, not an `if` with an `else`: in an unbraced
// `if (x) TLOG(kInfo) << ...;` gcc saw the macro's `else` as ambiguous
// (-Wdangling-else), and a caller's own `else` can only be the caller's. A
// disabled level evaluates none of the operands.
#define TLOG_ENABLED(level) (::trainlet::LogLevel::level >= ::trainlet::GetLogLevel())
#define TLOG(level)                                           \
  !TLOG_ENABLED(level) ? static_cast<void>(0)                 \
                       : ::trainlet::internal::LogVoidify() & \
                             ::trainlet::internal::LogLine(::trainlet::LogLevel::level).stream()
// TLOG with a level decided at run time (a LogLevel value).
#define TLOG_AT(level_value)                  \
  ((level_value) < ::trainlet::GetLogLevel()) \
      ? static_cast<void>(0)                  \
      : ::trainlet::internal::LogVoidify() & ::trainlet::internal::LogLine(level_value).stream()

#endif  // TRAINLET_COMMON_LOGGING_H_

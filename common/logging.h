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

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace trainlet {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Process-wide settings; safe to call at any time from any thread.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// The "[node=... rank=... inc=...]" part; empty until the agent knows it.
void SetLogPrefix(absl::string_view prefix);
// Parses "debug", "info", "warning", "error"; false on anything else.
bool ParseLogLevel(absl::string_view text, LogLevel* level);

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
}  // namespace internal
}  // namespace trainlet

#define TLOG_ENABLED(level) (::trainlet::LogLevel::level >= ::trainlet::GetLogLevel())
#define TLOG(level)           \
  if (!TLOG_ENABLED(level)) { \
  } else                      \
    ::trainlet::internal::LogLine(::trainlet::LogLevel::level).stream()

#endif  // TRAINLET_COMMON_LOGGING_H_

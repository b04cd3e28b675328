#include "common/logging.h"

#include <string>

#include "gtest/gtest.h"

namespace trainlet {
namespace {

TEST(SafeForLog, PrintableAsciiPassesThrough) {
  EXPECT_EQ(SafeForLog("node-0.job_a \"quoted\""), "node-0.job_a \"quoted\"");
}

TEST(SafeForLog, NewlinesAndControlBytesCannotForgeALine) {
  EXPECT_EQ(SafeForLog("evil\n2026-11-21T10:00:00.000Z I trainlet forged"),
            "evil\\n2026-11-21T10:00:00.000Z I trainlet forged");
  EXPECT_EQ(SafeForLog(std::string("a\0b\r\t\\\x7f\xc3\xa4", 9)),
            "a\\x00b\\r\\t\\\\\\x7f\\xc3\\xa4");
}

TEST(SafeForLog, TruncatesAndSaysHowMuchWasLeftOut) {
  const std::string big(900 * 1024, 'x');
  const std::string out = SafeForLog(big);
  EXPECT_EQ(out, std::string(128, 'x') + "...(+921472 bytes)");
  EXPECT_EQ(SafeForLog("abcdef", 3), "abc...(+3 bytes)");
  EXPECT_EQ(SafeForLog("abc", 3), "abc");
}

TEST(LastErrorMessage, IsTheLatestErrorLinesMessage) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kError);  // (what is logged here stays quiet but errors)
  TLOG(kWarning) << "not an error";
  TLOG(kError) << "first";
  TLOG(kError) << "second: " << 2;
  TLOG(kWarning) << "a warning does not replace it";
  EXPECT_EQ(LastErrorMessage(), "second: 2");
  SetLogLevel(saved);
}

TEST(TlogAt, TakesTheLevelAtRunTime) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  const LogLevel debug = LogLevel::kDebug;
  TLOG_AT(debug) << count();  // below the level: not even evaluated
  EXPECT_EQ(evaluated, 0);
  const LogLevel error = LogLevel::kError;
  TLOG_AT(error) << "at run time " << count();
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(LastErrorMessage(), "at run time 1");
  SetLogLevel(saved);
}

// The old TLOG (`if (!enabled) {} else stream`) put an `if` with an `else`
// inside the caller's unbraced `if`, and gcc warned that the `else` was
// ambiguous (-Wdangling-else). Made an error here, this file did not compile
// with it.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wdangling-else"
TEST(Tlog, IsOneStatementInAnUnbracedIf) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  for (bool taken : {true, false}) {
    if (taken) TLOG(kError) << "alone " << count();
  }
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(LastErrorMessage(), "alone 1");
  const LogLevel error = LogLevel::kError;
  for (bool taken : {true, false}) {
    if (taken) TLOG_AT(error) << "at run time " << count();
  }
  EXPECT_EQ(evaluated, 2);
  EXPECT_EQ(LastErrorMessage(), "at run time 2");
  evaluated = 0;
  int else_ran = 0;
  for (bool taken : {true, false}) {
    if (taken)
      TLOG(kError) << "taken " << count();
    else
      ++else_ran;
  }
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(else_ran, 1);
  EXPECT_EQ(LastErrorMessage(), "taken 1");
  // Below the level: nothing is evaluated, and the `else` is still the
  // caller's.
  for (bool taken : {true, false}) {
    if (taken)
      TLOG(kDebug) << count();
    else
      ++else_ran;
  }
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(else_ran, 2);
  const LogLevel debug = LogLevel::kDebug;
  for (bool taken : {true, false}) {
    if (taken)
      TLOG_AT(debug) << count();
    else
      ++else_ran;
  }
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(else_ran, 3);
  SetLogLevel(saved);
}
#pragma GCC diagnostic pop

TEST(LogLimiter, LetsABurstThroughThenCountsUntilTheNextPeriod) {
  SimulatedClock clock;
  LogLimiter limiter(3, absl::Seconds(10), &clock);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(limiter.Allow(&suppressed));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 1001);
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0);
}

TEST(SuppressedNote, SaysHowManyWereDropped) {
  EXPECT_EQ(SuppressedNote(0), "");
  EXPECT_EQ(SuppressedNote(1), " (1 similar line suppressed)");
  EXPECT_EQ(SuppressedNote(42), " (42 similar lines suppressed)");
}

}  // namespace
}  // namespace trainlet

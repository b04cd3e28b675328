#include "common/exit_codes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet {
namespace {

TEST(ExitCodes, RendezvousErrors_MapToDocumentedCodes) {
  EXPECT_EQ(ExitCodeForRendezvousError(absl::UnauthenticatedError("x")), kExitRejected);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::PermissionDeniedError("x")), kExitRejected);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::AlreadyExistsError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::ResourceExhaustedError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::UnavailableError("x")), kExitUnavailable);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::DeadlineExceededError("x")), kExitUnavailable);
  EXPECT_EQ(ExitCodeForRendezvousError(absl::InternalError("x")), kExitInternal);
}

EndingFacts Facts(Ending ending) {
  EndingFacts f;
  f.ending = ending;
  return f;
}

TEST(ExitPolicy, FollowsTheContract) {
  EXPECT_EQ(ExitCodeFor(Facts(Ending::kJobFinished)), 0);

  EndingFacts failed = Facts(Ending::kJobFailed);
  EXPECT_EQ(ExitCodeFor(failed), kExitPeerFailed);
  failed.any_failure = 143;  // our workers, stopped by us: not this node's failure
  EXPECT_EQ(ExitCodeFor(failed), kExitPeerFailed);
  failed.signal = SIGTERM;
  EXPECT_EQ(ExitCodeFor(failed), 128 + SIGTERM);
  failed.running_failure = 3;
  EXPECT_EQ(ExitCodeFor(failed), 3);
  failed.restarts_exhausted = true;  // the same on every node, the failing one too
  EXPECT_EQ(ExitCodeFor(failed), kExitRestartsExhausted);

  EndingFacts signal = Facts(Ending::kSignal);
  signal.signal = SIGINT;
  EXPECT_EQ(ExitCodeFor(signal), 128 + SIGINT);
  signal.any_failure = 5;  // tini: the first failing worker's code
  EXPECT_EQ(ExitCodeFor(signal), 5);

  EndingFacts fenced = Facts(Ending::kFenced);
  fenced.running_failure = 3;
  EXPECT_EQ(ExitCodeFor(fenced), kExitUnavailable);

  EndingFacts lost = Facts(Ending::kCoordinatorLost);
  EXPECT_EQ(ExitCodeFor(lost), kExitUnavailable);
  lost.running_failure = 9;
  EXPECT_EQ(ExitCodeFor(lost), 9);
  EXPECT_EQ(ExitCodeFor(Facts(Ending::kCoordinatorLostAfterSuccess)), 0);

  EndingFacts no_verdict = Facts(Ending::kNoVerdict);
  no_verdict.running_failure = 7;
  EXPECT_EQ(ExitCodeFor(no_verdict), 7);

  EndingFacts join = Facts(Ending::kJoinFailed);
  join.given_code = kExitRejected;
  EXPECT_EQ(ExitCodeFor(join), kExitRejected);
  EndingFacts spawn = Facts(Ending::kSpawnFailed);
  spawn.given_code = kExitNotFound;
  EXPECT_EQ(ExitCodeFor(spawn), kExitNotFound);
}

TEST(ExitPolicy, EveryEndingHasARule) {
  for (Ending e :
       {Ending::kJobFinished, Ending::kJobFailed, Ending::kSignal, Ending::kFenced,
        Ending::kCoordinatorLost, Ending::kCoordinatorLostAfterSuccess, Ending::kNoVerdict,
        Ending::kJoinFailed, Ending::kSpawnFailed, Ending::kNodeUnhealthy}) {
    EndingFacts f = Facts(e);
    f.signal = SIGTERM;  // a signal ending always has one
    EXPECT_NE(ExitCodeFor(f), kExitInternal) << EndingName(e);
  }
}

TEST(ExitPolicy, AHungWorkerIsThisNodesRunningFailure) {
  EndingFacts f = Facts(Ending::kJobFailed);
  f.running_failure = kExitWorkerHung;
  f.any_failure = kExitWorkerHung;
  EXPECT_EQ(ExitCodeFor(f), kExitWorkerHung);
  f.restarts_exhausted = true;
  EXPECT_EQ(ExitCodeFor(f), kExitRestartsExhausted);
  f.ending = Ending::kNoVerdict;
  EXPECT_EQ(ExitCodeFor(f), kExitWorkerHung);
}

TEST(ExitPolicy, ErrorsMapToTheirDocumentedCodes) {
  EXPECT_EQ(ExitCodeForConfigError(absl::InvalidArgumentError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForConfigError(absl::FailedPreconditionError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForConfigError(absl::InternalError("x")), kExitInternal);
  EXPECT_EQ(ExitCodeForSpawnError(absl::NotFoundError("x")), kExitNotFound);
  EXPECT_EQ(ExitCodeForSpawnError(absl::PermissionDeniedError("x")), kExitNotExecutable);
  EXPECT_EQ(ExitCodeForSpawnError(absl::ResourceExhaustedError("x")), kExitOsError);
  EXPECT_EQ(ExitCodeForSpawnError(absl::InternalError("x")), kExitInternal);
  EXPECT_EQ(ExitCodeForPlanError(absl::DeadlineExceededError("x")), kExitUnavailable);
  EXPECT_EQ(ExitCodeForPlanError(absl::InvalidArgumentError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForPlanError(absl::FailedPreconditionError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForPlanError(absl::NotFoundError("x")), kExitNotFound);
  EXPECT_EQ(ExitCodeForServerStartError(absl::FailedPreconditionError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForServerStartError(absl::DataLossError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForServerStartError(absl::UnavailableError("x")), kExitOsError);
  EXPECT_EQ(ExitCodeForStatusQuery(absl::NotFoundError("x")), kExitStatusJobUnknown);
  EXPECT_EQ(ExitCodeForStatusQuery(absl::UnauthenticatedError("x")), kExitRejected);
  EXPECT_EQ(ExitCodeForStatusQuery(absl::FailedPreconditionError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForStatusQuery(absl::UnavailableError("x")), kExitUnavailable);
  const absl::Status pre = absl::FailedPreconditionError("x");
  EXPECT_EQ(ExitCodeForJoinError(pre, JoinRefusal::kFenced), kExitUnavailable);
  EXPECT_EQ(ExitCodeForJoinError(pre, JoinRefusal::kJobFailed), kExitPeerFailed);
  EXPECT_EQ(ExitCodeForJoinError(pre, JoinRefusal::kRestartsExhausted), kExitRestartsExhausted);
  EXPECT_EQ(ExitCodeForJoinError(pre, JoinRefusal::kJobSucceeded), kExitSuccess);
  EXPECT_EQ(ExitCodeForJoinError(pre, JoinRefusal::kNone), kExitConfig);
}

// Whether a row of ExitCodeTable() covers `code`: "64", "1-63, 83-125",
// "128+N" (a signal's code).
bool RowCovers(absl::string_view codes, int code) {
  for (absl::string_view part : absl::StrSplit(codes, ", ")) {
    if (part == "128+N") {
      if (code > kExitSignalBase && code < kExitSignalBase + 65) return true;
      continue;
    }
    std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    int lo = 0;
    int hi = 0;
    EXPECT_TRUE(absl::SimpleAtoi(range.front(), &lo) && absl::SimpleAtoi(range.back(), &hi))
        << "a row of the table that is not codes: " << codes;
    if (code >= lo && code <= hi) return true;
  }
  return false;
}

std::string RowFor(int code) {
  for (const ExitCodeRow& row : ExitCodeTable()) {
    if (RowCovers(row.codes, code)) return row.codes;
  }
  return "";
}

// Every code any mapping of this file can give, for every input it can be
// given, has its row in the table that --help prints and docs/exit-codes.md
// holds (HasTheRowsOfTheDocs): a new mapping or code without a row fails here.
TEST(ExitPolicy, EveryCodeAMappingGivesIsInTheTable) {
  std::set<int> given;
  for (int c = 0; c <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++c) {
    const absl::Status s(static_cast<absl::StatusCode>(c), c == 0 ? "" : "x");
    for (int (*map)(const absl::Status&) :
         {&ExitCodeForRendezvousError, &ExitCodeForConfigError, &ExitCodeForSpawnError,
          &ExitCodeForPlanError, &ExitCodeForServerStartError}) {
      given.insert(map(s));
    }
    for (JoinRefusal r : {JoinRefusal::kNone, JoinRefusal::kFenced, JoinRefusal::kJobFailed,
                          JoinRefusal::kRestartsExhausted, JoinRefusal::kJobSucceeded}) {
      given.insert(ExitCodeForJoinError(s, r));
    }
  }
  // The codes an ending carries: a join's or a spawn's error, 81.
  std::set<int> carried = given;
  carried.insert(kExitNodeUnhealthy);
  for (Ending e :
       {Ending::kJobFinished, Ending::kJobFailed, Ending::kSignal, Ending::kFenced,
        Ending::kCoordinatorLost, Ending::kCoordinatorLostAfterSuccess, Ending::kNoVerdict,
        Ending::kJoinFailed, Ending::kSpawnFailed, Ending::kNodeUnhealthy}) {
    for (int worker : {0, 3, static_cast<int>(kExitWorkerHung), 128 + SIGKILL}) {
      for (int sig : {0, SIGTERM}) {
        for (bool exhausted : {false, true}) {
          for (int code : carried) {
            EndingFacts f;
            f.ending = e;
            f.running_failure = worker;
            f.any_failure = worker;
            f.signal = sig;
            f.restarts_exhausted = exhausted;
            f.given_code = code;
            given.insert(ExitCodeFor(f));
          }
        }
      }
    }
  }
  for (int code : given) EXPECT_NE(RowFor(code), "") << code << " has no row in the table";
  // Each of trainlet's own verdicts has a row of its own, not a worker range's.
  for (int code : {kExitUsage, kExitUnavailable, kExitInternal, kExitOsError, kExitPeerFailed,
                   kExitRejected, kExitConfig, kExitRestartsExhausted, kExitWorkerHung,
                   kExitNodeUnhealthy, kExitNotExecutable, kExitNotFound}) {
    EXPECT_EQ(RowFor(code), std::to_string(code));
    EXPECT_EQ(given.count(code), 1u) << code << ": a row no mapping gives";
  }
}

// The exit code of a child process that runs `body`.
int RunChild(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(99);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return ExitCodeFromWaitStatus(status);
}

TEST(ExitCodes, WaitStatus_ExitCodeAndSignal) {
  EXPECT_EQ(RunChild([] { _exit(3); }), 3);
  EXPECT_EQ(RunChild([] { _exit(0); }), 0);
  EXPECT_EQ(RunChild([] { raise(SIGKILL); }), 128 + SIGKILL);
  EXPECT_EQ(RunChild([] { raise(SIGTERM); }), 128 + SIGTERM);
}

// The codes of docs/exit-codes.md's table (its first column).
std::set<std::string> DocumentedCodes() {
  std::ifstream in(std::string(TRAINLET_SOURCE_DIR) + "/docs/exit-codes.md");
  std::set<std::string> codes;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "| Code |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!absl::StartsWith(line, "|")) break;
    if (absl::StartsWith(line, "|---")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    codes.insert(std::string(absl::StripAsciiWhitespace(cells.at(1))));
  }
  return codes;
}

TEST(ExitCodeTable, HasTheRowsOfTheDocs) {
  std::set<std::string> ours;
  for (const ExitCodeRow& row : ExitCodeTable()) ours.insert(row.codes);
  EXPECT_EQ(ours, DocumentedCodes());
}

TEST(ExitCodeTable, HelpListsEveryOwnCodeOnceAndWraps) {
  const std::string help = FormatExitCodeTable(78);
  for (int code : {kExitUsage, kExitUnavailable, kExitInternal, kExitOsError, kExitPeerFailed,
                   kExitRejected, kExitConfig, kExitRestartsExhausted, kExitWorkerHung,
                   kExitNodeUnhealthy, kExitNotExecutable, kExitNotFound}) {
    EXPECT_THAT(help, ::testing::HasSubstr("\n  " + std::to_string(code) + " ")) << code;
  }
  EXPECT_THAT(help, ::testing::HasSubstr("  1-63, 83-125\n           a local worker's"));
  for (absl::string_view line : absl::StrSplit(help, '\n')) EXPECT_LE(line.size(), 78u) << line;
}

}  // namespace
}  // namespace trainlet

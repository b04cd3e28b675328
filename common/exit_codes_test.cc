#include "common/exit_codes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
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
  EXPECT_THAT(help, ::testing::HasSubstr("  1-63, 82-125\n           a local worker's"));
  for (absl::string_view line : absl::StrSplit(help, '\n')) EXPECT_LE(line.size(), 78u) << line;
}

}  // namespace
}  // namespace trainlet

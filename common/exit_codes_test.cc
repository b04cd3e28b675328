#include "common/exit_codes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace
}  // namespace trainlet

#include "launcher/signal_wait.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "launcher/signals.h"

namespace trainlet::launcher {
namespace {

class SignalWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(PrepareProcessForSupervision().ok());
    absl::StatusOr<std::unique_ptr<SignalWait>> created = SignalWait::Create();
    ASSERT_TRUE(created.ok()) << created.status();
    wait_ = *std::move(created);
    // What an earlier test left pending is not this test's.
    while (wait_->AwaitTerminatingSignal(absl::ZeroDuration()) != 0) {
    }
  }

  std::unique_ptr<SignalWait> wait_;
};

TEST_F(SignalWaitTest, TerminatingSignal_IsReturned) {
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::Seconds(30)), SIGTERM);
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::InfiniteDuration()), SIGHUP);
}

TEST_F(SignalWaitTest, UserSignals_AreNotTheEnd_AndTheWaitEndsAtItsTimeout) {
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::Milliseconds(20)), 0);
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::Seconds(30)), SIGINT);
}

TEST_F(SignalWaitTest, ASignalSentFromAnotherThread_EndsAWaitInProgress) {
  std::thread sender([] {
    absl::SleepFor(absl::Milliseconds(50));
    kill(getpid(), SIGQUIT);
  });
  EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::Seconds(30)), SIGQUIT);
  sender.join();
}

// As PID 1 (or a subreaper) the process adopts orphans: one that exits must
// not stay a zombie while the command serves.
TEST_F(SignalWaitTest, ChildrenThatExit_AreReaped) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(3);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  bool reaped = false;
  while (!reaped && absl::Now() < give_up) {
    EXPECT_EQ(wait_->AwaitTerminatingSignal(absl::Milliseconds(50)), 0);
    // WNOWAIT looks without reaping: ECHILD once it is no child to wait for.
    siginfo_t info{};
    reaped = waitid(P_PID, child, &info, WEXITED | WNOHANG | WNOWAIT) == -1 && errno == ECHILD;
  }
  EXPECT_TRUE(reaped) << "child " << child << " was not reaped";
  if (!reaped) waitpid(child, nullptr, 0);
}

TEST(SignalWait, Create_WithoutBlockedSignals_IsFailedPrecondition) {
  absl::Status status;
  std::thread thread([&status] {
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
    status = SignalWait::Create().status();
  });
  thread.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

}  // namespace
}  // namespace trainlet::launcher

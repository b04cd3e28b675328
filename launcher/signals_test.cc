#include "launcher/signals.h"

#include <signal.h>
#include <sys/prctl.h>

#include "gtest/gtest.h"

namespace trainlet {
namespace launcher {
namespace {

TEST(Signals, ForwardedSignals_AreTheTiniSet) {
  EXPECT_EQ(ForwardedSignals(),
            (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}));
}

TEST(Signals, IsTerminatingSignal_OnlyForTermIntHupQuit) {
  EXPECT_TRUE(IsTerminatingSignal(SIGTERM));
  EXPECT_TRUE(IsTerminatingSignal(SIGINT));
  EXPECT_TRUE(IsTerminatingSignal(SIGHUP));
  EXPECT_TRUE(IsTerminatingSignal(SIGQUIT));
  EXPECT_FALSE(IsTerminatingSignal(SIGUSR1));
  EXPECT_FALSE(IsTerminatingSignal(SIGUSR2));
  EXPECT_FALSE(IsTerminatingSignal(SIGCHLD));
}

TEST(Signals, Prepare_BlocksIgnoresAndBecomesSubreaper_Idempotently) {
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(PrepareProcessForSupervision().ok());
    sigset_t blocked;
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &blocked), 0);
    EXPECT_EQ(sigismember(&blocked, SIGCHLD), 1);
    for (int sig : ForwardedSignals()) EXPECT_EQ(sigismember(&blocked, sig), 1) << sig;

    struct sigaction action;
    ASSERT_EQ(sigaction(SIGPIPE, nullptr, &action), 0);
    EXPECT_EQ(action.sa_handler, SIG_IGN);

    int subreaper = 0;
    ASSERT_EQ(prctl(PR_GET_CHILD_SUBREAPER, &subreaper, 0, 0, 0), 0);
    EXPECT_EQ(subreaper, 1);
  }
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

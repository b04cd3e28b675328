#include "launcher/signals.h"

#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>

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

    // SIGPIPE: a closed stdout must not kill the agent. SIGTTOU/SIGTTIN, as
    // tini: the agent takes the terminal back from a foreground worker.
    for (int sig : {SIGPIPE, SIGTTOU, SIGTTIN}) {
      struct sigaction action;
      ASSERT_EQ(sigaction(sig, nullptr, &action), 0);
      EXPECT_EQ(action.sa_handler, SIG_IGN) << sig;
    }
    // Job-control signals are not relayed.
    for (int sig : {SIGTSTP, SIGTTIN, SIGTTOU}) {
      EXPECT_EQ(sigismember(&blocked, sig), 0) << sig;
      EXPECT_EQ(std::count(ForwardedSignals().begin(), ForwardedSignals().end(), sig), 0) << sig;
    }

    int subreaper = 0;
    ASSERT_EQ(prctl(PR_GET_CHILD_SUBREAPER, &subreaper, 0, 0, 0), 0);
    EXPECT_EQ(subreaper, 1);
  }
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

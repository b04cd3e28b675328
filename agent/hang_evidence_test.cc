#include "agent/hang_evidence.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A real child in its own process group: a shell that starts a sleeping
// child of its own, then sleeps; both are in the group.
class ChildGroup {
 public:
  ChildGroup() {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      execl("/bin/sh", "sh", "-c", "sleep 30 & exec sleep 31", static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid_, pid_);
  }
  ~ChildGroup() {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

TEST(HangEvidence, ReadsEveryProcessAndThreadOfARealGroup) {
  ChildGroup child;
  std::vector<ProcessEvidence> processes;
  int total = 0;
  // Until the shell has forked and exec'd and both sleep.
  auto settled = [&] {
    if (total != 2) return false;
    for (const ProcessEvidence& p : processes) {
      if (p.name != "sleep" || p.state != 'S') return false;
    }
    return true;
  };
  for (int i = 0; i < 500; ++i) {
    processes = ReadProcessGroup(child.pid(), &total);
    if (settled()) break;
    usleep(10000);
  }
  ASSERT_EQ(total, 2);
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0].pid, child.pid()) << "the leader first";
  for (const ProcessEvidence& p : processes) {
    EXPECT_EQ(p.name, "sleep");
    EXPECT_EQ(p.state, 'S');
    EXPECT_EQ(p.threads_total, 1);
    ASSERT_EQ(p.threads.size(), 1u);
    EXPECT_EQ(p.threads[0].tid, p.pid);
    EXPECT_EQ(p.threads[0].state, 'S');
    // What the kernel shows depends on its config and our privileges;
    // sleep(1) waits in a nanosleep-family function when it is shown.
    if (!p.threads[0].wchan.empty() && p.threads[0].wchan != "0") {
      EXPECT_THAT(p.threads[0].wchan, HasSubstr("sleep"));
    }
  }
  EXPECT_EQ(ProcessGroupOf(processes[1].pid), child.pid());
  EXPECT_EQ(ProcessGroupOf(getpid()), getpgrp());
}

TEST(HangEvidence, AGoneOrMissingProcessYieldsNothing) {
  int total = -1;
  EXPECT_TRUE(ReadProcessGroup(-1, &total).empty());
  EXPECT_EQ(total, 0);
  EXPECT_TRUE(ReadProcessGroup(1 << 30, &total, "/nonexistent").empty());
  ProcessEvidence gone = ReadProcessEvidence(1 << 30);
  EXPECT_EQ(gone.state, '?');
  EXPECT_TRUE(gone.threads.empty());
  EXPECT_EQ(ProcessGroupOf(1 << 30), -1);
}

TEST(HangEvidence, ToText_NamesEverythingAndEscapesWhatCameFromOutside) {
  HangEvidence e;
  e.round = 3;
  e.local_rank = 1;
  e.global_rank = 5;
  e.pid = 1234;
  e.silence = absl::Milliseconds(10042);
  e.hang_timeout = absl::Seconds(10);
  e.last_progress = "step=12 loss=0.5";
  e.processes_total = 9;
  ProcessEvidence p;
  p.pid = 1234;
  p.name = "python\x1b[31m";
  p.state = 'D';
  p.threads_total = 70;
  p.threads.push_back({1235, "pt_nccl", 'S', "futex_wait_queue"});
  e.processes.push_back(p);
  e.output_relayed = true;
  e.output_tail = {"epoch 1", "evil \x1b]0;title\x07"};
  e.traceback_note = "sent SIGUSR1 to pid 1234";
  e.traceback = "Thread 0x01 (most recent call first):\n  File \"train.py\", line 9 in step\n";
  const std::string text = e.ToText();
  EXPECT_THAT(text, HasSubstr("worker rank 5 (local rank 1, pid 1234), round 3: no progress for "
                              "10.042s (--hang-timeout=10s)"));
  EXPECT_THAT(text, HasSubstr("last progress: step=12 loss=0.5"));
  EXPECT_THAT(text, HasSubstr("processes in its group: 9 (first 1 shown)"));
  EXPECT_THAT(text, HasSubstr("state D, 70 thread(s), first 1 shown"));
  EXPECT_THAT(text, HasSubstr("tid 1235 (pt_nccl) S wchan=futex_wait_queue"));
  EXPECT_THAT(text, HasSubstr("| epoch 1"));
  EXPECT_THAT(text, HasSubstr("python traceback: sent SIGUSR1 to pid 1234"));
  EXPECT_THAT(text, HasSubstr("|   File \"train.py\", line 9 in step"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b"))) << "control bytes are escaped";
  EXPECT_THAT(text, Not(HasSubstr("\x07")));

  e.output_relayed = false;
  EXPECT_THAT(e.ToText(), HasSubstr("not relayed by the agent (run with --prefix-output)"));
}

}  // namespace
}  // namespace trainlet::agent

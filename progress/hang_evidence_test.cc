#include "progress/hang_evidence.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
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
  e.declared = true;
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
                              "10.042s (--hang-timeout=10s): declared hung"));
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
  EXPECT_THAT(
      e.ToText(),
      HasSubstr("not relayed by the agent (run with --prefix-output or --progress-from-output)"));

  // A worker whose evidence was taken for another's hang.
  e.declared = false;
  e.silence = absl::InfiniteDuration();
  e.why = "node n0 declared worker rank 0 hung";
  e.place = ClassifyTraceback(e.traceback);
  const std::string other = e.ToText();
  EXPECT_THAT(other, HasSubstr("round 3: no progress reported: taken because node n0 declared "
                               "worker rank 0 hung\n"));
  EXPECT_THAT(other, HasSubstr("python stack: not in a collective: train.py:9 in step\n"));

  // One that had exited: no process, so no pid (not "pid -1").
  e.exited = true;
  e.pid = -1;
  EXPECT_THAT(e.ToText(), HasSubstr("worker rank 5 (local rank 1), round 3: no progress reported "
                                    "(it had exited): taken because"));
}

// What Python's faulthandler wrote in two gloo workers of torch 1.13
// (Debian 12): rank 0 waits in all_reduce for rank 1, which sleeps.
constexpr const char* kInAllReduce =
    "Current thread 0x00007f98080c82c0 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1541 "
    "in all_reduce\n"
    "  File \"/tmp/train.py\", line 12 in step\n"
    "  File \"/tmp/train.py\", line 13 in <module>\n";
constexpr const char* kSleeping =
    "Current thread 0x00007fa2066012c0 (most recent call first):\n"
    "  File \"/tmp/train.py\", line 11 in step\n"
    "  File \"/tmp/train.py\", line 13 in <module>\n";

TEST(ClassifyTraceback, ACollectiveOfTheMainThread_OrWhereItIsElse) {
  StackPlace in = ClassifyTraceback(kInAllReduce);
  EXPECT_EQ(in.stack, v1::WorkerEvidence::IN_COLLECTIVE);
  EXPECT_EQ(in.where, "all_reduce (distributed_c10d.py:1541) from train.py:12 in step");
  StackPlace out = ClassifyTraceback(kSleeping);
  EXPECT_EQ(out.stack, v1::WorkerEvidence::NOT_IN_COLLECTIVE);
  EXPECT_EQ(out.where, "train.py:11 in step");
  EXPECT_EQ(ClassifyTraceback("").stack, v1::WorkerEvidence::STACK_UNKNOWN);
  EXPECT_EQ(ClassifyTraceback("garbage\n\x01File\n").stack, v1::WorkerEvidence::STACK_UNKNOWN);
}

TEST(ClassifyTraceback, TheMainThreadDecides_TheLastDumpCounts) {
  // A data-loader thread in a barrier does not make the main thread's sleep
  // a collective; wrappers around the collective name the API called.
  const std::string threads = absl::StrCat(
      "Thread 0x0000000000000002 (most recent call first):\n"
      "  File \"/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", line "
      "3000 in barrier\n"
      "  File \"/venv/lib/python3.11/threading.py\", line 975 in run\n\n",
      kSleeping);
  EXPECT_EQ(ClassifyTraceback(threads).stack, v1::WorkerEvidence::NOT_IN_COLLECTIVE);
  const std::string wrapped =
      "Current thread 0x01 (most recent call first):\n"
      "  File \"/x/torch/distributed/distributed_c10d.py\", line 2050 in all_reduce\n"
      "  File \"/x/torch/distributed/c10d_logger.py\", line 75 in wrapper\n"
      "  File \"/w/train.py\", line 30 in main\n"
      "  File \"/w/train.py\", line 40 in <module>\n";
  EXPECT_EQ(ClassifyTraceback(wrapped).where,
            "wrapper (c10d_logger.py:75) from train.py:30 in main");
  // Two dumps of one process (an earlier SIGUSR1): a thread id seen again
  // starts the later one, which counts.
  const std::string later =
      "Current thread 0x00007f98080c82c0 (most recent call first):\n"
      "  File \"/tmp/train.py\", line 11 in step\n"
      "  File \"/tmp/train.py\", line 13 in <module>\n";
  const StackPlace place = ClassifyTraceback(absl::StrCat(kInAllReduce, "\n", later));
  EXPECT_EQ(place.stack, v1::WorkerEvidence::NOT_IN_COLLECTIVE);
  EXPECT_EQ(place.where, "train.py:11 in step");
}

TEST(Summarize, StepAgeAndTheMainThreadsWait_Bounded) {
  HangEvidence e;
  e.local_rank = 1;
  e.last_progress = "loss=0.5 step=41 pid=77";
  e.silence = absl::Milliseconds(10042);
  e.traceback = kSleeping;
  e.traceback_pid = 77;
  ProcessEvidence p;
  p.pid = 77;
  p.threads.push_back({78, "gloo", 'S', "futex_wait_queue"});
  p.threads.push_back({77, "python3", 'S', "hrtimer_nanosleep"});
  e.processes.push_back(p);
  e.place = PlaceOf(e);
  v1::WorkerEvidence w = Summarize(e);
  EXPECT_EQ(w.local_rank(), 1);
  EXPECT_EQ(w.stack(), v1::WorkerEvidence::NOT_IN_COLLECTIVE);
  EXPECT_EQ(w.where(), "train.py:11 in step; main thread S in hrtimer_nanosleep");
  EXPECT_EQ(w.step(), 41);
  EXPECT_EQ(w.progress_age_ms(), 10042);
  EXPECT_FALSE(w.exited());

  e.place.where = std::string(500, '\x01');
  e.last_progress = "step=x";
  e.silence = absl::InfiniteDuration();
  w = Summarize(e);
  EXPECT_LE(w.where().size(), 200u);
  EXPECT_EQ(w.where().find('\x01'), std::string::npos);
  EXPECT_EQ(w.step(), -1);
  EXPECT_EQ(w.progress_age_ms(), -1);
}

}  // namespace
}  // namespace trainlet::agent

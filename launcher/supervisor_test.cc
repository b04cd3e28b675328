#include "launcher/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "launcher/command_resolver.h"
#include "launcher/process_test_util.h"
#include "launcher/signals.h"

namespace trainlet {
namespace launcher {
namespace {

using testing::CaptureFd;
using testing::ProcessState;
using testing::ReadFile;
using testing::ShellWorker;
using testing::TempDir;
using testing::WaitFor;
using testing::WriteFile;
using EventType = Supervisor::EventType;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// The leader exits at once, leaving a child in its group that ignores
// SIGTERM; the child writes its pid once the trap is in place.
constexpr char kLeaveTermIgnoringGrandchild[] =
    "sh -c 'trap \"\" TERM; echo $$ > \"$DIR/grandchild\"; exec sleep 30' &";

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

pid_t ReadPidFile(const std::string& path) {
  pid_t pid = -1;
  if (!WaitFor([&] { return !ReadFile(path).empty() && ReadFile(path).back() == '\n'; },
               kTimeout)) {
    return -1;
  }
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &pid)) return -1;
  return pid;
}

class SupervisorTest : public ::testing::Test {
 protected:
  // gtest runs all tests in this process: this must be (and is) idempotent.
  static void SetUpTestSuite() { ASSERT_TRUE(PrepareProcessForSupervision().ok()); }

  void SetUp() override {
    Supervisor::Options options;
    options.stdout_fd = out_.fd();
    options.stderr_fd = err_.fd();
    absl::StatusOr<std::unique_ptr<Supervisor>> created = Supervisor::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    supervisor_ = std::move(*created);
  }

  // Waits for the next worker exit, failing on anything else.
  WorkerExit NextExit() {
    Supervisor::Event event = supervisor_->Wait(kTimeout);
    EXPECT_EQ(event.type, EventType::kWorkerExited);
    return event.exit;
  }

  CaptureFd out_;
  CaptureFd err_;
  std::unique_ptr<Supervisor> supervisor_;
  TempDir dir_;
};

TEST_F(SupervisorTest, ExitCode_IsPassedThrough) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 3", "/tmp", 2, 5)}).ok());
  pid_t pid = supervisor_->worker_pid(2);
  WorkerExit exit = NextExit();
  EXPECT_EQ(exit.exit_code, 3);
  EXPECT_EQ(exit.local_rank, 2);
  EXPECT_EQ(exit.global_rank, 5);
  EXPECT_EQ(exit.pid, pid);
  EXPECT_EQ(supervisor_->running_count(), 0);
}

TEST_F(SupervisorTest, KilledBySignal_Is128PlusSignal) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("kill -9 $$")}).ok());
  EXPECT_EQ(NextExit().exit_code, kExitSignalBase + SIGKILL);
}

TEST_F(SupervisorTest, SeveralExits_AreReportedOnePerWait) {
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker("exit 1", "/tmp", 0), ShellWorker("exit 2", "/tmp", 1)})
          .ok());
  WorkerExit first = NextExit();
  WorkerExit second = NextExit();
  std::set<std::pair<int, int>> got = {{first.local_rank, first.exit_code},
                                       {second.local_rank, second.exit_code}};
  EXPECT_EQ(got, (std::set<std::pair<int, int>>{{0, 1}, {1, 2}}));
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Start_MissingCommand_ReturnsNotFoundAndLeavesNoChild) {
  WorkerSpec ok_worker = ShellWorker("sleep 30", "/tmp", 0);
  WorkerSpec missing = ShellWorker("", "/tmp", 1);
  missing.argv = {"trainlet-no-such-command", "--flag"};
  absl::Status status = supervisor_->Start({ok_worker, missing});
  ASSERT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("'trainlet-no-such-command'"), absl::string_view::npos);
  EXPECT_EQ(ExitCodeForSpawnError(status), kExitNotFound);
  EXPECT_EQ(supervisor_->running_count(), 0);
  // The already started `sleep 30` was killed and reaped: no child at all.
  int wait_status;
  EXPECT_EQ(waitpid(-1, &wait_status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // ...and its exit is not reported as an event.
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Start_ExecFormatError_IsReportedThroughErrorPipe) {
  WriteFile(dir_.File("garbage"), "\x01\x02\x03 not a program\n", 0755);
  WorkerSpec spec = ShellWorker("");
  spec.argv = {dir_.File("garbage")};
  absl::Status status = supervisor_->Start({spec});
  ASSERT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(ExitCodeForSpawnError(status), kExitNotExecutable);
  EXPECT_NE(status.message().find("Exec format error"), absl::string_view::npos) << status;
  int wait_status;
  EXPECT_EQ(waitpid(-1, &wait_status, WNOHANG), -1);
}

TEST_F(SupervisorTest, Start_MissingInterpreter_IsNotFoundWithHint) {
  WriteFile(dir_.File("script"), "#!/nonexistent/python\n", 0755);
  WorkerSpec spec = ShellWorker("");
  spec.argv = {dir_.File("script")};
  absl::Status status = supervisor_->Start({spec});
  ASSERT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("interpreter"), absl::string_view::npos) << status;
}

TEST_F(SupervisorTest, Start_WhileRunning_IsFailedPrecondition) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("sleep 30")}).ok());
  EXPECT_EQ(supervisor_->Start({ShellWorker("exit 0")}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(supervisor_->running_count(), 1);
}

TEST_F(SupervisorTest, Start_AgainAfterExit_StartsNewRound) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 4")}).ok());
  EXPECT_EQ(NextExit().exit_code, 4);
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 5")}).ok());
  EXPECT_EQ(NextExit().exit_code, 5);
}

TEST_F(SupervisorTest, EachWorker_IsInItsOwnProcessGroup) {
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker("sleep 30", "/tmp", 0), ShellWorker("sleep 30", "/tmp", 1)})
          .ok());
  for (int rank : {0, 1}) {
    pid_t pid = supervisor_->worker_pid(rank);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(getpgid(pid), pid) << "rank " << rank;
  }
  EXPECT_NE(getpgid(supervisor_->worker_pid(0)), getpgrp());
  EXPECT_EQ(supervisor_->running_count(), 2);
}

TEST_F(SupervisorTest, Environment_IsPassedExactly_AndUnprefixedOutputGoesToFd) {
  WorkerSpec spec;
  spec.argv = {"env"};
  spec.env = {"PATH=/usr/bin:/bin", "FOO=bar baz", "EMPTY="};
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_EQ(out_.Contents(), "PATH=/usr/bin:/bin\nFOO=bar baz\nEMPTY=\n");
}

TEST_F(SupervisorTest, Worker_HasEmptySignalMaskAndNoIgnoredSignals) {
  // The test process blocks SIGCHLD/TERM/... and ignores SIGPIPE, like the agent.
  WorkerSpec spec;
  spec.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  spec.env = {"PATH=/usr/bin:/bin"};
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_EQ(out_.Contents(), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST_F(SupervisorTest, PrefixedOutput_GoesLineByLineToMatchingStream) {
  WorkerSpec spec =
      ShellWorker("printf 'a\\nb\\n'; printf 'err1\\n' >&2; printf partial", "/tmp", 0, 7);
  spec.prefix_output = true;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  // Nothing pumps the pipes until Wait(): the output is all still in them.
  pid_t pid = supervisor_->worker_pid(0);
  ASSERT_TRUE(WaitFor([&] { return ProcessState(pid) == 'Z'; }, kTimeout));
  EXPECT_EQ(out_.Contents(), "");
  EXPECT_EQ(NextExit().exit_code, 0);
  // All of it is written by the time the exit is reported.
  EXPECT_EQ(out_.Contents(), "[rank 7] a\n[rank 7] b\n[rank 7] partial\n");
  EXPECT_EQ(err_.Contents(), "[rank 7] err1\n");
}

TEST_F(SupervisorTest, PrefixedOutput_OfConcurrentWorkers_NeverMixesWithinALine) {
  const int kLines = 2000;
  std::vector<WorkerSpec> specs;
  for (int rank : {0, 1}) {
    WorkerSpec spec = ShellWorker(
        absl::StrCat(
            "i=0; while [ $i -lt ", kLines,
            " ]; do echo \"line $i of a reasonably long worker output\"; i=$((i+1)); done"),
        "/tmp", rank, 10 + rank);
    spec.prefix_output = true;
    specs.push_back(spec);
  }
  ASSERT_TRUE(supervisor_->Start(specs).ok());
  NextExit();
  NextExit();
  std::vector<std::string> lines = absl::StrSplit(out_.Contents(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u * kLines);
  int per_rank[2] = {0, 0};
  for (const std::string& line : lines) {
    int rank = line.rfind("[rank 10] ", 0) == 0 ? 0 : line.rfind("[rank 11] ", 0) == 0 ? 1 : -1;
    ASSERT_NE(rank, -1) << line;
    EXPECT_EQ(line.substr(10),
              absl::StrCat("line ", per_rank[rank]++, " of a reasonably long worker output"));
  }
}

TEST_F(SupervisorTest, ForwardedSignal_IsReportedAsSignalEvent) {
  // Blocked by PrepareProcessForSupervision, so it waits in the signalfd;
  // without that it would kill the test binary.
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  Supervisor::Event event = supervisor_->Wait(kTimeout);
  EXPECT_EQ(event.type, EventType::kSignal);
  EXPECT_EQ(event.signal, SIGUSR1);
}

TEST_F(SupervisorTest, Sigchld_IsInternal) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 0")}).ok());
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkerExited);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Wake_FromAnotherThread_InterruptsWait) {
  std::thread waker([this] {
    absl::SleepFor(absl::Milliseconds(30));
    supervisor_->Wake();
  });
  absl::Time start = absl::Now();
  Supervisor::Event event = supervisor_->Wait(kTimeout);
  waker.join();
  EXPECT_EQ(event.type, EventType::kWakeup);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(SupervisorTest, Wait_TimesOut) {
  absl::Time start = absl::Now();
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_EQ(supervisor_->Wait(absl::ZeroDuration()).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Create_WithoutBlockedSignals_IsFailedPrecondition) {
  absl::Status status;
  std::thread thread([&status] {
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
    status = Supervisor::Create(Supervisor::Options()).status();
  });
  thread.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST_F(SupervisorTest, SignalAll_ReachesEveryProcessInTheGroup) {
  const std::string script =
      "(trap 'echo term > \"$DIR/child\"; exit 0' TERM; echo > \"$DIR/child_ready\";"
      " while :; do sleep 0.05; done) &"
      " trap 'echo term > \"$DIR/leader\"; exit 0' TERM; echo > \"$DIR/leader_ready\"; wait";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return FileExists(dir_.File("child_ready")) && FileExists(dir_.File("leader_ready")); },
      kTimeout));
  supervisor_->SignalAll(SIGTERM);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(dir_.File("child")) == "term\n"; }, kTimeout));
  EXPECT_EQ(ReadFile(dir_.File("leader")), "term\n");
}

TEST_F(SupervisorTest, StopAll_WorkerIgnoringTerm_IsKilledAfterGrace) {
  const std::string script = "trap '' TERM; echo > \"$DIR/ready\"; while :; do sleep 0.05; done";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path(), 0, 3)}).ok());
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_.File("ready")); }, kTimeout));
  const absl::Duration grace = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  std::vector<WorkerExit> exits = supervisor_->StopAll(grace);
  absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, grace);
  EXPECT_LT(elapsed, grace + absl::Seconds(2));
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, kExitSignalBase + SIGKILL);
  EXPECT_EQ(exits[0].global_rank, 3);
  EXPECT_EQ(supervisor_->running_count(), 0);
}

TEST_F(SupervisorTest, StopAll_WorkerHonouringTerm_EndsBeforeGrace) {
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker("exit 5", "/tmp", 0), ShellWorker("sleep 30", "/tmp", 1)})
          .ok());
  pid_t quick = supervisor_->worker_pid(0);
  ASSERT_TRUE(WaitFor([&] { return ProcessState(quick) == 'Z'; }, kTimeout));
  absl::Time start = absl::Now();
  std::vector<WorkerExit> exits = supervisor_->StopAll(absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Includes the exit that happened before StopAll and was never Wait()ed for.
  ASSERT_EQ(exits.size(), 2u);
  std::set<std::pair<int, int>> got = {{exits[0].local_rank, exits[0].exit_code},
                                       {exits[1].local_rank, exits[1].exit_code}};
  EXPECT_EQ(got, (std::set<std::pair<int, int>>{{0, 5}, {1, kExitSignalBase + SIGTERM}}));
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, StopAll_KeepsSignalsArrivingMeanwhileForWait) {
  const std::string script =
      "trap 'kill -USR1 $PPID; exit 0' TERM; echo > \"$DIR/ready\"; while :; do sleep 0.05; done";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_.File("ready")); }, kTimeout));
  std::vector<WorkerExit> exits = supervisor_->StopAll(absl::Seconds(5));
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 0);
  Supervisor::Event event = supervisor_->Wait(absl::Seconds(2));
  EXPECT_EQ(event.type, EventType::kSignal);
  EXPECT_EQ(event.signal, SIGUSR1);
}

TEST_F(SupervisorTest, StopAll_KillsGroupMembersLeftBehindByExitedLeader) {
  const std::string script = kLeaveTermIgnoringGrandchild;
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  pid_t grandchild = ReadPidFile(dir_.File("grandchild"));
  ASSERT_GT(grandchild, 0);
  EXPECT_NE(ProcessState(grandchild), 0);
  EXPECT_EQ(supervisor_->running_count(), 0);

  const absl::Duration grace = absl::Milliseconds(200);
  absl::Time start = absl::Now();
  EXPECT_TRUE(supervisor_->StopAll(grace).empty());
  EXPECT_GE(absl::Now() - start, grace);  // the group was given its grace period
  EXPECT_EQ(ProcessState(grandchild), 0)
      << "grandchild " << grandchild << " survived (or unreaped)";
}

TEST_F(SupervisorTest, Destructor_KillsWorkersAndGroupMembersLeftBehind) {
  const std::string script = kLeaveTermIgnoringGrandchild;
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker(script, dir_.path(), 0), ShellWorker("sleep 30", "/tmp", 1)})
          .ok());
  pid_t sleeper = supervisor_->worker_pid(1);
  pid_t grandchild = ReadPidFile(dir_.File("grandchild"));
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(NextExit().local_rank, 0);  // the leader of the grandchild's group is gone
  supervisor_.reset();
  EXPECT_EQ(ProcessState(sleeper), 0);
  EXPECT_EQ(ProcessState(grandchild), 0);
}

TEST_F(SupervisorTest, OrphanedGrandchildInNewSession_IsReaped) {
  // The worker leaves a child in its own session (so no group kill reaches
  // it) and exits; the child is reparented to us (subreaper) and must be
  // reaped when it dies, without being reported as a worker.
  const std::string script = "setsid sleep 0.3 & echo $! > \"$DIR/orphan\"";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  pid_t orphan = ReadPidFile(dir_.File("orphan"));
  ASSERT_GT(orphan, 0);
  absl::Time deadline = absl::Now() + kTimeout;
  while (ProcessState(orphan) != 0 && absl::Now() < deadline) {
    EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(100)).type, EventType::kTimeout);
  }
  EXPECT_EQ(ProcessState(orphan), 0) << "orphan " << orphan << " not reaped";
  EXPECT_TRUE(testing::ZombieChildrenOf(getpid()).empty());
}

// Not a fixture test: the Supervisor lives in a helper process that is
// SIGKILLed, so no destructor runs; PR_SET_PDEATHSIG must kill the worker.
TEST(SupervisorPdeathsig, WorkerDiesWhenSupervisorIsKilled) {
  ASSERT_TRUE(PrepareProcessForSupervision().ok());
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    close(pipe_fds[0]);
    absl::StatusOr<std::unique_ptr<Supervisor>> supervisor =
        Supervisor::Create(Supervisor::Options());
    if (!supervisor.ok()) _exit(1);
    WorkerSpec spec;
    spec.argv = {"sleep", "30"};
    spec.env = {"PATH=/usr/bin:/bin"};
    if (!(*supervisor)->Start({spec}).ok()) _exit(2);
    pid_t pid = (*supervisor)->worker_pid(0);
    if (write(pipe_fds[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(3);
    for (;;) pause();
  }
  close(pipe_fds[1]);
  pid_t sleeper = -1;
  ssize_t n = read(pipe_fds[0], &sleeper, sizeof(sleeper));
  close(pipe_fds[0]);
  kill(helper, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(helper, &status, 0), helper);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(sleeper))) << "helper failed: " << status;

  // Reparented to this process (a subreaper): dead means zombie or reaped.
  EXPECT_TRUE(WaitFor(
      [&] {
        char state = ProcessState(sleeper);
        return state == 0 || state == 'Z';
      },
      absl::Seconds(2)))
      << "worker " << sleeper << " outlived its supervisor";
  if (ProcessState(sleeper) != 'Z') kill(sleeper, SIGKILL);
  if (waitpid(sleeper, &status, 0) == sleeper) {
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

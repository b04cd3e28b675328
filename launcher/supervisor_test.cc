#include "launcher/supervisor.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/command_resolver.h"
#include "launcher/process_test_util.h"
#include "launcher/signals.h"
#include "launcher/worker_spawner.h"

namespace trainlet {
namespace launcher {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace supervisor_test {

using testing::CaptureFd;
using ::testing::HasSubstr;
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

  void SetUp() override { Recreate(Supervisor::Options()); }

  // Replaces the Supervisor with one made with `options` (output to out_
  // and err_).
  void Recreate(Supervisor::Options options) {
    supervisor_.reset();
    options.stdout_fd = out_.fd();
    options.stderr_fd = err_.fd();
    absl::StatusOr<std::unique_ptr<Supervisor>> created = Supervisor::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    supervisor_ = std::move(*created);
  }
  // Signals for a group whose leader exited are held for `drain` (zero:
  // they reach it at once).
  void RecreateWithDrainTime(absl::Duration drain) {
    Supervisor::Options options;
    options.group_drain_timeout = drain;
    Recreate(options);
  }
  // Runs `script` as the worker: it writes the pid of a stray it leaves in
  // its group to $DIR/stray and exits with `exit_code`. A SIGTERM then
  // stops the stray at once, under the 30 s drain time this sets.
  void ExpectStrayStoppedAtOnce(const std::string& script, int exit_code);
  // Helper restarts after 100 ms, 200 ms, 400 ms, 400 ms...
  void RecreateWithQuickRestarts() {
    Supervisor::Options options;
    options.helper_backoff.initial = absl::Milliseconds(100);
    options.helper_backoff.max = absl::Milliseconds(400);
    Recreate(options);
  }

  // Waits for the next worker exit, failing on anything else.
  ProcessExit NextExit() {
    Supervisor::Event event = supervisor_->Wait(kTimeout);
    EXPECT_EQ(event.type, EventType::kWorkerExited);
    return event.exit;
  }

  // Waits for the next event, failing unless it is of `type`.
  Supervisor::Event Next(EventType type) {
    Supervisor::Event event = supervisor_->Wait(kTimeout);
    EXPECT_EQ(event.type, type);
    return event;
  }

  CaptureFd out_;
  CaptureFd err_;
  std::unique_ptr<Supervisor> supervisor_;
  TempDir dir_;
};

ProcessSpec ShellHelper(const std::string& name, const std::string& script, RestartPolicy restart,
                        const std::string& dir) {
  ProcessSpec spec = ShellWorker(script, dir);
  spec.role = ProcessRole::kHelper;
  spec.name = name;
  spec.restart = restart;
  return spec;
}

// Kills what a failed test may have left behind.
void KillIfAlive(pid_t pid) {
  if (pid > 0 && ProcessState(pid) != 0) kill(pid, SIGKILL);
}

TEST_F(SupervisorTest, ExitCode_IsPassedThrough) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 3", "/tmp", 2, 5)}).ok());
  pid_t pid = supervisor_->worker_pid(2);
  ProcessExit exit = NextExit();
  EXPECT_EQ(exit.exit_code, 3);
  EXPECT_EQ(exit.local_rank, 2);
  EXPECT_EQ(exit.global_rank, 5);
  EXPECT_EQ(exit.pid, pid);
  EXPECT_EQ(supervisor_->running_workers(), 0);
}

TEST_F(SupervisorTest, KilledBySignal_Is128PlusSignal) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("kill -9 $$")}).ok());
  EXPECT_EQ(NextExit().exit_code, kExitSignalBase + SIGKILL);
}

TEST_F(SupervisorTest, SeveralExits_AreReportedOnePerWait) {
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker("exit 1", "/tmp", 0), ShellWorker("exit 2", "/tmp", 1)})
          .ok());
  ProcessExit first = NextExit();
  ProcessExit second = NextExit();
  std::set<std::pair<int, int>> got = {{first.local_rank, first.exit_code},
                                       {second.local_rank, second.exit_code}};
  EXPECT_EQ(got, (std::set<std::pair<int, int>>{{0, 1}, {1, 2}}));
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkersGone);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Start_MissingCommand_ReturnsNotFoundAndLeavesNoChild) {
  ProcessSpec ok_worker = ShellWorker("sleep 30", "/tmp", 0);
  ProcessSpec missing = ShellWorker("", "/tmp", 1);
  missing.argv = {"trainlet-no-such-command", "--flag"};
  absl::Status status = supervisor_->Start({ok_worker, missing});
  ASSERT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("'trainlet-no-such-command'"), absl::string_view::npos);
  EXPECT_EQ(ExitCodeForSpawnError(status), kExitNotFound);
  EXPECT_EQ(supervisor_->running_workers(), 0);
  // The already started `sleep 30` was killed and reaped: no child at all.
  int wait_status;
  EXPECT_EQ(waitpid(-1, &wait_status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // ...and its exit is not reported as an event.
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, Start_ExecFormatError_IsReportedThroughErrorPipe) {
  WriteFile(dir_.File("garbage"), "\x01\x02\x03 not a program\n", 0755);
  ProcessSpec spec = ShellWorker("");
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
  ProcessSpec spec = ShellWorker("");
  spec.argv = {dir_.File("script")};
  absl::Status status = supervisor_->Start({spec});
  ASSERT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("interpreter"), absl::string_view::npos) << status;
}

TEST_F(SupervisorTest, Start_WhileRunning_IsFailedPrecondition) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("sleep 30")}).ok());
  EXPECT_EQ(supervisor_->Start({ShellWorker("exit 0")}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(supervisor_->running_workers(), 1);
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
  EXPECT_EQ(supervisor_->running_workers(), 2);
}

TEST_F(SupervisorTest, Environment_IsPassedExactly_AndUnprefixedOutputGoesToFd) {
  ProcessSpec spec;
  spec.argv = {"env"};
  spec.env = {"PATH=/usr/bin:/bin", "FOO=bar baz", "EMPTY="};
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_EQ(out_.Contents(), "PATH=/usr/bin:/bin\nFOO=bar baz\nEMPTY=\n");
}

TEST_F(SupervisorTest, Worker_HasEmptySignalMaskAndNoIgnoredSignals) {
  // The test process blocks SIGCHLD/TERM/... and ignores SIGPIPE, like the agent.
  ProcessSpec spec;
  spec.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  spec.env = {"PATH=/usr/bin:/bin"};
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_EQ(out_.Contents(), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST_F(SupervisorTest, Placement_BindsCpusAndPrefersTheMemoryNode) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) last = c;
  }
  ASSERT_GE(last, 0);
  ProcessSpec spec;
  spec.argv = {"grep", "-E", "^(Cpus_allowed_list|Mems_allowed_list):", "/proc/self/status"};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.cpus = {last};
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_THAT(out_.Contents(), HasSubstr(absl::StrCat("Cpus_allowed_list:\t", last, "\n")));
  if (MemoryPolicyAvailable()) {
    // Node 0 exists on every Linux machine; the policy shows in numa_maps.
    ProcessSpec numa;
    numa.argv = {"sh", "-c", "head -n1 /proc/self/numa_maps"};
    numa.env = {"PATH=/usr/bin:/bin"};
    numa.numa_node = 0;
    ASSERT_TRUE(supervisor_->Start({numa}).ok());
    EXPECT_EQ(NextExit().exit_code, 0);
    EXPECT_THAT(out_.Contents(), HasSubstr("prefer:0"));
  }
}

TEST_F(SupervisorTest, Placement_OnCpusOutsideTheMaskFailsTheStartNamingIt) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int absent = -1;
  for (int c = 0; c < 1024; ++c) {
    if (c >= CPU_SETSIZE || !CPU_ISSET(c, &mine)) {
      absent = c;
      break;
    }
  }
  ProcessSpec spec = ShellWorker("exit 0");
  spec.cpus = {absent + 4096};  // no machine here has those CPUs.
  absl::Status s = supervisor_->Start({spec});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("sched_setaffinity"));
  EXPECT_EQ(supervisor_->running_workers(), 0);
}

TEST_F(SupervisorTest, PrefixedOutput_GoesLineByLineToMatchingStream) {
  ProcessSpec spec =
      ShellWorker("printf 'a\\nb\\n'; printf 'err1\\n' >&2; printf partial", "/tmp", 0, 7);
  spec.output = OutputMode::kPrefix;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  // Nothing pumps the pipes until Wait(): the output is all still in them.
  pid_t pid = supervisor_->worker_pid(0);
  ASSERT_TRUE(WaitFor([&] { return ProcessState(pid) == 'Z'; }, kTimeout));
  EXPECT_EQ(out_.Contents(), "");
  EXPECT_EQ(NextExit().exit_code, 0);
  // All of it was read when the exit was reported; the writer threads write
  // it (usually before: the Supervisor waits up to 50 ms for them).
  EXPECT_TRUE(WaitFor(
      [&] { return out_.Contents() == "[rank 7] a\n[rank 7] b\n[rank 7] partial\n"; }, kTimeout))
      << out_.Contents();
  EXPECT_TRUE(WaitFor([&] { return err_.Contents() == "[rank 7] err1\n"; }, kTimeout))
      << err_.Contents();
}

TEST_F(SupervisorTest, PrefixedOutput_IsHandedToOnWorkerOutputUnchanged) {
  std::string seen[2];
  int ranks_seen = -1;
  bool wake = true;
  Supervisor::Options options;
  options.on_worker_output = [&](int local_rank, int stream, absl::string_view bytes) {
    ranks_seen = local_rank;
    seen[stream].append(bytes.data(), bytes.size());
    const bool first = wake;
    wake = false;
    return first;  // the first piece asks Wait() to return at once
  };
  Recreate(options);
  // It prints the rest once the first Wait() has returned (the file "go").
  ProcessSpec spec = ShellWorker(
      "printf 'step 1\\rstep 2\\n'; printf 'e\\n' >&2; "
      "while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done; printf 'last'",
      dir_.path(), 3, 7);
  spec.output = OutputMode::kPrefix;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWakeup);
  WriteFile(dir_.File("go"), "", 0644);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_EQ(ranks_seen, 3);
  EXPECT_EQ(seen[0], "step 1\rstep 2\nlast");
  EXPECT_EQ(seen[1], "e\n");
  // The output itself is written as without the callback.
  EXPECT_TRUE(WaitFor([&] { return out_.Contents() == "[rank 7] step 1\rstep 2\n[rank 7] last\n"; },
                      kTimeout))
      << out_.Contents();
}

// OutputMode::kRelay (--progress-from-output without --prefix-output): the
// agent's stdout and stderr get the bytes the worker wrote, byte for byte
// ('\r' redraws, no newline added at the end), and the hook the same copy.
TEST_F(SupervisorTest, RelayedOutput_ReachesTheHookAndStdoutByteForByte) {
  std::string seen[2];
  int ranks_seen = -1;
  Supervisor::Options options;
  options.on_worker_output = [&](int local_rank, int stream, absl::string_view bytes) {
    ranks_seen = local_rank;
    seen[stream].append(bytes.data(), bytes.size());
    return false;
  };
  Recreate(options);
  const std::string printed =
      "{'loss': 2.3, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 0.1}\n"
      " 10%|#         | 10/100 [00:01<00:09]\r 20%|##        | 20/100 [00:02<00:08]\n"
      "\n  tabs\tand spaces  \nno newline at the end";
  ProcessSpec spec =
      ShellWorker(absl::StrCat("printf '%s' \"$OUT\"; printf 'warn: x\\n' >&2"), "/tmp", 2, 9);
  spec.env.push_back("OUT=" + printed);
  spec.output = OutputMode::kRelay;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return out_.Contents() == printed; }, kTimeout)) << out_.Contents();
  EXPECT_TRUE(WaitFor([&] { return err_.Contents() == "warn: x\n"; }, kTimeout)) << err_.Contents();
  EXPECT_EQ(ranks_seen, 2);
  EXPECT_EQ(seen[0], printed);
  EXPECT_EQ(seen[1], "warn: x\n");
  // Relayed output has a tail for hang reports, as prefixed output has.
  EXPECT_FALSE(supervisor_->OutputTail(2).empty());
}

// A progress bar redrawn with '\r' and no '\n' is written as soon as it is
// read, not held until a newline that may never come.
TEST_F(SupervisorTest, RelayedOutput_APartialLineIsNotHeldBack) {
  ProcessSpec spec = ShellWorker(
      "printf 'a\\n 50%%'; while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done; printf '\\r100%%\\n'",
      dir_.path(), 0, 0);
  spec.output = OutputMode::kRelay;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        supervisor_->Wait(absl::Milliseconds(20));
        return out_.Contents() == "a\n 50%";
      },
      kTimeout))
      << out_.Contents();
  WriteFile(dir_.File("go"), "", 0644);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return out_.Contents() == "a\n 50%\r100%\n"; }, kTimeout))
      << out_.Contents();
}

TEST_F(SupervisorTest, PrefixedOutput_OfConcurrentWorkers_NeverMixesWithinALine) {
  const int kLines = 2000;
  std::vector<ProcessSpec> specs;
  for (int rank : {0, 1}) {
    ProcessSpec spec = ShellWorker(
        absl::StrCat(
            "i=0; while [ $i -lt ", kLines,
            " ]; do echo \"line $i of a reasonably long worker output\"; i=$((i+1)); done"),
        "/tmp", rank, 10 + rank);
    spec.output = OutputMode::kPrefix;
    specs.push_back(spec);
  }
  ASSERT_TRUE(supervisor_->Start(specs).ok());
  NextExit();
  NextExit();
  std::vector<std::string> lines;
  EXPECT_TRUE(WaitFor(
      [&] {
        lines = absl::StrSplit(out_.Contents(), '\n', absl::SkipEmpty());
        return lines.size() == 2u * kLines;
      },
      kTimeout));
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
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkersGone);
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
  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(dir_.File("child")) == "term\n"; }, kTimeout));
  EXPECT_EQ(ReadFile(dir_.File("leader")), "term\n");
}

TEST_F(SupervisorTest, Stop_KillsGroupMembersLeftBehindByExitedLeader) {
  // The leader is gone but a member of its group ignores SIGTERM: the group
  // is still signalled, and kWorkersGone waits until it is empty. (No drain
  // time here: signals go at once; see the DrainTime tests.)
  RecreateWithDrainTime(absl::ZeroDuration());
  const std::string script = kLeaveTermIgnoringGrandchild;
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  pid_t grandchild = ReadPidFile(dir_.File("grandchild"));
  ASSERT_GT(grandchild, 0);
  EXPECT_NE(ProcessState(grandchild), 0);
  EXPECT_EQ(supervisor_->running_workers(), 0);

  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(200)).type, EventType::kTimeout);
  EXPECT_NE(ProcessState(grandchild), 0) << "it ignores SIGTERM";
  supervisor_->SignalWorkers(SIGKILL);
  Next(EventType::kWorkersGone);
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

TEST_F(SupervisorTest, OrphanInNewSession_IsKilledAndReapedBeforeWorkersGone) {
  // The worker leaves a child in its own session (so no group kill reaches
  // it) and exits; the child is reparented to us (subreaper). It is not a
  // worker exit, and it is killed and reaped before kWorkersGone: the next
  // round must not meet it (docs/pid1.md).
  const std::string script = "setsid sleep 30 & echo $! > \"$DIR/orphan\"; sleep 0.2";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  pid_t orphan = ReadPidFile(dir_.File("orphan"));
  ASSERT_GT(orphan, 0);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_NE(ProcessState(orphan), 0);
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkersGone);
  EXPECT_EQ(ProcessState(orphan), 0) << "orphan " << orphan << " not killed and reaped";
  EXPECT_TRUE(testing::ZombieChildrenOf(getpid()).empty());
}

// A helper that may leave orphans (an sshd) keeps the round end from killing
// any; one that starts nothing (the agent's store) does not.
TEST_F(SupervisorTest, OrphansAtRoundEnd_KilledUnlessAHelperMayLeaveSome) {
  // First beside a store-like helper, then with an sshd-like one added.
  for (const bool helper_leaves_orphans : {false, true}) {
    SCOPED_TRACE(helper_leaves_orphans ? "sshd-like helper" : "store-like helper");
    ProcessSpec helper = ShellHelper(helper_leaves_orphans ? "sshd" : "store", "exec sleep 30",
                                     RestartPolicy::kNever, dir_.path());
    helper.leaves_orphans = helper_leaves_orphans;
    ASSERT_TRUE(supervisor_->StartHelper(helper).ok());
    const std::string orphan_file = dir_.File("orphan");
    unlink(orphan_file.c_str());
    const std::string script = "setsid sleep 30 & echo $! > \"$DIR/orphan\"; sleep 0.2";
    ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
    const pid_t orphan = ReadPidFile(orphan_file);
    ASSERT_GT(orphan, 0);
    EXPECT_EQ(NextExit().exit_code, 0);
    EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkersGone);
    EXPECT_EQ(ProcessState(orphan) != 0, helper_leaves_orphans) << "orphan " << orphan;
    KillIfAlive(orphan);
  }
}

TEST_F(SupervisorTest, OrphanThatExitsByItself_IsReapedAndNotAnEvent) {
  // The inner sh exits at once: its child is adopted by us while the worker
  // still runs, and then exits on its own.
  const std::string script = "sh -c 'setsid sleep 0.3 & echo $! > \"$DIR/orphan\"'; sleep 30";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  pid_t orphan = ReadPidFile(dir_.File("orphan"));
  ASSERT_GT(orphan, 0);
  absl::Time deadline = absl::Now() + kTimeout;
  while (ProcessState(orphan) != 0 && absl::Now() < deadline) {
    EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(100)).type, EventType::kTimeout);
  }
  EXPECT_EQ(ProcessState(orphan), 0) << "orphan " << orphan << " not reaped";
  EXPECT_TRUE(testing::ZombieChildrenOf(getpid()).empty());
}

// --- The entrypoint's processes (issue 25) ---

// Spawns `sh -c script` with $DIR set, as the entrypoint would have before
// `exec trainlet`: a child of this process that the Supervisor did not
// start. With `own_group`, it leads a process group of its own.
pid_t SpawnEntrypointChild(const std::string& script, const std::string& dir, bool own_group) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  }
  const std::string dir_env = "DIR=" + dir;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const char* envp[] = {"PATH=/usr/bin:/bin", dir_env.c_str(), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, &attr, const_cast<char**>(argv),
                        const_cast<char**>(envp)),
            0);
  posix_spawnattr_destroy(&attr);
  return pid;
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

TEST_F(SupervisorTest, InheritedChild_IsNotKilledAtRoundEndsOrAtTheEnd) {
  // A sidecar started with `&` before `exec trainlet`, and a `tee` of
  // `exec > >(tee log)`: children before the Supervisor exists.
  supervisor_.reset();
  const pid_t sidecar = SpawnEntrypointChild("exec sleep 300", "/tmp", false);
  const pid_t own_group = SpawnEntrypointChild("exec sleep 300", "/tmp", true);
  ASSERT_GT(sidecar, 0);
  ASSERT_GT(own_group, 0);
  Recreate(Supervisor::Options());
  EXPECT_EQ(supervisor_->inherited_children(), (std::set<pid_t>{sidecar, own_group}));
  // A round whose worker also leaves an orphan: that one alone is killed.
  const std::string script = "setsid sleep 30 & echo $! > \"$DIR/orphan\"; exit 1";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  const pid_t orphan = ReadPidFile(dir_.File("orphan"));
  EXPECT_EQ(NextExit().exit_code, 1);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(ProcessState(orphan), 0) << "the workers' orphan " << orphan;
  EXPECT_NE(ProcessState(sidecar), 0);
  EXPECT_NE(ProcessState(own_group), 0);
  // Another round starts and ends; then the agent goes.
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 0")}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  Next(EventType::kWorkersGone);
  supervisor_.reset();
  EXPECT_NE(ProcessState(sidecar), 0) << "killed at the Supervisor's end";
  EXPECT_NE(ProcessState(own_group), 0) << "killed at the Supervisor's end";
  EXPECT_NE(ProcessState(sidecar), 'Z');
  KillAndReap(sidecar);
  KillAndReap(own_group);
  KillIfAlive(orphan);
}

TEST_F(SupervisorTest, InheritedChild_IsReapedWhenItExits_AndItsNumberForgotten) {
  supervisor_.reset();
  const pid_t sidecar =
      SpawnEntrypointChild("while [ ! -e \"$DIR/stop\" ]; do sleep 0.01; done", dir_.path(), false);
  ASSERT_GT(sidecar, 0);
  Recreate(Supervisor::Options());
  ASSERT_EQ(supervisor_->inherited_children().count(sidecar), 1u);
  WriteFile(dir_.File("stop"), "", 0644);
  // Reaped by Wait(), and not an event.
  absl::Time deadline = absl::Now() + kTimeout;
  while (ProcessState(sidecar) != 0 && absl::Now() < deadline) {
    EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
  }
  EXPECT_EQ(ProcessState(sidecar), 0) << "not reaped";
  EXPECT_TRUE(supervisor_->inherited_children().empty());
  EXPECT_TRUE(testing::ZombieChildrenOf(getpid()).empty());
}

TEST_F(SupervisorTest, InheritedChildsOrphans_InTheEntrypointsGroups_AreNotTheWorkers) {
  // Two sidecars leave an orphan each once the agent runs (a log shipper's
  // child, when the shipper restarts): one in this process's group, one in
  // the group the second sidecar leads. Both come to us, and both are the
  // entrypoint's: a round's end and the Supervisor's end leave them alone.
  const std::string leave_orphan =
      "while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done;"
      " sleep 300 & echo $! > \"$DIR/orphan-$$.tmp\"; mv \"$DIR/orphan-$$.tmp\" \"$DIR/orphan-$1\"";
  auto spawn = [&](const char* name, bool own_group) {
    return SpawnEntrypointChild(absl::StrCat("set -- ", name, "; ", leave_orphan), dir_.path(),
                                own_group);
  };
  supervisor_.reset();
  const pid_t same_group = spawn("same", false);
  const pid_t led_group = spawn("led", true);
  ASSERT_GT(same_group, 0);
  ASSERT_GT(led_group, 0);
  Recreate(Supervisor::Options());
  WriteFile(dir_.File("go"), "", 0644);
  const pid_t orphan_same = ReadPidFile(dir_.File("orphan-same"));
  const pid_t orphan_led = ReadPidFile(dir_.File("orphan-led"));
  ASSERT_GT(orphan_same, 0);
  ASSERT_GT(orphan_led, 0);
  // Their parents exit: they are ours now (subreaper).
  ASSERT_TRUE(WaitFor(
      [&] {
        supervisor_->Wait(absl::ZeroDuration());
        return ProcessState(same_group) == 0 && ProcessState(led_group) == 0;
      },
      kTimeout));
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 0")}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  Next(EventType::kWorkersGone);
  EXPECT_NE(ProcessState(orphan_same), 0);
  EXPECT_NE(ProcessState(orphan_led), 0) << "its group's leader was inherited";
  supervisor_.reset();
  EXPECT_NE(ProcessState(orphan_same), 0);
  EXPECT_NE(ProcessState(orphan_led), 0);
  KillAndReap(orphan_same);
  KillAndReap(orphan_led);
}

TEST_F(SupervisorTest, AnOrphanStartedBeforeTheFirstWorker_IsNotTheWorkers) {
  // `sshd &` before `exec trainlet`: it forks its daemon into a session of
  // its own at once, but exits only once the agent runs. The daemon comes
  // to us then, in no group of the entrypoint's; it started before any
  // worker existed, so it cannot be theirs.
  supervisor_.reset();
  const pid_t sidecar = SpawnEntrypointChild(
      "setsid sleep 300 & echo $! > \"$DIR/daemon.tmp\"; mv \"$DIR/daemon.tmp\" \"$DIR/daemon\";"
      " while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done",
      dir_.path(), false);
  ASSERT_GT(sidecar, 0);
  const pid_t daemon = ReadPidFile(dir_.File("daemon"));
  ASSERT_GT(daemon, 0);
  Recreate(Supervisor::Options());
  // Start times count in clock ticks: the first worker starts two later.
  absl::SleepFor(absl::Seconds(2.0 / static_cast<double>(sysconf(_SC_CLK_TCK))));
  // The worker lets the sidecar go and fails once the daemon is ours.
  const std::string script =
      "touch \"$DIR/go\"; d=$(cat \"$DIR/daemon\");"
      " while [ \"$(cut -d' ' -f4 /proc/$d/stat)\" != \"$PPID\" ]; do sleep 0.01; done; exit 1";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 1);
  Next(EventType::kWorkersGone);
  EXPECT_NE(ProcessState(daemon), 0) << "killed at the round's end";
  EXPECT_NE(ProcessState(daemon), 'Z');
  supervisor_.reset();
  EXPECT_NE(ProcessState(daemon), 0) << "killed at the Supervisor's end";
  KillAndReap(daemon);
}

// --- Drain time: the rest of a worker's group after its leader exited ---

// The leader exits at once; a member of its group that reads a pipe (like
// the worker's own `tee`) writes $DIR/tee 0.3 s after that pipe's EOF.
constexpr char kLeaveSlowTee[] =
    "echo line | (cat > /dev/null; sleep 0.3; echo drained > \"$DIR/tee.tmp\";"
    " mv \"$DIR/tee.tmp\" \"$DIR/tee\") & exit 0";

TEST_F(SupervisorTest, DrainTime_AStopRightAfterTheLeaderExited_LetsItsTeeFinish) {
  // The worker's own `exec > >(tee f)`: a group member still writing what
  // the leader wrote when the leader exits, and the agent stops the round
  // at once (as after a success). It finishes; kWorkersGone follows.
  ASSERT_TRUE(supervisor_->Start({ShellWorker(kLeaveSlowTee, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  supervisor_->SignalWorkers(SIGTERM);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(ReadFile(dir_.File("tee")), "drained\n");
}

TEST_F(SupervisorTest, DrainTime_TheDestructor_LetsTheGroupFinish) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker(kLeaveSlowTee, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  supervisor_.reset();
  EXPECT_EQ(ReadFile(dir_.File("tee")), "drained\n");
}

TEST_F(SupervisorTest, DrainTime_AMemberStartedJustBefore_MayStillBeSettingUp_AndIsHeld) {
  // `exec > >(tee f)` forks the `tee`, which points its stdin at the pipe
  // only once it runs: a short worker may exit before that. Here the
  // member never reads a pipe, but it started less than 1 s before.
  const std::string script =
      "(sleep 0.3; echo drained > \"$DIR/tee.tmp\"; mv \"$DIR/tee.tmp\" \"$DIR/tee\")"
      " < /dev/null & exit 0";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  supervisor_->SignalWorkers(SIGTERM);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(ReadFile(dir_.File("tee")), "drained\n");
}

TEST_F(SupervisorTest, DrainTime_AStrayThatKeepsRunning_GetsTheHeldSignalWhenItIsOver) {
  RecreateWithDrainTime(absl::Seconds(3));
  // It reads a pipe whose writer keeps running too: no EOF, ever.
  const std::string script = "sleep 300 | sleep 300 & echo $! > \"$DIR/stray\"; exit 0";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  const pid_t stray = ReadPidFile(dir_.File("stray"));
  ASSERT_GT(stray, 0);
  EXPECT_EQ(NextExit().exit_code, 0);
  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(100)).type, EventType::kTimeout);
  EXPECT_NE(ProcessState(stray), 0) << "SIGTERM is held for the drain time";
  Next(EventType::kWorkersGone);
  EXPECT_EQ(ProcessState(stray), 0) << "the held SIGTERM came";
  KillIfAlive(stray);
}

TEST_F(SupervisorTest, DrainTime_ARunningLeadersGroup_IsSignalledAtOnce) {
  RecreateWithDrainTime(absl::Seconds(30));
  const std::string script = "echo > \"$DIR/ready\"; exec sleep 300";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_.File("ready")); }, kTimeout));
  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(NextExit().exit_code, kExitSignalBase + SIGTERM);
  const absl::Time start = absl::Now();
  Next(EventType::kWorkersGone);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "not held: the group had no leftovers";
}

void SupervisorTest::ExpectStrayStoppedAtOnce(const std::string& script, int exit_code) {
  RecreateWithDrainTime(absl::Seconds(30));
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  const pid_t stray = ReadPidFile(dir_.File("stray"));
  ASSERT_GT(stray, 0);
  EXPECT_EQ(NextExit().exit_code, exit_code);
  supervisor_->SignalWorkers(SIGTERM);
  const absl::Time start = absl::Now();
  Next(EventType::kWorkersGone);
  // Held, it would take the 30 s; a bound with room for a loaded machine.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "held for the drain time";
  EXPECT_EQ(ProcessState(stray), 0);
  KillIfAlive(stray);
}

TEST_F(SupervisorTest, DrainTime_AGroupThatReadsNoPipe_IsSignalledAtOnce) {
  // Like a PyTorch worker killed by the OOM killer: its DataLoader workers
  // stay in its group, their stdin /dev/null (multiprocessing's). They
  // write out nothing of the worker's: a restart does not wait for them.
  // (They started over 1 s before: set up.)
  const std::string script =
      "sleep 300 < /dev/null & echo $! > \"$DIR/stray\"; sleep 300 < /dev/null &"
      " sleep 1.2; kill -9 $$";
  ExpectStrayStoppedAtOnce(script, kExitSignalBase + SIGKILL);
}

TEST_F(SupervisorTest, DrainTime_OurOwnStdinIsNoOutputPipe) {
  // The agent's stdin is a pipe (`ssh host trainlet run ...`), which every
  // worker and its children inherit: a stray reading it is not draining
  // anything the worker wrote.
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const int saved_stdin = dup(STDIN_FILENO);
  ASSERT_GE(saved_stdin, 0);
  ASSERT_EQ(dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
  // (An asynchronous list's stdin is /dev/null unless redirected.)
  const std::string script =
      "exec 3<&0; sleep 300 <&3 & echo $! > \"$DIR/stray\"; sleep 1.2; exit 0";
  ExpectStrayStoppedAtOnce(script, 0);
  dup2(saved_stdin, STDIN_FILENO);
  close(saved_stdin);
  close(fds[0]);
  close(fds[1]);
}

// --- kWorkersGone ---

TEST_F(SupervisorTest, WorkersGone_ComesOnceAfterEveryWorkerExitedOnItsOwn) {
  ASSERT_TRUE(
      supervisor_->Start({ShellWorker("exit 0", "/tmp", 0), ShellWorker("sleep 0.1", "/tmp", 1)})
          .ok());
  NextExit();
  NextExit();
  EXPECT_EQ(supervisor_->running_workers(), 0);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, WorkersGone_WaitsUntilEveryGroupIsEmpty) {
  RecreateWithDrainTime(absl::ZeroDuration());
  ASSERT_TRUE(supervisor_->Start({ShellWorker(kLeaveTermIgnoringGrandchild, dir_.path())}).ok());
  EXPECT_EQ(NextExit().exit_code, 0);
  pid_t grandchild = ReadPidFile(dir_.File("grandchild"));
  ASSERT_GT(grandchild, 0);
  // Its leader is gone, but the group still has a member that ignores TERM.
  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(300)).type, EventType::kTimeout);
  EXPECT_NE(ProcessState(grandchild), 0);
  supervisor_->SignalWorkers(SIGKILL);
  absl::Time start = absl::Now();
  Next(EventType::kWorkersGone);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(ProcessState(grandchild), 0);
  KillIfAlive(grandchild);
}

TEST_F(SupervisorTest, NonBlockingStop_TermDeadlineKill_EndsWithExitThenWorkersGone) {
  // The agent's stop: SIGTERM, its deadline, SIGKILL.
  const std::string script = "trap '' TERM; echo > \"$DIR/ready\"; while :; do sleep 0.05; done";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path(), 0, 4)}).ok());
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_.File("ready")); }, kTimeout));
  supervisor_->SignalWorkers(SIGTERM);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(200)).type, EventType::kTimeout);
  EXPECT_EQ(supervisor_->running_workers(), 1);
  supervisor_->SignalWorkers(SIGKILL);
  ProcessExit exit = NextExit();
  EXPECT_EQ(exit.exit_code, kExitSignalBase + SIGKILL);
  EXPECT_EQ(exit.global_rank, 4);
  EXPECT_EQ(exit.role, ProcessRole::kWorker);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(supervisor_->running_workers(), 0);
}

TEST_F(SupervisorTest, Start_AgainAfterExit_StartsNewRound_OldWorkersGoneIsDropped) {
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 4")}).ok());
  EXPECT_EQ(NextExit().exit_code, 4);
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 5")}).ok());
  EXPECT_EQ(NextExit().exit_code, 5);
  Next(EventType::kWorkersGone);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
}

TEST_F(SupervisorTest, ReadyEvents_ComeInTheDocumentedOrder) {
  ASSERT_TRUE(
      supervisor_->StartHelper(ShellHelper("h", "exit 0", RestartPolicy::kNever, dir_.path()))
          .ok());
  const pid_t helper = supervisor_->helper_pid("h");
  ASSERT_TRUE(supervisor_->Start({ShellWorker("exit 6")}).ok());
  const pid_t worker = supervisor_->worker_pid(0);
  // Nothing reaps until Wait(): everything is ready at once.
  ASSERT_TRUE(WaitFor([&] { return ProcessState(helper) == 'Z' && ProcessState(worker) == 'Z'; },
                      kTimeout));
  supervisor_->Wake();
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  EXPECT_EQ(Next(EventType::kWorkerExited).exit.exit_code, 6);
  EXPECT_EQ(Next(EventType::kHelperExited).exit.name, "h");
  Next(EventType::kWorkersGone);
  EXPECT_EQ(Next(EventType::kSignal).signal, SIGUSR1);
  Next(EventType::kWakeup);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
}

// --- Helpers ---

TEST_F(SupervisorTest, StartHelper_NeedsHelperRoleAndAUniqueName) {
  ProcessSpec worker = ShellWorker("sleep 30");
  EXPECT_EQ(supervisor_->StartHelper(worker).code(), absl::StatusCode::kInvalidArgument);
  ProcessSpec unnamed = ShellHelper("", "sleep 30", RestartPolicy::kNever, "/tmp");
  EXPECT_EQ(supervisor_->StartHelper(unnamed).code(), absl::StatusCode::kInvalidArgument);
  ProcessSpec sshd = ShellHelper("sshd", "sleep 30", RestartPolicy::kNever, "/tmp");
  ASSERT_TRUE(supervisor_->StartHelper(sshd).ok());
  EXPECT_EQ(supervisor_->StartHelper(sshd).code(), absl::StatusCode::kInvalidArgument);
  ProcessSpec missing = ShellHelper("other", "", RestartPolicy::kNever, "/tmp");
  missing.argv = {"trainlet-no-such-command"};
  EXPECT_EQ(supervisor_->StartHelper(missing).code(), absl::StatusCode::kNotFound);
  EXPECT_GT(supervisor_->helper_pid("sshd"), 0);
  EXPECT_EQ(supervisor_->helper_pid("other"), -1);
}

TEST_F(SupervisorTest, Helper_OnFailure_IsRestartedWithGrowingBackoff) {
  RecreateWithQuickRestarts();
  ASSERT_TRUE(supervisor_
                  ->StartHelper(ShellHelper("flaky", "echo run >> \"$DIR/runs\"; exit 2",
                                            RestartPolicy::kOnFailure, dir_.path()))
                  .ok());
  std::vector<absl::Time> exits;
  std::set<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    Supervisor::Event event = Next(EventType::kHelperExited);
    exits.push_back(absl::Now());
    EXPECT_EQ(event.exit.role, ProcessRole::kHelper);
    EXPECT_EQ(event.exit.name, "flaky");
    EXPECT_EQ(event.exit.exit_code, 2);
    EXPECT_TRUE(event.exit.will_restart);
    pids.insert(event.exit.pid);
  }
  EXPECT_EQ(pids.size(), 4u);
  // Each gap is the backoff (100, 200, 400 ms) plus the helper's run time.
  const absl::Duration backoff[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                    absl::Milliseconds(400)};
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(exits[i + 1] - exits[i], backoff[i] - absl::Milliseconds(5)) << i;
    EXPECT_LT(exits[i + 1] - exits[i], backoff[i] + absl::Seconds(2)) << i;
  }
  EXPECT_GE(ReadFile(dir_.File("runs")).size(), 4 * std::string("run\n").size());
}

TEST_F(SupervisorTest, Helper_RestartPolicies) {
  RecreateWithQuickRestarts();
  ASSERT_TRUE(
      supervisor_->StartHelper(ShellHelper("never", "exit 1", RestartPolicy::kNever, "/tmp")).ok());
  Supervisor::Event event = Next(EventType::kHelperExited);
  EXPECT_EQ(event.exit.exit_code, 1);
  EXPECT_FALSE(event.exit.will_restart);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(300)).type, EventType::kTimeout);
  EXPECT_EQ(supervisor_->helper_pid("never"), -1);

  ASSERT_TRUE(
      supervisor_->StartHelper(ShellHelper("clean", "exit 0", RestartPolicy::kOnFailure, "/tmp"))
          .ok());
  event = Next(EventType::kHelperExited);
  EXPECT_EQ(event.exit.name, "clean");
  EXPECT_FALSE(event.exit.will_restart);

  ASSERT_TRUE(
      supervisor_->StartHelper(ShellHelper("always", "exit 0", RestartPolicy::kAlways, "/tmp"))
          .ok());
  event = Next(EventType::kHelperExited);
  EXPECT_EQ(event.exit.name, "always");
  EXPECT_TRUE(event.exit.will_restart);
  event = Next(EventType::kHelperExited);  // it came back, and exited again
  EXPECT_EQ(event.exit.name, "always");
}

TEST_F(SupervisorTest, Helper_RestartThatCannotStart_IsReportedAndRetried) {
  RecreateWithQuickRestarts();
  const std::string script = dir_.File("helper.sh");
  WriteFile(script, "#!/bin/sh\nexit 1\n", 0755);
  ProcessSpec spec = ShellHelper("gone", "", RestartPolicy::kOnFailure, "/tmp");
  spec.argv = {script};
  ASSERT_TRUE(supervisor_->StartHelper(spec).ok());
  Supervisor::Event event = Next(EventType::kHelperExited);
  EXPECT_EQ(event.exit.exit_code, 1);
  ASSERT_EQ(unlink(script.c_str()), 0);
  event = Next(EventType::kHelperExited);
  EXPECT_EQ(event.exit.pid, -1);
  EXPECT_EQ(event.exit.exit_code, kExitNotFound);
  EXPECT_TRUE(event.exit.will_restart);
  WriteFile(script, "#!/bin/sh\nexit 3\n", 0755);  // back: the retry starts it
  event = Next(EventType::kHelperExited);
  EXPECT_GT(event.exit.pid, 0);
  EXPECT_EQ(event.exit.exit_code, 3);
}

TEST_F(SupervisorTest, Helper_LivesAcrossRounds_IsNotSignalledWithWorkers_IsPrefixedByName) {
  ProcessSpec spec = ShellHelper(
      "sshd", "trap 'echo > \"$DIR/helper_term\"' TERM; echo hello; while :; do sleep 0.05; done",
      RestartPolicy::kAlways, dir_.path());
  spec.output = OutputMode::kPrefix;
  ASSERT_TRUE(supervisor_->StartHelper(spec).ok());
  const pid_t helper = supervisor_->helper_pid("sshd");
  ASSERT_GT(helper, 0);
  EXPECT_NE(getpgid(helper), getpgrp());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(supervisor_->Start({ShellWorker("sleep 30")}).ok());
    supervisor_->SignalWorkers(SIGTERM);
    EXPECT_EQ(NextExit().exit_code, kExitSignalBase + SIGTERM);
    Next(EventType::kWorkersGone);
  }
  EXPECT_EQ(supervisor_->helper_pid("sshd"), helper);
  EXPECT_NE(ProcessState(helper), 0);
  EXPECT_FALSE(FileExists(dir_.File("helper_term")));
  // Output is pumped by Wait() only.
  EXPECT_TRUE(WaitFor(
      [&] {
        EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(10)).type, EventType::kTimeout);
        return out_.Contents() == "[sshd] hello\n";
      },
      kTimeout))
      << out_.Contents();
  supervisor_.reset();
  EXPECT_EQ(ProcessState(helper), 0);
}

// --- Orphans (docs/pid1.md) and D10 ---

TEST_F(SupervisorTest, RoundEnd_WithAHelperRunning_LeavesOrphansUntilTheEnd) {
  // A helper's orphans cannot be told from the workers': none is killed at
  // the round's end, all at the Supervisor's.
  ASSERT_TRUE(
      supervisor_->StartHelper(ShellHelper("h", "sleep 30", RestartPolicy::kNever, "/tmp")).ok());
  const std::string script = "setsid sleep 30 & echo $! > \"$DIR/orphan\"; sleep 0.2";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  pid_t orphan = ReadPidFile(dir_.File("orphan"));
  ASSERT_GT(orphan, 0);
  EXPECT_EQ(NextExit().exit_code, 0);
  Next(EventType::kWorkersGone);
  EXPECT_NE(ProcessState(orphan), 0);
  supervisor_.reset();
  EXPECT_EQ(ProcessState(orphan), 0);
  KillIfAlive(orphan);
}

TEST_F(SupervisorTest, Destructor_KillsAdoptedOrphansAndTheirChildren) {
  // D10: a worker leaves a process in its own session (no group kill
  // reaches it), which has a child of its own, and exits. Both are killed
  // when the Supervisor (the agent) goes, without any Wait() in between.
  const std::string script =
      "setsid sh -c 'sleep 300 & echo $! > \"$DIR/inner\"; exec sleep 300' &"
      " echo $! > \"$DIR/orphan\"; sleep 0.3";
  ASSERT_TRUE(supervisor_->Start({ShellWorker(script, dir_.path())}).ok());
  pid_t orphan = ReadPidFile(dir_.File("orphan"));
  pid_t inner = ReadPidFile(dir_.File("inner"));
  ASSERT_GT(orphan, 0);
  ASSERT_GT(inner, 0);
  EXPECT_EQ(NextExit().exit_code, 0);
  EXPECT_NE(ProcessState(orphan), 0);
  EXPECT_NE(ProcessState(inner), 0);
  supervisor_.reset();
  EXPECT_EQ(ProcessState(orphan), 0) << "orphan " << orphan << " outlived the supervisor";
  EXPECT_EQ(ProcessState(inner), 0) << "its child " << inner << " outlived the supervisor";
  EXPECT_TRUE(testing::ZombieChildrenOf(getpid()).empty());
  KillIfAlive(orphan);
  KillIfAlive(inner);
}

// A pipe whose read end stays open but is read by nobody until Drain().
class StalledPipe {
 public:
  StalledPipe() {
    EXPECT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    fcntl(fds_[1], F_SETPIPE_SZ, 4096);  // full after a page
  }
  ~StalledPipe() {
    Drain();
    close(fds_[0]);
    close(fds_[1]);
  }
  int write_fd() const { return fds_[1]; }
  // Reads whatever is in the pipe now (non-blocking), so a writer blocked
  // on it can go on; returns the bytes read.
  size_t Drain() {
    size_t total = 0;
    char buffer[65536];
    fcntl(fds_[0], F_SETFL, O_NONBLOCK);
    for (ssize_t n; (n = read(fds_[0], buffer, sizeof(buffer))) > 0;) total += n;
    return total;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Runs `body` on this thread; if it has not finished after `limit`, a
// watchdog keeps draining `pipe` so that a body blocked writing to it can
// return (the test then fails on its own timing checks instead of hanging).
void WithWatchdog(StalledPipe* pipe, absl::Duration limit, const std::function<void()>& body) {
  absl::Notification finished;
  std::thread watchdog([&] {
    if (finished.WaitForNotificationWithTimeout(limit)) return;
    while (!finished.WaitForNotificationWithTimeout(absl::Milliseconds(1))) pipe->Drain();
  });
  body();
  finished.Notify();
  watchdog.join();
}

TEST_F(SupervisorTest, PrefixedOutput_StalledReader_NeverBlocksWaitOrSignals) {
  StalledPipe stdout_pipe;
  Supervisor::Options options;
  options.stdout_fd = stdout_pipe.write_fd();
  options.stderr_fd = err_.fd();
  absl::StatusOr<std::unique_ptr<Supervisor>> created = Supervisor::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Supervisor> supervisor = std::move(*created);
  // ~8 MiB of output, far more than the pipe and the buffer hold, then a
  // marker file, then it exits 3.
  ProcessSpec spec = ShellWorker(
      "yes \"$(head -c 4000 /dev/zero | tr '\\0' x)\" | head -n 2000; "
      "echo > \"$DIR/printed\"; exit 3",
      dir_.path());
  spec.output = OutputMode::kPrefix;
  ASSERT_TRUE(supervisor->Start({spec}).ok());
  absl::Duration exit_took, signal_took, destroy_took;
  WithWatchdog(&stdout_pipe, absl::Seconds(20), [&] {
    absl::Time start = absl::Now();
    Supervisor::Event event = supervisor->Wait(absl::Seconds(30));
    exit_took = absl::Now() - start;
    EXPECT_EQ(event.type, EventType::kWorkerExited);
    EXPECT_EQ(event.exit.exit_code, 3);
    EXPECT_EQ(supervisor->Wait(absl::Seconds(30)).type, EventType::kWorkersGone);
    // A signal is still seen at once.
    ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
    start = absl::Now();
    event = supervisor->Wait(absl::Seconds(30));
    signal_took = absl::Now() - start;
    EXPECT_EQ(event.type, EventType::kSignal);
    start = absl::Now();
    supervisor.reset();  // flushes with a bounded wait
    destroy_took = absl::Now() - start;
  });
  EXPECT_TRUE(FileExists(dir_.File("printed")));
  EXPECT_LT(exit_took, absl::Seconds(15));
  EXPECT_LT(signal_took, absl::Seconds(1));
  EXPECT_LT(destroy_took, absl::Seconds(5));
}

// Relayed unchanged (kRelay) or prefixed, the same flow control.
TEST_F(SupervisorTest, RelayedOrPrefixedOutput_SlowReader_SlowsTheWorkerAndLosesNothing) {
  for (OutputMode mode : {OutputMode::kPrefix, OutputMode::kRelay}) {
    SCOPED_TRACE(mode == OutputMode::kPrefix ? "prefixed" : "relayed");
    const std::string prefix = mode == OutputMode::kPrefix ? "[rank 1] " : "";
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
    fcntl(fds[1], F_SETPIPE_SZ, 4096);
    // A slow reader (a page per millisecond), never stalled.
    std::string got;
    std::thread reader([&] {
      char buffer[4096];
      for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) {
        got.append(buffer, static_cast<size_t>(n));
        absl::SleepFor(absl::Milliseconds(1));
      }
    });
    Supervisor::Options options;
    options.stdout_fd = fds[1];
    options.stderr_fd = err_.fd();
    options.output_buffer_bytes = 64 * 1024;  // far less than the worker prints
    absl::StatusOr<std::unique_ptr<Supervisor>> created = Supervisor::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    ProcessSpec spec = ShellWorker("seq 1 200000", "/tmp", 0, 1);  // ~1.3 MB
    spec.output = mode;
    ASSERT_TRUE((*created)->Start({spec}).ok());
    Supervisor::Event event = (*created)->Wait(absl::Seconds(60));
    EXPECT_EQ(event.type, EventType::kWorkerExited);
    EXPECT_EQ(event.exit.exit_code, 0);
    created->reset();  // flushes
    close(fds[1]);
    reader.join();
    close(fds[0]);
    std::vector<std::string> lines = absl::StrSplit(got, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 200000u) << "lines were dropped";
    for (size_t i = 0; i < lines.size(); i += 997) {
      EXPECT_EQ(lines[i], absl::StrCat(prefix, i + 1));
    }
  }
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
    ProcessSpec spec;
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

// Not a fixture test: the Supervisor runs in a child that is a session
// leader with a pseudo-terminal as its controlling terminal and stdin.
TEST(SupervisorTerminal, ForegroundWorker_ReadsTheTerminal_ThenTheAgentGetsItBack) {
  ASSERT_TRUE(PrepareProcessForSupervision().ok());
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string terminal = ptsname(master);
  TempDir dir;
  pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    // Exit codes say what went wrong.
    if (setsid() < 0) _exit(10);
    int tty = open(terminal.c_str(), O_RDWR);  // becomes the controlling terminal
    if (tty < 0 || dup2(tty, STDIN_FILENO) != STDIN_FILENO) _exit(11);
    if (!StdinIsForegroundTerminal()) _exit(12);
    int null = open("/dev/null", O_WRONLY);
    Supervisor::Options options;
    options.stdout_fd = null;
    options.stderr_fd = null;
    absl::StatusOr<std::unique_ptr<Supervisor>> supervisor = Supervisor::Create(options);
    if (!supervisor.ok()) _exit(13);
    ProcessSpec spec = ShellWorker("read line; echo \"$line\" > \"$DIR/got\"", dir.path());
    spec.foreground_tty = true;
    if (!(*supervisor)->Start({spec}).ok()) _exit(14);
    if (tcgetpgrp(STDIN_FILENO) != (*supervisor)->worker_pid(0)) _exit(15);
    Supervisor::Event event = (*supervisor)->Wait(absl::Seconds(10));
    // Before the fix: the worker is stopped by SIGTTIN and never exits.
    if (event.type != Supervisor::EventType::kWorkerExited) _exit(16);
    if (event.exit.exit_code != 0) _exit(17);
    if (!StdinIsForegroundTerminal()) _exit(18);  // the agent has it back
    _exit(0);
  }
  ASSERT_EQ(write(master, "hello\n", 6), 6);
  int status = 0;
  ASSERT_EQ(waitpid(agent, &status, 0), agent);
  close(master);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(ReadFile(dir.File("got")), "hello\n");
}

TEST(SupervisorTerminal, StdinIsForegroundTerminal_FalseForNonTerminal) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int null = open("/dev/null", O_RDONLY);
    if (dup2(null, STDIN_FILENO) != STDIN_FILENO) _exit(2);
    _exit(StdinIsForegroundTerminal() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST_F(SupervisorTest, WatchedInotifyFd_EndsWaitWhenAWorkerWritesAFile_UntilUnwatched) {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_GE(inotify_add_watch(fd, dir_.path().c_str(), IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB), 0);
  supervisor_->WatchFd(fd);
  // The worker writes after a while; Wait() sleeps in poll() until then.
  ASSERT_TRUE(supervisor_
                  ->Start({ShellWorker(
                      "sleep 0.3; echo step=1 > \"$DIR/progress.0\"; exec sleep 30", dir_.path())})
                  .ok());
  const absl::Time start = absl::Now();
  Supervisor::Event event = supervisor_->Wait(kTimeout);
  EXPECT_EQ(event.type, EventType::kFdReady);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Not read yet: reported again at once, not polled hot meanwhile.
  EXPECT_EQ(supervisor_->Wait(absl::ZeroDuration()).type, EventType::kFdReady);
  // Once the writer closed the file (its last event) and the fd is read,
  // Wait() sleeps again.
  ASSERT_TRUE(WaitFor([&] { return ReadFile(dir_.File("progress.0")) == "step=1\n"; }, kTimeout));
  usleep(50 * 1000);
  char buffer[4096];
  while (read(fd, buffer, sizeof(buffer)) > 0) {
  }
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
  // Unwatched: a change no longer ends Wait().
  supervisor_->WatchFd(-1);
  WriteFile(dir_.File("progress.0"), "step=2\n", 0644);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
  close(fd);
}

TEST_F(SupervisorTest, TwoWatchedFds_EitherEndsWait_EachSlotOnItsOwn) {
  int a[2], b[2];
  ASSERT_EQ(pipe2(a, O_CLOEXEC | O_NONBLOCK), 0);
  ASSERT_EQ(pipe2(b, O_CLOEXEC | O_NONBLOCK), 0);
  supervisor_->WatchFd(a[0], 0);
  supervisor_->WatchFd(b[0], 1);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
  // The second slot (the agent's liveness socket) wakes Wait() as the first does.
  std::thread writer([&] {
    usleep(100 * 1000);
    ASSERT_EQ(write(b[1], "x", 1), 1);
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(supervisor_->Wait(kTimeout).type, EventType::kFdReady);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  writer.join();
  char c;
  ASSERT_EQ(read(b[0], &c, 1), 1);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
  // Unwatching slot 1 leaves slot 0 watched.
  supervisor_->WatchFd(-1, 1);
  ASSERT_EQ(write(b[1], "x", 1), 1);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kTimeout);
  ASSERT_EQ(write(a[1], "x", 1), 1);
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(20)).type, EventType::kFdReady);
  supervisor_->WatchFd(-1, 0);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST_F(SupervisorTest, OutputTail_KeepsAPrefixedWorkersLastLines) {
  ProcessSpec spec = ShellWorker(
      "i=0; while [ $i -lt 100 ]; do echo out$i; i=$((i+1)); done; echo err-last >&2; "
      "printf partial; exec sleep 30",
      dir_.path());
  spec.output = OutputMode::kPrefix;
  ASSERT_TRUE(supervisor_->Start({spec}).ok());
  std::vector<std::string> tail;
  ASSERT_TRUE(WaitFor(
      [&] {
        supervisor_->Wait(absl::Milliseconds(10));
        tail = supervisor_->OutputTail(0);
        return !tail.empty() && tail.back() == "partial";
      },
      kTimeout));
  ASSERT_EQ(tail.size(), LineTail::kMaxLines);
  EXPECT_EQ(tail[tail.size() - 2], "err-last");
  EXPECT_EQ(tail[tail.size() - 3], "out99");
  EXPECT_EQ(supervisor_->OutputTail(1), std::vector<std::string>{});
  const pid_t pid = supervisor_->worker_pid(0);
  supervisor_->SignalWorkers(SIGKILL);
  EXPECT_EQ(NextExit().pid, pid);
  EXPECT_EQ(supervisor_->worker_pid(0), -1) << "a reaped leader's pid may be reused";
}

}  // namespace supervisor_test
}  // namespace
}  // namespace launcher
}  // namespace trainlet

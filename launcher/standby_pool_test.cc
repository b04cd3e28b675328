// StandbyPool through the real Supervisor, with real processes: a small
// Python program (python3 is in every test environment: the e2e tests need
// it) that speaks the standby protocol of standby_pool.h, told what to do by
// its argv.
#include "launcher/standby_pool.h"

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/process_test_util.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"

namespace trainlet::launcher {
namespace {
namespace standby_pool_test {

using testing::CaptureFd;
using ::testing::HasSubstr;
using testing::ProcessState;
using testing::WaitFor;
using EventType = Supervisor::EventType;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// argv[1]: ready | unfit | long | never (never says anything). Once handed
// over: prints each variable, whether it leads its process group, and exits
// with $EXIT.
constexpr char kBoot[] = R"PY(
import os, socket, struct, sys, time
mode = sys.argv[1]
ctl = socket.socket(fileno=3)
if mode == "unfit":
    ctl.sendall(b"UNFIT cannot be this worker\n")
    sys.exit(0)
if mode == "long":
    ctl.sendall(b"x" * 5000)
    time.sleep(30)
if mode == "never":
    time.sleep(30)
ctl.sendall(b"READY test standby\n")
head, fds, _, _ = socket.recv_fds(ctl, 16, 2)
if not head:
    sys.exit(7)
while len(head) < 16:
    head += ctl.recv(16 - len(head))
size, count = struct.unpack("<QI", head[4:16])
payload = b""
while len(payload) < size:
    payload += ctl.recv(size - len(payload))
os.dup2(fds[0], 1)
os.dup2(fds[1], 2)
env = dict(e.decode().split("=", 1) for e in payload.split(b"\0")[:count])
print("magic", head[:4].decode(), "count", count, flush=True)
for k in sorted(env):
    print(k + "=" + env[k], flush=True)
print("group leader", os.getpgrp() == os.getpid(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(int(env.get("EXIT", "0")))
)PY";

ProcessSpec PythonStandby(const std::string& mode, int local_rank = 0) {
  ProcessSpec spec;
  spec.local_rank = local_rank;
  spec.global_rank = local_rank + 10;
  spec.argv = {"python3", "-c", absl::StrCat("import os\nexec(os.read(3,", sizeof(kBoot) - 1, "))"),
               mode};
  spec.env = {"PATH=/usr/bin:/bin", "STATIC=1"};
  return spec;
}

// The worker that takes the standby of `local_rank`.
ProcessSpec WarmWorker(int local_rank, std::vector<std::string> env) {
  ProcessSpec spec = testing::ShellWorker("exit 99", "/tmp", local_rank, local_rank + 10);
  spec.env = std::move(env);
  spec.from_standby = true;
  spec.output = OutputMode::kPrefix;
  return spec;
}

class StandbyPoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(PrepareProcessForSupervision().ok()); }
  void SetUp() override {
    Supervisor::Options options;
    options.stdout_fd = out_.fd();
    options.stderr_fd = err_.fd();
    auto created = Supervisor::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    supervisor_ = std::move(*created);
  }
  // Polls the supervisor (which reads the standbys' lines) until `n` are ready.
  bool AwaitReady(int n) {
    const absl::Time deadline = absl::Now() + kTimeout;
    while (absl::Now() < deadline) {
      if (supervisor_->ready_standbys() == n) return true;
      supervisor_->Wait(absl::Milliseconds(20));
    }
    return false;
  }
  // Polls until `pid` is reaped (0 from ProcessState).
  bool AwaitGone(pid_t pid) {
    const absl::Time deadline = absl::Now() + kTimeout;
    while (absl::Now() < deadline) {
      if (ProcessState(pid) == 0) return true;
      supervisor_->Wait(absl::Milliseconds(20));
    }
    return false;
  }

  CaptureFd out_;
  CaptureFd err_;
  std::unique_ptr<Supervisor> supervisor_;
};

TEST_F(StandbyPoolTest, ReadyStandby_BecomesTheWorker_WithItsEnvAndPrefixedOutput) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready", 1), kBoot).ok());
  const pid_t standby = supervisor_->standby_pid(1);
  ASSERT_GT(standby, 0);
  ASSERT_TRUE(AwaitReady(1));
  ASSERT_TRUE(supervisor_->Start({WarmWorker(1, {"RANK=11", "EXIT=3", "STATIC=1"})}).ok());
  EXPECT_EQ(supervisor_->worker_pid(1), standby);
  EXPECT_EQ(supervisor_->ready_standbys(), 0);
  Supervisor::Event event = supervisor_->Wait(kTimeout);
  ASSERT_EQ(event.type, EventType::kWorkerExited);
  EXPECT_EQ(event.exit.exit_code, 3);
  EXPECT_EQ(event.exit.pid, standby);
  const std::string out = out_.Contents();
  EXPECT_THAT(out, HasSubstr("[rank 11] magic TLH1 count 3\n"));
  EXPECT_THAT(out, HasSubstr("[rank 11] RANK=11\n"));
  EXPECT_THAT(out, HasSubstr("[rank 11] group leader True\n"));
  EXPECT_THAT(err_.Contents(), HasSubstr("[rank 11] to stderr\n"));
}

TEST_F(StandbyPoolTest, StandbyEnvOverridesEnv_AndUnprefixedGetsTheAgentsFds) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  ASSERT_TRUE(AwaitReady(1));
  ProcessSpec worker = WarmWorker(0, {"ENV=cold"});
  worker.standby_env = {"ENV=as-the-interpreter-sees-it"};
  worker.output = OutputMode::kDirect;
  ASSERT_TRUE(supervisor_->Start({worker}).ok());
  ASSERT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkerExited);
  EXPECT_THAT(out_.Contents(), HasSubstr("ENV=as-the-interpreter-sees-it\n"));
  EXPECT_THAT(out_.Contents(), ::testing::Not(HasSubstr("[rank")));
}

// --progress-from-output without --prefix-output: the standby's handover
// gets pipes, and what it prints reaches the agent's stdout as it was
// printed, and the progress hook as a copy.
TEST_F(StandbyPoolTest, RelayedStandby_WritesItsOutputUnchanged_AndTheHookGetsACopy) {
  std::string seen[2];
  Supervisor::Options options;
  options.stdout_fd = out_.fd();
  options.stderr_fd = err_.fd();
  options.on_worker_output = [&](int local_rank, int stream, absl::string_view bytes) {
    if (local_rank == 0) seen[stream].append(bytes.data(), bytes.size());
    return false;
  };
  supervisor_.reset();
  auto created = Supervisor::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  supervisor_ = std::move(*created);
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  ASSERT_TRUE(AwaitReady(1));
  ProcessSpec worker = WarmWorker(0, {"RANK=10"});
  worker.output = OutputMode::kRelay;
  ASSERT_TRUE(supervisor_->Start({worker}).ok());
  ASSERT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkerExited);
  const std::string printed = "magic TLH1 count 1\nRANK=10\ngroup leader True\n";
  EXPECT_TRUE(WaitFor([&] { return out_.Contents() == printed; }, kTimeout)) << out_.Contents();
  EXPECT_TRUE(WaitFor([&] { return err_.Contents() == "to stderr\n"; }, kTimeout))
      << err_.Contents();
  EXPECT_EQ(seen[0], printed);
  EXPECT_EQ(seen[1], "to stderr\n");
}

TEST_F(StandbyPoolTest, NoReadyStandby_StartsCold) {
  // Never says READY: still preparing when the round starts.
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("never"), kBoot).ok());
  const pid_t standby = supervisor_->standby_pid(0);
  ProcessSpec worker = WarmWorker(0, {"PATH=/usr/bin:/bin"});
  ASSERT_TRUE(supervisor_->Start({worker}).ok());
  EXPECT_NE(supervisor_->worker_pid(0), standby);
  Supervisor::Event event = supervisor_->Wait(kTimeout);
  ASSERT_EQ(event.type, EventType::kWorkerExited);
  EXPECT_EQ(event.exit.exit_code, 99);  // the cold COMMAND ran.
  EXPECT_TRUE(AwaitGone(standby));      // killed, reaped, not an exit event.
}

TEST_F(StandbyPoolTest, UnfitOrBrokenStandbys_AreDroppedAndReaped) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("unfit", 0), kBoot).ok());
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("long", 1), kBoot).ok());
  const pid_t unfit = supervisor_->standby_pid(0);
  const pid_t long_line = supervisor_->standby_pid(1);
  EXPECT_TRUE(AwaitGone(unfit));
  EXPECT_TRUE(AwaitGone(long_line));
  EXPECT_EQ(supervisor_->standby_pid(0), -1);
  EXPECT_EQ(supervisor_->standby_pid(1), -1);
  // No event for them: they were never workers.
  EXPECT_EQ(supervisor_->Wait(absl::Milliseconds(50)).type, EventType::kTimeout);
}

TEST_F(StandbyPoolTest, ADeadStandby_IsForgotten_AndItsWorkerStartsCold) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  ASSERT_TRUE(AwaitReady(1));
  const pid_t standby = supervisor_->standby_pid(0);
  kill(standby, SIGKILL);
  EXPECT_TRUE(AwaitGone(standby));
  EXPECT_EQ(supervisor_->standby_pid(0), -1);
  ASSERT_TRUE(supervisor_->Start({WarmWorker(0, {"PATH=/usr/bin:/bin"})}).ok());
  EXPECT_EQ(supervisor_->Wait(kTimeout).exit.exit_code, 99);
}

TEST_F(StandbyPoolTest, AStoppedStandby_FailsItsHandoverWithinTheTimeout_ThenCold) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  ASSERT_TRUE(AwaitReady(1));
  const pid_t standby = supervisor_->standby_pid(0);
  kill(standby, SIGSTOP);
  // More than the socket buffers hold, so the send has to wait for it
  // (handed only: the cold start gets the small `env`).
  ProcessSpec worker = WarmWorker(0, {"PATH=/usr/bin:/bin"});
  for (int i = 0; i < 64; ++i) {
    worker.standby_env.push_back(absl::StrCat("BIG", i, "=", std::string(60000, 'x')));
  }
  const absl::Time before = absl::Now();
  ASSERT_TRUE(supervisor_->Start({worker}).ok());
  EXPECT_LT(absl::Now() - before, StandbyPool::kHandoverTimeout + absl::Seconds(5));
  EXPECT_NE(supervisor_->worker_pid(0), standby);
  EXPECT_EQ(supervisor_->Wait(kTimeout).exit.exit_code, 99);
  EXPECT_TRUE(AwaitGone(standby));
}

TEST_F(StandbyPoolTest, Drop_KillsEveryStandby_AndTheWorkersAreNotSignalled) {
  ASSERT_TRUE(supervisor_->Start({testing::ShellWorker("sleep 30")}).ok());
  const pid_t worker = supervisor_->worker_pid(0);
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready", 0), kBoot).ok());
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready", 1), kBoot).ok());
  const pid_t a = supervisor_->standby_pid(0);
  const pid_t b = supervisor_->standby_pid(1);
  ASSERT_TRUE(AwaitReady(2));
  supervisor_->DropStandbys("a test");
  EXPECT_TRUE(AwaitGone(a));
  EXPECT_TRUE(AwaitGone(b));
  EXPECT_NE(ProcessState(worker), 0);
  supervisor_->SignalWorkers(SIGKILL);
}

TEST_F(StandbyPoolTest, TheSupervisorsEnd_KillsAndReapsTheStandbys) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  const pid_t standby = supervisor_->standby_pid(0);
  ASSERT_TRUE(AwaitReady(1));
  supervisor_.reset();
  EXPECT_EQ(ProcessState(standby), 0);  // reaped, not a zombie.
}

TEST_F(StandbyPoolTest, StandbysAreNotOrphansToKillAtARoundsEnd) {
  ASSERT_TRUE(supervisor_->StartStandby(PythonStandby("ready"), kBoot).ok());
  const pid_t standby = supervisor_->standby_pid(0);
  ASSERT_TRUE(AwaitReady(1));
  // A round of another local rank comes and goes; the standby stays.
  ASSERT_TRUE(supervisor_->Start({testing::ShellWorker("exit 0", "/tmp", 1, 1)}).ok());
  ASSERT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkerExited);
  ASSERT_EQ(supervisor_->Wait(kTimeout).type, EventType::kWorkersGone);
  ASSERT_TRUE(supervisor_->Start({testing::ShellWorker("exit 0", "/tmp", 1, 1)}).ok());
  EXPECT_EQ(supervisor_->standby_pid(0), standby);
  EXPECT_EQ(supervisor_->ready_standbys(), 1);
  EXPECT_NE(ProcessState(standby), 0);
}

}  // namespace standby_pool_test
}  // namespace
}  // namespace trainlet::launcher

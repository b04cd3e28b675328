// SpawnWorker against other threads forking at the same time.

#include "launcher/worker_spawner.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace trainlet::launcher {
namespace {

// Another thread forks children that live on without exec'ing (as the MPI
// readiness probe's helper does), each holding a copy of whatever
// descriptors existed at its fork, the spawner's exec-status pipe
// included. SpawnWorker must not wait for them: it knows the exec
// succeeded when clone() returns (CLONE_VFORK), not from the pipe's EOF.
TEST(SpawnWorker, DoesNotWaitForProcessesForkedMeanwhileThatHoldItsPipe) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<pid_t> forked;
  std::thread forker([&] {
    while (!stop.load()) {
      const pid_t pid = fork();
      if (pid == 0) {
        // No exec: sleeps with every descriptor the process had (30 s, far
        // beyond the bound below), until killed.
        sleep(30);
        _exit(0);
      }
      if (pid > 0) {
        std::lock_guard<std::mutex> lock(mu);
        forked.push_back(pid);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  ProcessSpec spec;
  spec.argv = {"/bin/true"};
  spec.env = {"PATH=/usr/bin:/bin"};
  std::chrono::steady_clock::duration slowest{};
  for (int i = 0; i < 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<SpawnedWorker> w = SpawnWorker(spec, 1, 2);
    slowest = std::max(slowest, std::chrono::steady_clock::now() - start);
    ASSERT_TRUE(w.ok()) << w.status();
    int status;
    ASSERT_EQ(waitpid(w->pid, &status, 0), w->pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop = true;
  forker.join();
  for (pid_t pid : forked) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  // Before the fix a spawn that raced a fork waited out that child's 30 s.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::seconds>(slowest).count(), 10)
      << "a spawn waited for a process forked meanwhile";
  EXPECT_GT(forked.size(), 0u);
}

// The exec failing in the child (ENOEXEC: executable, no valid format)
// still comes back through the pipe, read without waiting.
TEST(SpawnWorker, AnExecThatFailsInTheChildIsStillReported) {
  char path[] = "/tmp/spawner-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "\x01\x02\x03\x04", 4), 4);
  close(fd);
  ASSERT_EQ(chmod(path, 0755), 0);
  ProcessSpec spec;
  spec.argv = {path};
  spec.env = {"PATH=/usr/bin:/bin"};
  absl::StatusOr<SpawnedWorker> w = SpawnWorker(spec, 1, 2);
  unlink(path);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("Exec format error"), std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace trainlet::launcher

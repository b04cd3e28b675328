#include "launcher/children.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

extern char** environ;

namespace trainlet {
namespace launcher {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WaitFor;

constexpr absl::Duration kTimeout = absl::Seconds(10);

pid_t SpawnShell(const std::string& script) {
  pid_t pid = -1;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  return pid;
}

// Spawns `sh -c "<grandchild> & echo $! > FILE; wait"` and returns the
// child's pid, with the grandchild's in *grandchild.
pid_t SpawnWithGrandchild(const TempDir& dir, const std::string& grandchild_command,
                          pid_t* grandchild) {
  const pid_t child =
      SpawnShell(grandchild_command + " & echo $! > " + dir.File("grandchild") + "; wait");
  EXPECT_GT(child, 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string text = ReadFile(dir.File("grandchild"));
        return !text.empty() && text.back() == '\n' &&
               absl::SimpleAtoi(absl::StripAsciiWhitespace(text), grandchild);
      },
      kTimeout));
  return child;
}

const ChildProcess* Find(const std::vector<ChildProcess>& children, pid_t pid) {
  for (const ChildProcess& child : children) {
    if (child.pid == pid) return &child;
  }
  return nullptr;
}

TEST(ListChildren, ListsOurChildren_NotTheirChildren) {
  TempDir dir;
  // The child runs a grandchild (sleep) and waits for it.
  pid_t grandchild = -1;
  const pid_t child = SpawnWithGrandchild(dir, "sleep 30", &grandchild);
  ASSERT_GT(grandchild, 0);
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  ASSERT_TRUE(children.ok()) << children.status();
  const ChildProcess* found = Find(*children, child);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->comm, "sh");
  EXPECT_NE(found->state, 'Z');
  EXPECT_EQ(found->pid_in_proc, child) << "/proc is this PID namespace's";
  EXPECT_EQ(Find(*children, grandchild), nullptr);

  kill(grandchild, SIGKILL);
  kill(child, SIGKILL);
  // Dead but not reaped: still our child, as a zombie.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::vector<ChildProcess>> now = ListChildren();
        const ChildProcess* zombie = now.ok() ? Find(*now, child) : nullptr;
        return zombie != nullptr && zombie->state == 'Z';
      },
      kTimeout));
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  children = ListChildren();
  ASSERT_TRUE(children.ok()) << children.status();
  EXPECT_EQ(Find(*children, child), nullptr);
}

TEST(ListChildren, NoChildAtAll_Empty_ThenAnotherThreadsChildIsListed) {
  // Nothing left from the tests before: waitid says ECHILD, and the list is
  // empty without /proc being read.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL), -1);
  ASSERT_EQ(errno, ECHILD);
  absl::StatusOr<std::vector<ChildProcess>> none = ListChildren();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());

  // A child spawned by another thread is this process's child too.
  pid_t child = -1;
  // `exec`: dash would fork the sleep, and killing the shell would leave it
  // holding ctest's output pipe for 30 s.
  std::thread([&] { child = SpawnShell("exec sleep 30"); }).join();
  ASSERT_GT(child, 0);
  absl::StatusOr<std::vector<ChildProcess>> children = ListChildren();
  ASSERT_TRUE(children.ok()) << children.status();
  EXPECT_NE(Find(*children, child), nullptr);
  kill(child, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  children = ListChildren();
  ASSERT_TRUE(children.ok()) << children.status();
  EXPECT_TRUE(children->empty());
}

TEST(ListDescendants, FindsGrandchildrenInOwnSessions_NotRoot) {
  TempDir dir;
  // A grandchild in a session of its own (as an sshd session's orted is).
  pid_t grandchild = -1;
  const pid_t child = SpawnWithGrandchild(dir, "setsid sleep 30", &grandchild);
  ASSERT_GT(grandchild, 0);
  absl::StatusOr<std::vector<pid_t>> all = ListDescendants(getpid());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_NE(std::find(all->begin(), all->end(), child), all->end());
  EXPECT_NE(std::find(all->begin(), all->end(), grandchild), all->end());
  EXPECT_EQ(std::find(all->begin(), all->end(), getpid()), all->end());
  absl::StatusOr<std::vector<pid_t>> below = ListDescendants(child);
  ASSERT_TRUE(below.ok());
  EXPECT_EQ(std::find(below->begin(), below->end(), child), below->end());
  EXPECT_NE(std::find(below->begin(), below->end(), grandchild), below->end());
  kill(grandchild, SIGKILL);
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
}

TEST(ListChildren, CommandName_IsEscaped) {
  TempDir dir;
  const std::string odd = dir.File("a\nb");  // a newline in the command name
  ASSERT_EQ(symlink("/bin/sleep", odd.c_str()), 0);
  pid_t pid = -1;
  const char* argv[] = {odd.c_str(), "30", nullptr};
  ASSERT_EQ(posix_spawn(&pid, odd.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  absl::StatusOr<std::vector<ChildProcess>> children;
  ASSERT_TRUE(WaitFor(
      [&] {
        children = ListChildren();
        return children.ok() && Find(*children, pid) != nullptr;
      },
      kTimeout));
  EXPECT_EQ(Find(*children, pid)->comm, "a\\nb");
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

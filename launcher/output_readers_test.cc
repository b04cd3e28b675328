#include "launcher/output_readers.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

extern char** environ;

namespace trainlet {
namespace launcher {
namespace {

using testing::ProcessState;
using testing::ReadFile;
using testing::TempDir;

// Spawns `sh -c script` with stdin = `stdin_fd`; the child closes every
// other descriptor of ours it would inherit (pipe2 with O_CLOEXEC).
pid_t SpawnReading(int stdin_fd, const std::string& script) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_fd, STDIN_FILENO);
  pid_t pid = -1;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

bool IsFifo(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

void WriteAll(int fd, const std::string& text) {
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

TEST(FinishOutputReaders, NoChild_DoesNothing) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  OutputReaders readers = FinishOutputReaders(absl::Seconds(1));
  EXPECT_EQ(readers.found, 0);
  EXPECT_TRUE(IsFifo(fds[1])) << "our pipe was left alone";
  close(fds[0]);
  close(fds[1]);
}

TEST(FinishOutputReaders, AReaderOfOurPipe_SeesEofFinishesAndIsReaped) {
  // Like `exec > >(sh -c 'cat; sleep; mv')`: it writes its file only after
  // EOF, and takes a moment to. Two of our descriptors write to its pipe.
  TempDir dir;
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const int second_end = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
  ASSERT_GE(second_end, 0);
  const std::string out = dir.File("out");
  const pid_t reader = SpawnReading(
      fds[0], absl::StrCat("cat > '", out, ".part'; sleep 0.2; mv '", out, ".part' '", out, "'"));
  ASSERT_GT(reader, 0);
  close(fds[0]);
  WriteAll(fds[1], "one\n");
  WriteAll(second_end, "two\n");

  OutputReaders readers = FinishOutputReaders(absl::Seconds(10));
  EXPECT_EQ(readers.found, 1);
  EXPECT_EQ(readers.still_running, 0);
  EXPECT_EQ(ReadFile(out), "one\ntwo\n");
  EXPECT_EQ(ProcessState(reader), 0) << "reaped";
  EXPECT_FALSE(IsFifo(fds[1])) << "now /dev/null";
  EXPECT_FALSE(IsFifo(second_end));
  close(fds[1]);
  close(second_end);
}

TEST(FinishOutputReaders, AReaderThatKeepsRunning_IsLeftAfterTheTimeout) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const pid_t reader = SpawnReading(fds[0], "cat > /dev/null; exec sleep 30");
  ASSERT_GT(reader, 0);
  close(fds[0]);
  const absl::Time start = absl::Now();
  OutputReaders readers = FinishOutputReaders(absl::Milliseconds(300));
  // A bound with room for a loaded machine: the wait itself is 300 ms.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(readers.found, 1);
  EXPECT_EQ(readers.still_running, 1);
  EXPECT_NE(ProcessState(reader), 0);
  kill(reader, SIGKILL);
  int status;
  EXPECT_EQ(waitpid(reader, &status, 0), reader);
  close(fds[1]);
}

// As a process substitution's shell right after bash forked it, when the
// agent exits at once (a usage error) under load: the read end is on a high
// descriptor, not yet its stdin. It is a reader too (e2e_entrypoint's
// ExitPathsTest failed when it was missed and the namespace took it).
TEST(FinishOutputReaders, AReaderWithTheReadEndNotYetOnItsStdin_IsWaitedFor) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const std::string out = dir.File("out");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 9);  // stdin stays ours
  // It makes the read end its stdin only 0.3 s later, as a slow shell would.
  const std::string script = absl::StrCat("sleep 0.3; exec 0<&9 9<&-; cat > '", out, ".part'; mv '",
                                          out, ".part' '", out, "'");
  pid_t reader = -1;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  ASSERT_EQ(posix_spawn(&reader, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  WriteAll(fds[1], "last words\n");
  OutputReaders readers = FinishOutputReaders(absl::Seconds(10));
  EXPECT_EQ(readers.found, 1);
  EXPECT_EQ(readers.still_running, 0);
  EXPECT_EQ(ReadFile(out), "last words\n");
  EXPECT_EQ(ProcessState(reader), 0) << "reaped";
  close(fds[1]);
}

TEST(FinishOutputReaders, AChildNotReadingOurPipes_IsNotWaitedForAndNothingIsClosed) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  int other[2];
  ASSERT_EQ(pipe2(other, O_CLOEXEC), 0);
  // It reads a pipe whose write end we do not hold.
  const pid_t sidecar = SpawnReading(other[0], "exec sleep 30");
  ASSERT_GT(sidecar, 0);
  close(other[0]);
  close(other[1]);
  OutputReaders readers = FinishOutputReaders(absl::Seconds(10));
  EXPECT_EQ(readers.found, 0);
  EXPECT_TRUE(IsFifo(fds[1]));
  EXPECT_NE(ProcessState(sidecar), 0);
  kill(sidecar, SIGKILL);
  int status;
  EXPECT_EQ(waitpid(sidecar, &status, 0), sidecar);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet

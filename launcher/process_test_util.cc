#include "launcher/process_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trainlet {
namespace launcher {
namespace testing {

TempDir::TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern = std::string(base != nullptr && *base ? base : "/tmp") + "/launcher.XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void WriteFile(const std::string& path, const std::string& content, int mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
  }
  chmod(path.c_str(), mode);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

namespace {
// Parses "pid (comm) S ppid ..." (comm may contain spaces and parens).
bool ReadStat(pid_t pid, char* state, pid_t* ppid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 4 > stat.size()) return false;
  std::istringstream rest(stat.substr(close_paren + 2));
  rest >> *state >> *ppid;
  return !rest.fail();
}
}  // namespace

char ProcessState(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return ReadStat(pid, &state, &ppid) ? state : 0;
}

std::vector<pid_t> ZombieChildrenOf(pid_t parent) {
  std::vector<pid_t> zombies;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return zombies;
  while (struct dirent* entry = readdir(proc)) {
    int pid;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    char state = 0;
    pid_t ppid = 0;
    if (ReadStat(pid, &state, &ppid) && state == 'Z' && ppid == parent) zombies.push_back(pid);
  }
  closedir(proc);
  return zombies;
}

CaptureFd::CaptureFd() : fd_(memfd_create("launcher-test-capture", MFD_CLOEXEC)) {
  EXPECT_GE(fd_, 0);
}

CaptureFd::~CaptureFd() { close(fd_); }

std::string CaptureFd::Contents() const {
  std::string out;
  char buffer[4096];
  off_t offset = 0;
  for (;;) {
    ssize_t n = pread(fd_, buffer, sizeof(buffer), offset);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return out;
}

ProcessSpec ShellWorker(const std::string& script, const std::string& dir, int local_rank,
                        int global_rank) {
  ProcessSpec spec;
  spec.local_rank = local_rank;
  spec.global_rank = global_rank;
  spec.argv = {"sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin", "DIR=" + dir};
  return spec;
}

}  // namespace testing
}  // namespace launcher
}  // namespace trainlet

#include "launcher/children.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace trainlet {
namespace launcher {
namespace {

// Reads a small /proc file in one go ("" if it cannot be read: the process
// may have been reaped meanwhile).
std::string ReadProcFile(const std::string& path) {
  std::string content;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return content;
  char buffer[4096];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > 64 * 1024) break;
  }
  close(fd);
  return content;
}

struct Stat {
  char state = 0;
  pid_t ppid = 0;
  uint64_t start_ticks = 0;
  std::string comm;
};

// Fields of /proc/<pid>/stat counted from the state (field 3), after comm.
constexpr size_t kStateField = 3;
constexpr size_t kStartTimeField = 22;

// "pid (comm) S ppid ...": comm may contain spaces and parentheses.
std::optional<Stat> ReadStat(const std::string& pid_dir) {
  std::string stat = ReadProcFile(pid_dir + "/stat");
  size_t open_paren = stat.find('(');
  size_t close_paren = stat.rfind(')');
  if (open_paren == std::string::npos || close_paren == std::string::npos ||
      close_paren < open_paren || close_paren + 2 >= stat.size()) {
    return std::nullopt;
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close_paren + 2), ' ', absl::SkipEmpty());
  Stat result;
  if (fields.size() < 2 || fields[0].size() != 1 || !absl::SimpleAtoi(fields[1], &result.ppid)) {
    return std::nullopt;
  }
  result.state = fields[0][0];
  // 0 (unknown) if missing: a kernel's stat always has it.
  if (fields.size() > kStartTimeField - kStateField &&
      !absl::SimpleAtoi(fields[kStartTimeField - kStateField], &result.start_ticks)) {
    result.start_ticks = 0;
  }
  result.comm = absl::CHexEscape(stat.substr(open_paren + 1, close_paren - open_paren - 1));
  return result;
}

// The NSpid line of /proc/<pid>/status: the process's pid in the namespace
// of the /proc mount first, then in each nested namespace down to its own.
// Empty if the line is missing (kernels before 4.1) or unreadable.
std::vector<pid_t> ReadNsPids(const std::string& pid_dir) {
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(ReadProcFile(pid_dir + "/status"), '\n')) {
    if (!absl::ConsumePrefix(&line, "NSpid:")) continue;
    for (absl::string_view field :
         absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      pid_t pid;
      if (!absl::SimpleAtoi(field, &pid)) return {};
      pids.push_back(pid);
    }
    break;
  }
  return pids;
}

bool HasNoChildren() {
  // Any thread's children count (no __WNOTHREAD), clone children too (__WALL);
  // WNOWAIT leaves a zombie for the Supervisor to reap. ECHILD: none at all.
  siginfo_t info{};
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0 && errno == ECHILD;
}

}  // namespace

absl::StatusOr<std::vector<ChildProcess>> ListChildren() {
  // No child at all, as after a run whose workers left nothing behind: no
  // need to read every process in /proc (hundreds on a shared host).
  if (HasNoChildren()) return std::vector<ChildProcess>{};
  const pid_t self = getpid();
  // Which number this process has in /proc, and how deep below the /proc
  // mount's PID namespace this process's namespace is.
  char link[64];
  ssize_t link_size = readlink("/proc/self", link, sizeof(link) - 1);
  pid_t self_in_proc = -1;
  if (link_size <= 0 ||
      !absl::SimpleAtoi(absl::string_view(link, static_cast<size_t>(link_size)), &self_in_proc)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainlet: cannot list child processes: /proc is not mounted (readlink /proc/self: ",
        link_size < 0 ? strerror(errno) : "unexpected", ")"));
  }
  std::vector<pid_t> self_ns_pids = ReadNsPids("/proc/self");
  size_t depth = 0;  // index of our namespace in a process's NSpid list
  if (!self_ns_pids.empty()) {
    if (self_ns_pids.front() != self_in_proc || self_ns_pids.back() != self) {
      return absl::FailedPreconditionError(
          "trainlet: cannot list child processes: /proc/self/status does not match this "
          "process");
    }
    depth = self_ns_pids.size() - 1;
  } else if (self_in_proc != self) {
    return absl::FailedPreconditionError(
        "trainlet: cannot list child processes: /proc belongs to another PID namespace and "
        "this kernel has no NSpid to map its numbers");
  }

  DIR* proc = opendir("/proc");
  if (proc == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainlet: cannot list child processes: opendir /proc: ", strerror(errno)));
  }
  std::vector<ChildProcess> children;
  while (struct dirent* entry = readdir(proc)) {
    pid_t pid_in_proc;
    if (!absl::SimpleAtoi(entry->d_name, &pid_in_proc)) continue;
    const std::string dir = absl::StrCat("/proc/", pid_in_proc);
    std::optional<Stat> stat = ReadStat(dir);
    if (!stat || stat->ppid != self_in_proc) continue;
    ChildProcess child;
    child.pid_in_proc = pid_in_proc;
    child.state = stat->state;
    child.start_ticks = stat->start_ticks;
    child.comm = std::move(stat->comm);
    if (depth == 0) {
      child.pid = pid_in_proc;
    } else {
      // Our child lives in our namespace or one nested below it: its NSpid
      // list is at least as deep as ours.
      std::vector<pid_t> ns_pids = ReadNsPids(dir);
      if (ns_pids.size() <= depth || ns_pids.front() != pid_in_proc) continue;  // gone meanwhile
      child.pid = ns_pids[depth];
    }
    children.push_back(std::move(child));
  }
  closedir(proc);
  return children;
}

uint64_t BootTimeTicks() {
  struct timespec now;
  if (clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (ticks_per_second <= 0) return 0;
  // Rounded down, as the kernel rounds a start time.
  const auto tps = static_cast<uint64_t>(ticks_per_second);
  return static_cast<uint64_t>(now.tv_sec) * tps +
         static_cast<uint64_t>(now.tv_nsec) * tps / 1000000000u;
}

std::optional<PipeId> StdinPipe(const ChildProcess& child) {
  // stat() follows the magic link to the pipe itself.
  struct stat st;
  if (stat(absl::StrCat("/proc/", child.pid_in_proc, "/fd/0").c_str(), &st) != 0 ||
      !S_ISFIFO(st.st_mode)) {
    return std::nullopt;
  }
  return PipeId{st.st_dev, st.st_ino};
}

std::vector<PipeId> PipeReadEnds(const ChildProcess& child) {
  std::vector<PipeId> pipes;
  const std::string fd_dir = absl::StrCat("/proc/", child.pid_in_proc, "/fd");
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return pipes;
  int listed = 0;
  while (struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    if (++listed > 4096) break;  // bounded: a child with a huge table
    struct stat st;
    if (stat(absl::StrCat(fd_dir, "/", entry->d_name).c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) {
      continue;
    }
    // The read end: "flags:" in fdinfo (octal) has no write access.
    const std::string info =
        ReadProcFile(absl::StrCat("/proc/", child.pid_in_proc, "/fdinfo/", entry->d_name));
    const size_t at = info.find("flags:");
    if (at == std::string::npos) continue;
    unsigned long flags = 0;
    if (sscanf(info.c_str() + at + 6, "%lo", &flags) != 1) continue;
    if ((flags & O_ACCMODE) == O_RDONLY) pipes.push_back(PipeId{st.st_dev, st.st_ino});
  }
  closedir(dir);
  return pipes;
}

std::optional<PipeId> PipeOfFd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return std::nullopt;
  return PipeId{st.st_dev, st.st_ino};
}

absl::StatusOr<std::vector<pid_t>> ListDescendants(pid_t root) {
  char link[64];
  ssize_t link_size = readlink("/proc/self", link, sizeof(link) - 1);
  pid_t self_in_proc = -1;
  if (link_size <= 0 ||
      !absl::SimpleAtoi(absl::string_view(link, static_cast<size_t>(link_size)), &self_in_proc) ||
      self_in_proc != getpid()) {
    return absl::FailedPreconditionError(
        "trainlet: cannot list descendant processes: /proc is missing or belongs to another "
        "PID namespace");
  }
  DIR* proc = opendir("/proc");
  if (proc == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainlet: cannot list processes: opendir /proc: ", strerror(errno)));
  }
  std::multimap<pid_t, pid_t> children;  // ppid -> pid
  while (struct dirent* entry = readdir(proc)) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::optional<Stat> stat = ReadStat(absl::StrCat("/proc/", pid));
    if (stat) children.emplace(stat->ppid, pid);
  }
  closedir(proc);
  std::vector<pid_t> out;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    std::vector<pid_t> next;
    for (pid_t parent : frontier) {
      auto [begin, end] = children.equal_range(parent);
      for (auto it = begin; it != end; ++it) {
        out.push_back(it->second);
        next.push_back(it->second);
      }
    }
    frontier.swap(next);
  }
  return out;
}

}  // namespace launcher
}  // namespace trainlet

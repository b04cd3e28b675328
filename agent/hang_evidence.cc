#include "agent/hang_evidence.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace trainlet::agent {
namespace {

// Processes scanned for group members, at most (a pod has few).
constexpr int kMaxScannedProcesses = 65536;

std::string ReadSmallFile(const std::string& path, size_t max = 512) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string data(max, '\0');
  const ssize_t n = read(fd, data.data(), data.size());
  close(fd);
  data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return data;
}

// /proc/PID/stat: "pid (comm) S ppid pgrp ...". comm may hold ')' and
// spaces, so the fields are read after the last ')'.
struct Stat {
  char state = '?';
  pid_t pgrp = -1;
};
bool ParseStat(absl::string_view text, Stat* out) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) return false;
  std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipEmpty());
  if (fields.size() < 3 || fields[0].size() != 1) return false;
  out->state = fields[0][0];
  int pgrp = -1;
  if (!absl::SimpleAtoi(fields[2], &pgrp)) return false;
  out->pgrp = pgrp;
  return true;
}

std::vector<int> NumericEntries(const std::string& dir_path, int max) {
  std::vector<int> out;
  DIR* dir = opendir(dir_path.c_str());
  if (dir == nullptr) return out;
  int scanned = 0;
  while (struct dirent* e = readdir(dir)) {
    int n = 0;
    if (!absl::SimpleAtoi(e->d_name, &n) || n <= 0) continue;
    out.push_back(n);
    if (++scanned >= max) break;
  }
  closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Trimmed(std::string s) {
  absl::StripTrailingAsciiWhitespace(&s);
  return s;
}

}  // namespace

pid_t ProcessGroupOf(pid_t pid, const std::string& proc_root) {
  Stat st;
  if (!ParseStat(ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/stat")), &st)) return -1;
  return st.pgrp;
}

ProcessEvidence ReadProcessEvidence(pid_t pid, const std::string& proc_root) {
  ProcessEvidence p;
  p.pid = pid;
  const std::string base = absl::StrCat(proc_root, "/", pid);
  Stat st;
  if (!ParseStat(ReadSmallFile(base + "/stat"), &st)) return p;
  p.state = st.state;
  p.name = Trimmed(ReadSmallFile(base + "/comm", 64));
  const std::vector<int> tids = NumericEntries(base + "/task", kMaxScannedProcesses);
  p.threads_total = static_cast<int>(tids.size());
  for (int tid : tids) {
    if (static_cast<int>(p.threads.size()) >= kMaxEvidenceThreads) break;
    const std::string task = absl::StrCat(base, "/task/", tid);
    ThreadEvidence t;
    t.tid = tid;
    Stat ts;
    if (!ParseStat(ReadSmallFile(task + "/stat"), &ts)) continue;  // it ended meanwhile
    t.state = ts.state;
    t.name = Trimmed(ReadSmallFile(task + "/comm", 64));
    t.wchan = Trimmed(ReadSmallFile(task + "/wchan", 128));
    p.threads.push_back(std::move(t));
  }
  return p;
}

std::vector<ProcessEvidence> ReadProcessGroup(pid_t pgid, int* total,
                                              const std::string& proc_root) {
  std::vector<ProcessEvidence> out;
  *total = 0;
  if (pgid <= 0) return out;
  std::vector<pid_t> members;
  for (int pid : NumericEntries(proc_root, kMaxScannedProcesses)) {
    Stat st;
    if (!ParseStat(ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/stat")), &st)) continue;
    if (st.pgrp == pgid) members.push_back(pid);
  }
  // The leader first, then by pid.
  std::stable_partition(members.begin(), members.end(), [pgid](pid_t p) { return p == pgid; });
  *total = static_cast<int>(members.size());
  for (pid_t pid : members) {
    if (static_cast<int>(out.size()) >= kMaxEvidenceProcesses) break;
    out.push_back(ReadProcessEvidence(pid, proc_root));
  }
  return out;
}

std::string HangEvidence::ToText() const {
  std::string s = absl::StrFormat(
      "worker rank %d (local rank %d, pid %d), round %d: no progress for %s (--hang-timeout=%s)\n",
      global_rank, local_rank, pid, round,
      absl::FormatDuration(absl::Trunc(silence, absl::Milliseconds(1))),
      absl::FormatDuration(hang_timeout));
  absl::StrAppend(&s, "last progress: ",
                  last_progress.empty() ? "(a touch, no line)" : SafeForLog(last_progress, 1200),
                  "\n");
  absl::StrAppend(&s, "processes in its group: ", processes_total,
                  processes_total > static_cast<int>(processes.size())
                      ? absl::StrCat(" (first ", processes.size(), " shown)")
                      : "",
                  "\n");
  for (const ProcessEvidence& p : processes) {
    absl::StrAppend(&s, "  pid ", p.pid, " (", SafeForLog(p.name, 32), ") state ",
                    std::string(1, p.state), ", ", p.threads_total, " thread(s)",
                    p.threads_total > static_cast<int>(p.threads.size())
                        ? absl::StrCat(", first ", p.threads.size(), " shown")
                        : "",
                    "\n");
    for (const ThreadEvidence& t : p.threads) {
      absl::StrAppend(&s, "    tid ", t.tid, " (", SafeForLog(t.name, 32), ") ",
                      std::string(1, t.state),
                      " wchan=", t.wchan.empty() ? "?" : SafeForLog(t.wchan, 64), "\n");
    }
  }
  if (!output_relayed) {
    absl::StrAppend(&s, "last output: not relayed by the agent (run with --prefix-output)\n");
  } else {
    absl::StrAppend(&s, "last output (", output_tail.size(), " line(s)):\n");
    for (const std::string& line : output_tail) {
      absl::StrAppend(&s, "  | ", SafeForLog(line, 300), "\n");
    }
  }
  absl::StrAppend(&s, "python traceback: ", SafeForLog(traceback_note, 200), "\n");
  if (!traceback.empty()) {
    for (absl::string_view line : absl::StrSplit(traceback, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&s, "  | ", SafeForLog(line, 300), "\n");
    }
  }
  return s;
}

}  // namespace trainlet::agent

#include "progress/hang_evidence.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/small_file.h"

namespace trainlet::agent {
namespace {

// Processes scanned for group members, at most (a pod has few).
constexpr int kMaxScannedProcesses = 65536;

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

// One thread's Python frames, the innermost first.
struct PyFrame {
  std::string path;
  std::string line;
  std::string func;
};
struct PyThread {
  std::string id;
  std::vector<PyFrame> frames;
};

constexpr absl::string_view kCollectiveFunctions[] = {
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_object",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "broadcast",
    "broadcast_object_list",
    "allreduce",
    "allgather",
};
constexpr absl::string_view kCollectivePaths[] = {"/torch/distributed/", "/deepspeed/comm/",
                                                  "/horovod/"};

bool IsCollective(const PyFrame& f) {
  for (absl::string_view p : kCollectivePaths) {
    if (absl::StrContains(f.path, p)) return true;
  }
  for (absl::string_view fn : kCollectiveFunctions) {
    if (f.func == fn) return true;
  }
  return false;
}

std::string Base(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

// The threads of the last dump in `text`: a thread id seen again starts a
// new dump (the file may hold an earlier one).
std::vector<PyThread> ParseDump(absl::string_view text) {
  std::vector<PyThread> threads;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Current thread ") || absl::ConsumePrefix(&rest, "Thread ")) {
      const std::string id(rest.substr(0, rest.find(' ')));
      for (const PyThread& t : threads) {
        if (t.id == id) {
          threads.clear();
          break;
        }
      }
      threads.push_back(PyThread{id, {}});
      continue;
    }
    // `  File "PATH", line N in FUNC`
    if (threads.empty() || !absl::ConsumePrefix(&rest, "  File \"")) continue;
    const size_t quote = rest.rfind("\", line ");
    if (quote == absl::string_view::npos) continue;
    PyFrame f;
    f.path = std::string(rest.substr(0, quote));
    absl::string_view tail = rest.substr(quote + 8);
    const size_t in = tail.find(" in ");
    if (in == absl::string_view::npos) continue;
    f.line = std::string(tail.substr(0, in));
    f.func = std::string(absl::StripAsciiWhitespace(tail.substr(in + 4)));
    threads.back().frames.push_back(std::move(f));
  }
  return threads;
}

}  // namespace

StackPlace ClassifyTraceback(absl::string_view traceback) {
  StackPlace place;
  const std::vector<PyThread> threads = ParseDump(traceback);
  std::vector<const PyThread*> judged;
  for (const PyThread& t : threads) {
    for (const PyFrame& f : t.frames) {
      if (f.func == "<module>") {
        judged.push_back(&t);
        break;
      }
    }
    if (!judged.empty()) break;  // the main thread
  }
  if (judged.empty()) {
    for (const PyThread& t : threads) judged.push_back(&t);
  }
  for (const PyThread* t : judged) {
    const std::vector<PyFrame>& fr = t->frames;
    size_t first = 0;
    while (first < fr.size() && !IsCollective(fr[first])) ++first;
    if (first == fr.size()) continue;
    // The API the program called: the outermost of the collective frames
    // from there on; and who called it.
    size_t api = first;
    while (api + 1 < fr.size() && IsCollective(fr[api + 1])) ++api;
    place.stack = v1::WorkerEvidence::IN_COLLECTIVE;
    place.where = absl::StrCat(fr[api].func, " (", Base(fr[api].path), ":", fr[api].line, ")");
    if (api + 1 < fr.size()) {
      absl::StrAppend(&place.where, " from ", Base(fr[api + 1].path), ":", fr[api + 1].line, " in ",
                      fr[api + 1].func);
    }
    return place;
  }
  for (const PyThread* t : judged) {
    if (t->frames.empty()) continue;
    const PyFrame& f = t->frames.front();
    place.stack = v1::WorkerEvidence::NOT_IN_COLLECTIVE;
    place.where = absl::StrCat(Base(f.path), ":", f.line, " in ", f.func);
    return place;
  }
  return place;
}

StackPlace PlaceOf(const HangEvidence& e) {
  StackPlace place = ClassifyTraceback(e.traceback);
  if (place.stack == v1::WorkerEvidence::STACK_UNKNOWN || e.traceback_pid <= 0) return place;
  for (const ProcessEvidence& p : e.processes) {
    for (const ThreadEvidence& t : p.threads) {
      if (t.tid != e.traceback_pid) continue;
      absl::StrAppend(&place.where, "; main thread ", std::string(1, t.state));
      if (!t.wchan.empty() && t.wchan != "0") absl::StrAppend(&place.where, " in ", t.wchan);
      return place;
    }
  }
  return place;
}

v1::WorkerEvidence Summarize(const HangEvidence& e) {
  v1::WorkerEvidence w;
  w.set_local_rank(e.local_rank);
  w.set_stack(e.place.stack);
  // Bounded and printable (rendezvous/coordinator_hang.h): escaped, then cut.
  std::string where = SafeForLog(e.place.where, 160);
  if (where.size() > 200) where.resize(200);
  w.set_where(std::move(where));
  w.set_step(-1);
  for (absl::string_view token : absl::StrSplit(e.last_progress, ' ', absl::SkipEmpty())) {
    int64_t step = 0;
    if (absl::ConsumePrefix(&token, "step=") && absl::SimpleAtoi(token, &step) && step >= 0) {
      w.set_step(std::min<int64_t>(step, int64_t{1} << 62));
    }
  }
  w.set_progress_age_ms(
      e.silence == absl::InfiniteDuration()
          ? -1
          : std::clamp<int64_t>(absl::ToInt64Milliseconds(e.silence), 0, int64_t{1} << 40));
  w.set_exited(e.exited);
  return w;
}

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
  const std::string progress =
      silence == absl::InfiniteDuration()
          ? std::string("no progress reported")
          : absl::StrCat("no progress for ",
                         absl::FormatDuration(absl::Trunc(silence, absl::Milliseconds(1))));
  // A worker that had exited has no process (pid -1): no pid to name.
  std::string s =
      absl::StrFormat("worker rank %d (local rank %d%s), round %d: %s", global_rank, local_rank,
                      pid > 0 ? absl::StrCat(", pid ", pid) : "", round, progress);
  if (declared) {
    absl::StrAppend(&s, " (--hang-timeout=", absl::FormatDuration(hang_timeout),
                    "): declared hung\n");
  } else {
    absl::StrAppend(&s, exited ? " (it had exited)" : "",
                    why.empty() ? "" : absl::StrCat(": taken because ", SafeForLog(why, 300)),
                    "\n");
  }
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
    absl::StrAppend(&s,
                    "last output: not relayed by the agent (run with --prefix-output or "
                    "--progress-from-output)\n");
  } else {
    absl::StrAppend(&s, "last output (", output_tail.size(), " line(s)):\n");
    for (const std::string& line : output_tail) {
      absl::StrAppend(&s, "  | ", SafeForLog(line, 300), "\n");
    }
  }
  absl::StrAppend(&s, "python traceback: ", SafeForLog(traceback_note, 200), "\n");
  if (place.stack != v1::WorkerEvidence::STACK_UNKNOWN) {
    absl::StrAppend(&s, "python stack: ",
                    place.stack == v1::WorkerEvidence::IN_COLLECTIVE ? "in a collective: "
                                                                     : "not in a collective: ",
                    SafeForLog(place.where, 300), "\n");
  }
  if (!traceback.empty()) {
    for (absl::string_view line : absl::StrSplit(traceback, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&s, "  | ", SafeForLog(line, 300), "\n");
    }
  }
  return s;
}

}  // namespace trainlet::agent

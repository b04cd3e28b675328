#include "preflight/gpu_loopback.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/child_io.h"
#include "common/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {
namespace {

constexpr char kProgram[] =
#include "preflight/gpu_loopback.inc"
    ;

constexpr int kMaxGpus = 64;
constexpr size_t kMaxStderrTail = 1024;
// How long a killed program gets to be reaped before a thread takes it over.
constexpr auto kReapAfterKill = std::chrono::seconds(1);

using google::protobuf::Struct;
using google::protobuf::Value;

std::string ErrnoText(int e) { return absl::StrCat(strerror(e), " (errno ", e, ")"); }

// ---- The output ----------------------------------------------------------

const Value* Field(const Struct& s, const char* name) {
  auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("the GPU loopback's output: ", what));
}

// A finite number in [min, max] at `name`.
absl::StatusOr<double> Number(const Struct& s, const char* name, double min, double max) {
  const Value* v = Field(s, name);
  if (v == nullptr || v->kind_case() != Value::kNumberValue || !std::isfinite(v->number_value()) ||
      v->number_value() < min || v->number_value() > max) {
    return Bad(absl::StrCat("\"", name, "\" must be a number in [", min, ", ", max, "]"));
  }
  return v->number_value();
}

absl::StatusOr<std::string> Text(const Struct& s, const char* name) {
  const Value* v = Field(s, name);
  if (v == nullptr || v->kind_case() != Value::kStringValue) {
    return Bad(absl::StrCat("\"", name, "\" must be a string"));
  }
  return SafeForLog(v->string_value(), 300);
}

constexpr double kGB = 1e9;

v1::CheckResult MemoryResult(const std::vector<std::pair<std::string, double>>& gpus,
                             const GpuLoopbackOptions& options) {
  std::vector<double> sorted;
  for (const auto& [name, gbps] : gpus) sorted.push_back(gbps);
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const double floor = median * options.min_fraction_of_median;
  std::vector<std::string> slow;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].second < floor) {
      slow.push_back(
          absl::StrCat("GPU ", i, " (", gpus[i].first, ") ", HumanRate(gpus[i].second * kGB)));
    }
  }
  if (!slow.empty()) {
    return MakeResult(
        kCheckGpuMemoryBandwidth, v1::CheckResult::FAIL,
        absl::StrCat(absl::StrJoin(slow, ", "), ": below ", options.min_fraction_of_median,
                     " of the median ", HumanRate(median * kGB), " of this pod's ", n,
                     " GPUs (a throttled, degraded or misconfigured GPU; check its clocks and "
                     "temperature with nvidia-smi)"),
        sorted.front() * kGB, kUnitBytesPerSecond, floor * kGB);
  }
  return MakeResult(kCheckGpuMemoryBandwidth, v1::CheckResult::PASS,
                    n == 1 ? absl::StrCat("1 GPU: ", HumanRate(sorted.front() * kGB),
                                          " device-to-device copy (no other GPU to compare with)")
                           : absl::StrCat(n, " GPUs: ", HumanRate(sorted.front() * kGB), " to ",
                                          HumanRate(sorted.back() * kGB), " device-to-device copy"),
                    sorted.front() * kGB, kUnitBytesPerSecond, floor * kGB);
}

absl::StatusOr<v1::CheckResult> NcclResult(const Struct& nccl, const GpuLoopbackOptions& options) {
  if (Field(nccl, "skipped") != nullptr) {
    absl::StatusOr<std::string> why = Text(nccl, "skipped");
    if (!why.ok()) return why.status();
    return Skipped(kCheckGpuNcclBusbw, *why);
  }
  if (Field(nccl, "error") != nullptr) {
    absl::StatusOr<std::string> why = Text(nccl, "error");
    if (!why.ok()) return why.status();
    return MakeResult(kCheckGpuNcclBusbw, v1::CheckResult::FAIL,
                      absl::StrCat("the NCCL all-reduce among this pod's GPUs failed: ", *why));
  }
  absl::StatusOr<double> ranks = Number(nccl, "ranks", 2, kMaxGpus);
  if (!ranks.ok()) return ranks.status();
  absl::StatusOr<double> bytes = Number(nccl, "bytes", 1, 1e12);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<double> algbw = Number(nccl, "algbw_gbps", 0, 1e6);
  if (!algbw.ok()) return algbw.status();
  const double busbw = AllReduceBusBandwidth(*algbw, static_cast<int>(*ranks)) * kGB;
  const double threshold = options.min_busbw_gbps * kGB;
  const std::string what = absl::StrCat("all-reduce of ", HumanBytes(static_cast<uint64_t>(*bytes)),
                                        " among ", static_cast<int>(*ranks), " GPUs: busbw ",
                                        HumanRate(busbw), " (algbw ", HumanRate(*algbw * kGB), ")");
  if (threshold > 0 && busbw < threshold) {
    return MakeResult(kCheckGpuNcclBusbw, v1::CheckResult::FAIL,
                      absl::StrCat(what, ", below --preflight-min-gpu-busbw ", HumanRate(threshold),
                                   " (NVLink or PCIe degraded? NCCL_DEBUG=INFO says which path "
                                   "NCCL took)"),
                      busbw, kUnitBytesPerSecond, threshold);
  }
  return MakeResult(kCheckGpuNcclBusbw, v1::CheckResult::PASS,
                    threshold > 0 ? what : absl::StrCat(what, "; no --preflight-min-gpu-busbw"),
                    busbw, kUnitBytesPerSecond, threshold);
}

// Both checks with the same outcome and reason (the program as a whole).
std::vector<v1::CheckResult> Both(v1::CheckResult::Outcome outcome, const std::string& reason) {
  return {MakeResult(kCheckGpuMemoryBandwidth, outcome, reason),
          MakeResult(kCheckGpuNcclBusbw, outcome, reason)};
}

// ---- The process ---------------------------------------------------------

struct Pipe {
  OwnedFd r, w;
  bool Open() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    r.Reset(p[0]);
    w.Reset(p[1]);
    return true;
  }
};

// What the child needs, prepared before the fork (only async-signal-safe
// calls after it).
struct ChildPlan {
  int out, err, report, devnull;
  char** argv;
  char** envp;
};

[[noreturn]] void ChildExec(const ChildPlan& p) {
  setpgid(0, 0);  // its own group: a timeout kills the NCCL workers too
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(p.devnull, 0);
  dup2(p.out, 1);
  dup2(p.err, 2);
  execvpe(p.argv[0], p.argv, p.envp);
  const int e = errno;
  ssize_t ignored = write(p.report, &e, sizeof(e));
  (void)ignored;
  _exit(127);
}

struct Outcome {
  bool exec_failed = false;
  int exec_errno = 0;
  bool timed_out = false;
  bool oversize = false;
  ChildEnd end;
  std::string out;
  std::string err_tail;
};

// SIGKILL to the program's group, only while its leader is still our
// unreaped child (alive or a zombie): its pid, and so its group id, cannot
// name another's process then. Its workers die with it (PDEATHSIG).
void KillGroup(pid_t pid) {
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
    kill(-pid, SIGKILL);
  }
}

using SteadyTime = std::chrono::steady_clock::time_point;

void Converse(pid_t pid, int pidfd, OwnedFd report, OwnedFd out, OwnedFd err, SteadyTime deadline,
              Outcome* o) {
  ChildOutput read = ReadChildOutput(std::move(report), std::move(out), std::move(err), deadline,
                                     kMaxGpuLoopbackOutputBytes, kMaxStderrTail);
  o->timed_out = read.timed_out;
  o->oversize = read.oversize;
  o->out = std::move(read.out);
  o->err_tail = std::move(read.tail);
  if (read.exec_report.size() == sizeof(int)) {
    o->exec_failed = true;
    memcpy(&o->exec_errno, read.exec_report.data(), sizeof(int));
  }
  if (!o->timed_out && !o->oversize && ReapChildBy(pid, pidfd, deadline, &o->end)) return;
  if (!o->oversize) o->timed_out = true;
  KillGroup(pid);
  if (ReapChildBy(pid, pidfd, std::chrono::steady_clock::now() + kReapAfterKill, &o->end)) return;
  ReapChildLater(pid);
}

std::string StderrNote(const std::string& tail) {
  std::string t(absl::StripTrailingAsciiWhitespace(tail));
  if (t.empty()) return "";
  return absl::StrCat("; its stderr ends: ",
                      SafeForLog(t.substr(t.size() > 240 ? t.size() - 240 : 0), 240));
}

}  // namespace

absl::string_view GpuLoopbackProgram() { return kProgram; }

double AllReduceBusBandwidth(double algbw, int ranks) {
  if (ranks < 2) return 0;
  return algbw * 2.0 * (ranks - 1) / ranks;
}

absl::StatusOr<std::vector<v1::CheckResult>> ParseGpuLoopbackOutput(
    absl::string_view output, const GpuLoopbackOptions& options) {
  if (output.size() > kMaxGpuLoopbackOutputBytes) {
    return Bad(absl::StrCat("more than ", kMaxGpuLoopbackOutputBytes, " bytes"));
  }
  // The last non-empty line: the program's answer (a library may print first).
  absl::string_view line;
  for (absl::string_view l : absl::StrSplit(output, '\n', absl::SkipWhitespace())) line = l;
  if (line.empty()) return Bad("no line on stdout");
  Struct doc;
  if (!google::protobuf::util::JsonStringToMessage(std::string(line), &doc).ok()) {
    return Bad(absl::StrCat("not a JSON object: ", SafeForLog(line, 120)));
  }
  absl::StatusOr<std::string> status = Text(doc, "status");
  if (!status.ok()) return status.status();
  if (*status == "skipped") {
    absl::StatusOr<std::string> why = Text(doc, "reason");
    if (!why.ok()) return why.status();
    return Both(v1::CheckResult::SKIPPED, *why);
  }
  if (*status != "ok") return Bad(absl::StrCat("unknown \"status\" ", *status));
  const Value* gpus = Field(doc, "gpus");
  if (gpus == nullptr || gpus->kind_case() != Value::kListValue ||
      gpus->list_value().values_size() < 1 || gpus->list_value().values_size() > kMaxGpus) {
    return Bad(absl::StrCat("\"gpus\" must be a list of 1 to ", kMaxGpus, " GPUs"));
  }
  std::vector<std::pair<std::string, double>> bandwidths;
  for (const Value& g : gpus->list_value().values()) {
    if (g.kind_case() != Value::kStructValue) return Bad("each of \"gpus\" must be an object");
    absl::StatusOr<std::string> name = Text(g.struct_value(), "name");
    if (!name.ok()) return name.status();
    absl::StatusOr<double> gbps = Number(g.struct_value(), "mem_gbps", 0, 1e6);
    if (!gbps.ok()) return gbps.status();
    bandwidths.emplace_back(SafeForLog(*name, 64), *gbps);
  }
  const Value* nccl = Field(doc, "nccl");
  if (nccl == nullptr || nccl->kind_case() != Value::kStructValue) {
    return Bad("\"nccl\" must be an object");
  }
  absl::StatusOr<v1::CheckResult> busbw = NcclResult(nccl->struct_value(), options);
  if (!busbw.ok()) return busbw.status();
  return std::vector<v1::CheckResult>{MemoryResult(bandwidths, options), *std::move(busbw)};
}

std::vector<v1::CheckResult> RunGpuLoopback(const GpuLoopbackOptions& options) {
  if (options.python.empty()) return Both(v1::CheckResult::SKIPPED, "no Python interpreter");
  Pipe out, err, report;
  if (!out.Open() || !err.Open() || !report.Open()) {
    return Both(v1::CheckResult::FAIL,
                absl::StrCat("cannot start the GPU loopback: pipe2: ", ErrnoText(errno)));
  }
  OwnedFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::vector<std::string> args = options.python;
  args.insert(args.end(),
              {"-c", std::string(GpuLoopbackProgram()), absl::StrCat(options.copy_mib),
               absl::StrCat(options.iterations), absl::StrCat(options.nccl_mib),
               absl::StrCat(std::max<int64_t>(1, absl::ToInt64Seconds(options.timeout)))});
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = options.env;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const ChildPlan plan{out.w.get(),   err.w.get(), report.w.get(),
                       devnull.get(), argv.data(), envp.data()};

  // No handler of ours may run in the child before it resets them; fork
  // without glibc's atfork handlers (gRPC's among them), as posix_spawn does.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = static_cast<pid_t>(
      syscall(SYS_clone, static_cast<unsigned long>(SIGCHLD), nullptr, nullptr, nullptr, nullptr));
  if (pid == 0) ChildExec(plan);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  out.w.Reset();
  err.w.Reset();
  report.w.Reset();
  devnull.Reset();
  if (pid < 0) {
    return Both(v1::CheckResult::FAIL,
                absl::StrCat("cannot start the GPU loopback: clone: ", ErrnoText(clone_errno)));
  }
  // Where the kernel has pidfds (5.3), waiting takes no polling. The pid is
  // our unreaped child or the Supervisor's to reap; either way it is ours.
  OwnedFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  Outcome o;
  Converse(pid, pidfd.get(), std::move(report.r), std::move(out.r), std::move(err.r),
           started + absl::ToChronoNanoseconds(options.timeout), &o);

  const std::string who =
      absl::StrCat("the GPU loopback (", SafeForLog(options.python[0], 100), ", pid ", pid, ")");
  if (o.exec_failed) {
    return Both(v1::CheckResult::SKIPPED,
                absl::StrCat("cannot run ", SafeForLog(options.python[0], 100), ": ",
                             ErrnoText(o.exec_errno),
                             "; the GPU loopback needs the COMMAND's "
                             "Python with torch"));
  }
  if (o.oversize) {
    return Both(v1::CheckResult::FAIL,
                absl::StrCat(who, " printed more than ", kMaxGpuLoopbackOutputBytes,
                             " bytes and was killed"));
  }
  if (o.timed_out) {
    return Both(
        v1::CheckResult::FAIL,
        absl::StrCat(who, " did not finish within ", absl::FormatDuration(options.timeout),
                     " and was killed: a hung GPU, driver or NCCL?",
                     o.end.reaped ? "" : " It did not die (uninterruptible sleep in the driver).",
                     StderrNote(o.err_tail)));
  }
  if (o.end.status_known && WIFSIGNALED(o.end.status)) {
    return Both(v1::CheckResult::FAIL, absl::StrCat(who, " died of signal ", WTERMSIG(o.end.status),
                                                    StderrNote(o.err_tail)));
  }
  if (o.end.status_known && (!WIFEXITED(o.end.status) || WEXITSTATUS(o.end.status) != 0)) {
    return Both(v1::CheckResult::FAIL,
                absl::StrCat(who, " exited with status ", WEXITSTATUS(o.end.status),
                             StderrNote(o.err_tail)));
  }
  absl::StatusOr<std::vector<v1::CheckResult>> results = ParseGpuLoopbackOutput(o.out, options);
  if (!results.ok()) {
    return Both(v1::CheckResult::FAIL,
                absl::StrCat(who, ": ", results.status().message(),
                             o.end.status_known ? "" : " (its exit status went to another reaper)",
                             StderrNote(o.err_tail)));
  }
  return *std::move(results);
}

}  // namespace trainlet::preflight

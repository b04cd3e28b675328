// What --slow-nodes' sampling costs an agent (docs/slow-nodes.md): the real
// sampler (progress/slow_signals.h: every thread's schedstat, every fd's
// link, the cgroup's cpu.stat, one sock_diag dump) on 8 real worker
// processes, each with --threads threads (most asleep, as a training
// worker's are in a collective) and --connections loopback TCP connections
// carrying --rate-kib KiB/s each.
//
// For each interval (--intervals, default the agent's 10 s and 1 s) it runs
// the sampler as the agent does for --seconds of wall time: sleep until the
// next deadline, Poll. Printed per interval: the samples taken, the CPU
// time of one sample (median and max, CLOCK_THREAD_CPUTIME_ID around Poll:
// user and kernel time of the syscalls), and the share of one core that
// the whole sampling loop took (getrusage of this process, which runs
// nothing else, over the wall time): the bound is 1%. Also the
// last summary, to show what was read.
//
// Build and run (never add to ctest):
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINLET_BUILD_TESTS=OFF
//   ninja -C build-bench -j2 bench_slow_sampling
//   build-bench/bench/bench_slow_sampling [--workers=8] [--threads=32] [--connections=4]
//       [--rate-kib=1024] [--seconds=30] [--intervals=10,1]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/flags.h"
#include "progress/slow_signals.h"
#include "progress/tcp_diag.h"

namespace {

using trainlet::bench::Flag;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A worker: `threads` threads asleep, `connections` loopback connections to
// itself, a writer and a reader per connection, `rate_kib` KiB/s each.
[[noreturn]] void Worker(int threads, int connections, int rate_kib) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, connections) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    _exit(2);
  }
  std::vector<std::thread> pumps;
  for (int c = 0; c < connections; ++c) {
    const int out = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (out < 0 || connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(2);
    const int in = accept(listener, nullptr, nullptr);
    if (in < 0) _exit(2);
    pumps.emplace_back([out, rate_kib] {
      std::vector<char> chunk(64 * 1024, 'x');
      const absl::Duration every = absl::Seconds(64.0 / rate_kib);
      for (absl::Time next = absl::Now();; next += every) {
        if (write(out, chunk.data(), chunk.size()) < 0) _exit(0);
        absl::SleepFor(next + every - absl::Now());
      }
    });
    pumps.emplace_back([in] {
      std::vector<char> buffer(64 * 1024);
      while (read(in, buffer.data(), buffer.size()) > 0) {
      }
      _exit(0);
    });
  }
  for (int t = 0; t < threads; ++t) {
    pumps.emplace_back([] {
      for (;;) pause();
    });
  }
  for (;;) pause();
}

struct Result {
  int samples = 0;
  double median_us = 0, max_us = 0, core_share = 0;
  trainlet::v1::SlowSignals last;
};

Result Sample(trainlet::agent::ProcSlowSampler* sampler, const std::vector<pid_t>& pids,
              absl::Duration interval, absl::Duration run_for) {
  Result r;
  std::vector<double> costs;
  const absl::Time start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  sampler->StartRound(pids, interval, start);
  for (;;) {
    const absl::Time due = sampler->NextDeadline();
    if (due >= start + run_for) break;
    absl::SleepFor(due - absl::Now());
    // Every Poll that is due reads everything (the first one is the base).
    const double before = ThreadCpuSeconds();
    std::optional<trainlet::v1::SlowSignals> s = sampler->Poll(absl::Now());
    costs.push_back(ThreadCpuSeconds() - before);
    if (s.has_value()) r.last = *s;
  }
  absl::SleepFor(start + run_for - absl::Now());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  r.core_share = (ProcessCpuSeconds() - cpu_start) / wall;
  sampler->EndRound();
  std::sort(costs.begin(), costs.end());
  r.samples = static_cast<int>(costs.size());
  if (!costs.empty()) {
    r.median_us = costs[costs.size() / 2] * 1e6;
    r.max_us = costs.back() * 1e6;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 8, threads = 32, connections = 4, rate_kib = 1024, seconds = 30;
  std::string intervals_flag = "10,1", v;
  trainlet::bench::UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--workers", &v)) {
      bad.Int("--workers", v, &workers);
    } else if (Flag(argv[i], "--threads", &v)) {
      bad.Int("--threads", v, &threads);
    } else if (Flag(argv[i], "--connections", &v)) {
      bad.Int("--connections", v, &connections);
    } else if (Flag(argv[i], "--rate-kib", &v)) {
      bad.Int("--rate-kib", v, &rate_kib);
    } else if (Flag(argv[i], "--seconds", &v)) {
      bad.Int("--seconds", v, &seconds);
    } else if (Flag(argv[i], "--intervals", &v)) {
      intervals_flag = v;
    } else {
      bad.Unknown(argv[i]);
    }
  }
  bad.InRange("--workers", workers, 1, 256);
  bad.InRange("--threads", threads, 0, 1000);
  bad.InRange("--connections", connections, 0, 64);
  bad.InRange("--rate-kib", rate_kib, 1, 1 << 20);
  bad.InRange("--seconds", seconds, 1, 3600);
  std::vector<int> intervals;
  for (absl::string_view s : absl::StrSplit(intervals_flag, ',')) {
    int n = 0;
    bad.Int("--intervals", std::string(s), &n);
    bad.InRange("--intervals", n, 1, 600);
    intervals.push_back(n);
  }
  if (bad.Print(argv[0])) {
    fprintf(stderr,
            "usage: %s [--workers=8] [--threads=32] [--connections=4] [--rate-kib=1024] "
            "[--seconds=30] [--intervals=10,1]\n",
            argv[0]);
    return 2;
  }

  std::vector<pid_t> pids;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      break;
    }
    if (pid == 0) Worker(threads, connections, rate_kib);
    pids.push_back(pid);
  }
  absl::SleepFor(absl::Seconds(1));  // the workers connect and start sending

  std::unique_ptr<trainlet::agent::TcpInfoSource> tcp = trainlet::agent::NewSockDiagSource();
  trainlet::agent::ProcSlowSampler::Options o;
  o.tcp = tcp.get();
  trainlet::agent::ProcSlowSampler sampler(o);
  printf("%d workers x (%d sleeping threads, %d loopback connections at %d KiB/s), %d s each\n",
         workers, threads, connections, rate_kib, seconds);
  printf("%-9s %8s %16s %13s %14s  %s\n", "interval", "samples", "cpu/sample(med)",
         "cpu/sample(max)", "% of a core", "last summary");
  for (int interval : intervals) {
    const Result r = Sample(&sampler, pids, absl::Seconds(interval), absl::Seconds(seconds));
    printf(
        "%-9s %8d %13.0f us %12.0f us %13.3f%%  workers=%d ran=%d waited=%d throttled=%d "
        "tcp=%d acked=%lld rate=%lld rtt=%lldus\n",
        (std::to_string(interval) + " s").c_str(), r.samples, r.median_us, r.max_us,
        100.0 * r.core_share, r.last.workers(), r.last.cpu_ran_permille(),
        r.last.cpu_waited_permille(), r.last.cpu_throttled_permille(), r.last.tcp_connections(),
        static_cast<long long>(r.last.tcp_bytes_acked()),
        static_cast<long long>(r.last.tcp_delivery_rate()),
        static_cast<long long>(r.last.tcp_rtt_us()));
  }
  for (pid_t pid : pids) kill(pid, SIGKILL);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  return 0;
}

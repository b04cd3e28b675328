#include "progress/slow_signals.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/testing/temp_root.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using trainlet::testing::TempRoot;

constexpr absl::Duration kInterval = absl::Seconds(10);
const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Answers the connections it holds that the caller asks for.
class FakeTcp : public TcpInfoSource {
 public:
  absl::StatusOr<std::vector<TcpSocketInfo>> Dump(const absl::flat_hash_set<uint64_t>& inodes,
                                                  size_t max_sockets) override {
    ++dumps;
    if (!error.ok()) return error;
    asked = inodes;
    std::vector<TcpSocketInfo> out;
    for (const TcpSocketInfo& s : sockets) {
      if (inodes.contains(s.inode) && out.size() < max_sockets) out.push_back(s);
    }
    return out;
  }
  std::vector<TcpSocketInfo> sockets;
  absl::flat_hash_set<uint64_t> asked;
  absl::Status error;
  int dumps = 0;
};

TcpSocketInfo Tcp(uint64_t inode, int64_t rtt_us, int64_t retrans, int64_t acked, int64_t rate,
                  int64_t busy_us = -1, int64_t rwnd_limited_us = -1) {
  return TcpSocketInfo{inode, rtt_us, retrans, acked, rate, busy_us, rwnd_limited_us};
}

// A /proc of fake processes: threads with schedstat counters, children,
// socket fds and a cgroup.
class SlowSamplerTest : public ::testing::Test {
 protected:
  SlowSamplerTest() : sampler_(Options()) {}
  ProcSlowSampler::Options Options() {
    ProcSlowSampler::Options o;
    o.proc_root = root_.path() + "/proc";
    o.cgroup_root = root_.path() + "/cg";
    o.tcp = &tcp_;
    return o;
  }
  void Thread(pid_t pid, pid_t tid, int64_t ran_ms, int64_t waited_ms) {
    root_.Write(absl::StrCat("proc/", pid, "/task/", tid, "/schedstat"),
                absl::StrCat(ran_ms * 1000000, " ", waited_ms * 1000000, " 7\n"));
  }
  void Children(pid_t pid, const std::string& children) {
    root_.Write(absl::StrCat("proc/", pid, "/task/", pid, "/children"), children);
  }
  void Socket(pid_t pid, int fd, uint64_t inode) {
    root_.Write(absl::StrCat("proc/", pid, "/fd/.keep"), "");
    const std::string link = absl::StrCat(root_.path(), "/proc/", pid, "/fd/", fd);
    unlink(link.c_str());
    ASSERT_EQ(symlink(absl::StrCat("socket:[", inode, "]").c_str(), link.c_str()), 0);
  }
  void Gone(pid_t pid) {
    ASSERT_EQ(system(absl::StrCat("rm -rf ", root_.path(), "/proc/", pid).c_str()), 0);
  }
  // Starts a round of `pids` at kT0 and takes its base sample.
  void Start(const std::vector<pid_t>& pids) {
    sampler_.StartRound(pids, kInterval, kT0);
    EXPECT_EQ(sampler_.NextDeadline(), kT0);
    EXPECT_FALSE(sampler_.Poll(kT0).has_value()) << "the base sample has no summary";
    EXPECT_EQ(sampler_.NextDeadline(), kT0 + kInterval);
  }
  v1::SlowSignals Next(absl::Duration after_start) {
    std::optional<v1::SlowSignals> s = sampler_.Poll(kT0 + after_start);
    EXPECT_TRUE(s.has_value());
    return s.value_or(v1::SlowSignals());
  }

  TempRoot root_;
  FakeTcp tcp_;
  ProcSlowSampler sampler_;
};

TEST_F(SlowSamplerTest, Cpu_TheWorkerThatWaitedMost_ItsThreadsAndChildrenSummed) {
  Thread(100, 100, 1000, 50);
  Thread(100, 101, 1000, 50);
  Thread(200, 200, 5000, 0);
  Children(200, "300 ");
  Thread(300, 300, 0, 0);  // worker 200's child (a shell's python)
  Start({100, 200});
  // Worker 100: 2 s ran, 1 s waited over its threads; worker 200 ran 4 s
  // and its child waited 3 s in a thread born meanwhile (all of it counts).
  Thread(100, 100, 2000, 550);
  Thread(100, 101, 2000, 550);
  Thread(200, 200, 9000, 0);
  Thread(300, 301, 0, 3000);
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.seq(), 1u);
  EXPECT_EQ(s.interval_ms(), 10000);
  EXPECT_EQ(s.workers(), 2);
  EXPECT_EQ(s.cpu_waited_permille(), 300) << "worker 200's 3 s of 10";
  EXPECT_EQ(s.cpu_ran_permille(), 400) << "the same worker's";
  // A worker's threads summed beyond the interval: bounded at 1000.
  Thread(100, 100, 2000, 20550);
  s = Next(2 * kInterval);
  EXPECT_EQ(s.seq(), 2u);
  EXPECT_EQ(s.cpu_waited_permille(), 1000);
}

TEST_F(SlowSamplerTest, Cpu_AGoneWorkerIsNotCounted_AThreadWhoseCounterWentBackIsNew) {
  Thread(100, 100, 1000, 1000);
  Thread(200, 200, 1000, 1000);
  Start({100, 200, -1});
  Gone(200);
  Thread(100, 100, 500, 100);  // tid 100 reused: counters from 0
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.workers(), 1);
  EXPECT_EQ(s.cpu_ran_permille(), 50);
  EXPECT_EQ(s.cpu_waited_permille(), 10);
}

TEST_F(SlowSamplerTest, ProcessTree_Bounded_AndNeverLoops) {
  // Worker 100 with 100 children, and a child that names its parent as its
  // child (no kernel does; a fake /proc can).
  std::string children;
  for (pid_t c = 1000; c < 1100; ++c) {
    Thread(c, c, 0, 0);
    absl::StrAppend(&children, c, " ");
  }
  Thread(100, 100, 0, 0);
  Children(100, children);
  Children(1000, "100 ");
  Start({100});
  for (pid_t c = 1000; c < 1100; ++c) Thread(c, c, 10, 0);
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.workers(), 1);
  // 63 children of the 64 processes kept, 10 ms each of 10 s.
  EXPECT_EQ(s.cpu_ran_permille(), static_cast<int>(kMaxProcessesPerWorker - 1));
}

TEST_F(SlowSamplerTest, Throttled_FromTheWorkersCgroup_V1AndV2) {
  Thread(100, 100, 0, 0);
  root_.Write("proc/100/cgroup", "5:cpu,cpuacct:/pod-a\n3:memory:/pod-a\n");
  root_.Write("cg/cpu/pod-a/cpu.stat",
              "nr_periods 10\nnr_throttled 1\nthrottled_time 1000000000\n");
  Thread(200, 200, 0, 0);
  root_.Write("proc/200/cgroup", "0::/pod-b\n");
  root_.Write("cg/pod-b/cpu.stat", "usage_usec 5\nthrottled_usec 0\n");
  Start({100, 200});
  root_.Write("cg/cpu/pod-a/cpu.stat",
              "nr_periods 20\nnr_throttled 5\nthrottled_time 3000000000\n");
  root_.Write("cg/pod-b/cpu.stat", "usage_usec 5\nthrottled_usec 4500000\n");
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.cpu_throttled_permille(), 450) << "the more throttled cgroup's 4.5 s of 10";
}

TEST_F(SlowSamplerTest, Tcp_TheWorkersSocketsOnly_DeltasAndTheWorstOfThoseThatSent) {
  Thread(100, 100, 0, 0);
  Thread(200, 200, 0, 0);
  Children(100, "300\n");
  Thread(300, 300, 0, 0);
  Socket(100, 3, 11);
  Socket(100, 4, 12);
  Socket(300, 5, 13);                // a child's
  root_.Write("proc/100/fd/6", "");  // a plain file: no socket
  tcp_.sockets = {Tcp(11, 100, 1, 1000, 5000), Tcp(12, 900, 0, 0, 100), Tcp(13, 200, 0, 500, 4000),
                  Tcp(99, 99999, 7, 0, 1)};
  Start({100, 200});
  EXPECT_EQ(tcp_.asked, (absl::flat_hash_set<uint64_t>{11, 12, 13}));
  // 11 sent 1 MB at 2 MB/s; 12 stayed idle (its high RTT does not count);
  // 13 sent 10 KiB (too little for its rate to count); 14 is new.
  Socket(200, 3, 14);
  tcp_.sockets = {Tcp(11, 300, 4, 1001000, 2000000), Tcp(12, 900, 0, 0, 100),
                  Tcp(13, 250, 0, 500 + 10240, 10), Tcp(14, 400, 2, 70000, 3000000),
                  Tcp(99, 99999, 70, 9999999, 1)};
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.tcp_connections(), 4);
  EXPECT_EQ(s.tcp_rtt_us(), 400);
  EXPECT_EQ(s.tcp_retransmits(), 3 + 2);
  EXPECT_EQ(s.tcp_bytes_acked(), 1000000 + 10240 + 70000);
  EXPECT_EQ(s.tcp_delivery_rate(), 2000000);
  // Nothing sent: no RTT, no rate.
  s = Next(2 * kInterval);
  EXPECT_EQ(s.tcp_rtt_us(), 0);
  EXPECT_EQ(s.tcp_bytes_acked(), 0);
  EXPECT_EQ(s.tcp_delivery_rate(), 0);
}

TEST_F(SlowSamplerTest, UnreadableSignals_AreZero_NeverAnError) {
  tcp_.error = absl::UnavailableError("no sock_diag");
  Thread(100, 100, 0, 0);
  Socket(100, 3, 11);
  root_.Write("proc/100/cgroup", "0::/nowhere\n");
  Start({100, 4242});  // 4242 does not exist
  Thread(100, 100, 1000, 0);
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.workers(), 1);
  EXPECT_EQ(s.cpu_ran_permille(), 100);
  EXPECT_EQ(s.cpu_throttled_permille(), 0);
  EXPECT_EQ(s.tcp_connections(), 0);
  EXPECT_EQ(s.step(), -1);
  EXPECT_EQ(s.step_time_us(), 0);
  EXPECT_EQ(tcp_.dumps, 2);
}

TEST_F(SlowSamplerTest, Progress_LowestStep_TimePerStepFromWhenEachStepWasSeen) {
  Thread(100, 100, 0, 0);
  Thread(200, 200, 0, 0);
  Start({100, 200});
  sampler_.OnStep(0, 10, kT0 + absl::Seconds(1));
  sampler_.OnStep(1, 12, kT0 + absl::Seconds(2));
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.step(), 10);
  EXPECT_EQ(s.step_time_us(), 0) << "no step timed yet";
  // Rank 0: 10 -> 20 between 1 s and 9 s: 0.8 s a step; rank 1: 12 -> 16
  // between 2 s and 18 s: 4 s a step; a repeated step changes nothing.
  sampler_.OnStep(0, 20, kT0 + absl::Seconds(9));
  sampler_.OnStep(1, 16, kT0 + absl::Seconds(18));
  sampler_.OnStep(1, 16, kT0 + absl::Seconds(19));
  s = Next(2 * kInterval);
  EXPECT_EQ(s.step(), 16);
  EXPECT_EQ(s.step_time_us(), 2400000) << "the mean of 0.8 s and 4 s";
  // A step longer than an interval: timed once it comes.
  s = Next(3 * kInterval);
  EXPECT_EQ(s.step_time_us(), 0);
  sampler_.OnStep(0, 21, kT0 + absl::Seconds(39));
  s = Next(4 * kInterval);
  EXPECT_EQ(s.step(), 16);
  EXPECT_EQ(s.step_time_us(), 30000000);
}

TEST_F(SlowSamplerTest, Schedule_EveryInterval_EndRoundStops_SeqGoesOnOverRounds) {
  Thread(100, 100, 0, 0);
  Start({100});
  EXPECT_FALSE(sampler_.Poll(kT0 + kInterval - absl::Milliseconds(1)).has_value());
  EXPECT_EQ(Next(kInterval).seq(), 1u);
  // A late loop: the next boundary stays on the grid, without a burst.
  EXPECT_EQ(Next(2 * kInterval + absl::Seconds(3)).interval_ms(), 13000);
  EXPECT_EQ(sampler_.NextDeadline(), kT0 + 3 * kInterval);
  sampler_.EndRound();
  EXPECT_EQ(sampler_.NextDeadline(), absl::InfiniteFuture());
  EXPECT_FALSE(sampler_.Poll(kT0 + 10 * kInterval).has_value());
  sampler_.OnStep(0, 5, kT0);  // ignored while idle
  // A new round: new pids, a new base, the seq goes on.
  Thread(500, 500, 0, 0);
  sampler_.StartRound({500}, kInterval, kT0 + 20 * kInterval);
  EXPECT_FALSE(sampler_.Poll(kT0 + 20 * kInterval).has_value());
  Thread(500, 500, 5000, 0);
  v1::SlowSignals s = Next(21 * kInterval);
  EXPECT_EQ(s.seq(), 3u);
  EXPECT_EQ(s.cpu_ran_permille(), 500);
  EXPECT_EQ(s.step(), -1);
}

TEST_F(SlowSamplerTest, Gpu_TheLatestReadingWhileRecent_PausedBetweenRounds) {
  SimulatedClock clock(kT0);
  absl::Notification read;
  GpuClockSampler gpu(
      [&](std::vector<v1::Gpu>* gpus) {
        v1::Gpu g;
        g.set_sm_clock_mhz(990);
        g.set_sm_clock_max_mhz(1980);
        g.set_clock_reasons_known(true);
        g.set_clock_reasons(0x42);
        gpus->assign(2, g);
        if (!read.HasBeenNotified()) read.Notify();
      },
      &clock);
  ProcSlowSampler::Options o = Options();
  o.gpu = &gpu;
  ProcSlowSampler sampler(o);
  Thread(100, 100, 0, 0);
  // The GPU sampler reads at once on its own thread, then an interval
  // (10 s of real time) later: this test sees only the first read.
  sampler.StartRound({100}, kInterval, kT0);
  ASSERT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(60)));
  for (int i = 0; i < 60000 && !gpu.Latest(kT0, kInterval).has_value(); ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(sampler.Poll(kT0).has_value());
  std::optional<v1::SlowSignals> s = sampler.Poll(kT0 + kInterval);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->gpus(), 2);
  EXPECT_EQ(s->gpu_sm_clock_permille(), 500);
  EXPECT_EQ(s->gpu_clock_reasons(), 0x40u)
      << "HW thermal; application clocks are a setting, not a slowdown";
  // Two intervals later the reading is too old: no GPU figures.
  s = sampler.Poll(kT0 + 3 * kInterval);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->gpus(), 0);
  EXPECT_EQ(s->gpu_sm_clock_permille(), 0);
  sampler.EndRound();
  EXPECT_FALSE(gpu.Latest(kT0, kInterval).has_value()) << "paused with the round";
}

TEST(SlowSignalsText, NamesEveryFigure) {
  v1::SlowSignals s;
  s.set_seq(3);
  s.set_interval_ms(10000);
  s.set_workers(8);
  s.set_cpu_ran_permille(412);
  s.set_cpu_waited_permille(3);
  s.set_tcp_connections(32);
  s.set_tcp_rtt_us(210);
  s.set_tcp_bytes_acked(1048576);
  s.set_tcp_delivery_rate(52428800);
  s.set_step(1200);
  s.set_step_time_us(812000);
  EXPECT_EQ(SlowSignalsText(s),
            "seq=3 interval=10000ms workers=8 cpu ran=412 waited=3 throttled=0 (permille) tcp=32 "
            "rtt=210us retrans=0 acked=1048576 rate=52428800B/s step=1200 step_time=812000us "
            "gpus=0 sm_clock=0 (permille) reasons=0x0");
}

// A connection its receiver held back (tcpi_rwnd_limited) for a quarter of
// its busy time or more measures the receiver: its rate is left out, so a
// healthy node sending into a CPU-starved one does not read slow.
TEST_F(SlowSamplerTest, Tcp_AReceiverLimitedConnectionsRateIsLeftOut) {
  Thread(100, 100, 0, 0);
  Socket(100, 3, 11);
  Socket(100, 4, 12);
  tcp_.sockets = {Tcp(11, 100, 0, 0, 1, 0, 0), Tcp(12, 100, 0, 0, 1, 0, 0)};
  Start({100});
  // 11: 8 MB at 1 MB/s, held by its receiver 3 of its 8 s busy; 12: 8 MB
  // at 50 MB/s, held 0.01 s of 0.16.
  tcp_.sockets = {Tcp(11, 100, 0, 8000000, 1000000, 8000000, 3000000),
                  Tcp(12, 100, 0, 8000000, 50000000, 160000, 10000)};
  v1::SlowSignals s = Next(kInterval);
  EXPECT_EQ(s.tcp_delivery_rate(), 50000000);
  EXPECT_EQ(s.tcp_bytes_acked(), 16000000) << "its bytes still count";
}

TEST(TcpInfo, ShortStructsFromOldKernels_LeaveTheMissingFieldsUnknown) {
  std::vector<unsigned char> info(512, 0);
  TcpSocketInfo full = ParseTcpInfo(7, info.data(), info.size());
  EXPECT_EQ(full.inode, 7u);
  EXPECT_EQ(full.rtt_us, 0);
  EXPECT_EQ(full.delivery_rate, 0);
  TcpSocketInfo old = ParseTcpInfo(7, info.data(), 104);  // Linux 3.x: up to tcpi_total_retrans
  EXPECT_EQ(old.total_retrans, 0);
  EXPECT_EQ(old.bytes_acked, -1);
  EXPECT_EQ(old.delivery_rate, -1);
  EXPECT_EQ(ParseTcpInfo(7, info.data(), 0).rtt_us, -1);
}

// The real kernel: a loopback connection of this process, found by its
// inode in a sock_diag dump, with what it sent acknowledged.
TEST(SockDiag, FindsAConnectionByInode_WithItsBytesAcked) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  std::string data(100000, 'x');
  ASSERT_EQ(write(client, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = read(server, data.data(), data.size());
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  struct stat st {};
  ASSERT_EQ(fstat(client, &st), 0);
  std::unique_ptr<TcpInfoSource> diag = NewSockDiagSource();
  absl::StatusOr<std::vector<TcpSocketInfo>> dump = diag->Dump({st.st_ino}, 16);
  if (!dump.ok() && absl::IsUnavailable(dump.status())) {
    GTEST_SKIP() << "no sock_diag here: " << dump.status();
  }
  // The last ACK may trail the read (a delayed ACK): a few tries.
  for (int i = 0; i < 100 && dump.ok() && dump->size() == 1 &&
                  (*dump)[0].bytes_acked < static_cast<int64_t>(data.size());
       ++i) {
    usleep(20000);
    dump = diag->Dump({st.st_ino}, 16);
  }
  ASSERT_TRUE(dump.ok()) << dump.status();
  ASSERT_EQ(dump->size(), 1u) << "only the connection asked for";
  EXPECT_EQ((*dump)[0].inode, st.st_ino);
  // (tcpi_bytes_acked counts the SYN too.)
  EXPECT_GE((*dump)[0].bytes_acked, static_cast<int64_t>(data.size()));
  EXPECT_GT((*dump)[0].rtt_us, 0);
  close(server);
  close(client);
  close(listener);
}

}  // namespace
}  // namespace trainlet::agent

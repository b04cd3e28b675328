// Watch liveness over real gRPC on 127.0.0.1 (keepalive.h): a node whose
// connection goes silent (a TCP proxy in front of it stops forwarding in both
// directions and keeps the sockets open, as a cut link or a frozen host
// does) is lost through the coordinator's unanswered pings within +-5% of
// --heartbeat-timeout, and a healthy node that heartbeats only every
// timeout/2 is not lost.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/keepalive.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

// Forwards 127.0.0.1:port() to `upstream_port`; after Cut() nothing is
// forwarded either way and nothing is closed.
class CuttableProxy {
 public:
  explicit CuttableProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    EXPECT_EQ(pipe2(wake_, O_CLOEXEC), 0);
    threads_.emplace_back([this] { AcceptLoop(); });
  }
  ~CuttableProxy() {
    stop_ = true;
    EXPECT_EQ(write(wake_[1], "x", 1), 1);
    for (std::thread& t : threads_) t.join();
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) close(fd);
    close(listen_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }
  int port() const { return port_; }
  void Cut() { cut_ = true; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (poll(p, 2, -1) <= 0 || (p[1].revents & POLLIN)) return;
      int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(upstream_port_);
      if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(client);
        close(server);
        continue;
      }
      absl::MutexLock lock(&mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      threads_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }
  void Pump(int a, int b) {
    char buf[16384];
    while (!stop_) {
      if (cut_) {
        // Silent: read nothing, write nothing, close nothing.
        pollfd w{wake_[0], POLLIN, 0};
        poll(&w, 1, 50);
        continue;
      }
      pollfd p[3] = {{a, POLLIN, 0}, {b, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (poll(p, 3, 50) < 0 || (p[2].revents & POLLIN)) return;
      for (int i = 0; i < 2; ++i) {
        if (cut_ || !(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) return;
        if (write(i == 0 ? b : a, buf, n) != n) return;
      }
    }
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // the accept loop adds pumps; joined at the end.
};

v1::JoinRequest Req(const std::string& node, int hint) {
  v1::JoinRequest r;
  r.mutable_member()->set_node_id(node);
  r.mutable_member()->set_incarnation(NewIncarnation());
  r.set_job_id("job");
  r.set_protocol_version(kProtocolVersion);
  r.set_rank_hint(hint);
  r.set_local_world_size(1);
  r.set_master_port(29500);
  r.set_watch_liveness(true);
  return r;
}

absl::Status Heartbeat(CoordinatorClient& client, const v1::JoinRequest& r, uint64_t round) {
  v1::ReportRequest rep;
  *rep.mutable_member() = r.member();
  rep.set_job_id("job");
  rep.set_round(round);
  rep.set_state(v1::ReportRequest::RUNNING);
  return client.Report(rep, absl::Seconds(2));
}

TEST(WatchLiveness, SilentConnection_NodeLostWithinFivePercentOfTheHeartbeatTimeout) {
  const absl::Duration timeout = absl::Seconds(2);
  CoordinatorHostOptions o;
  o.core.job_id = "job";
  o.core.min_nodes = o.core.max_nodes = 2;
  o.core.heartbeat_timeout = timeout;
  o.core.incarnation = NewIncarnation();
  o.token = "tok";
  o.bind_addr = "127.0.0.1";
  o.port = 0;
  absl::StatusOr<std::unique_ptr<CoordinatorHost>> host = CoordinatorHost::Start(std::move(o));
  ASSERT_TRUE(host.ok()) << host.status();
  Coordinator& core = (*host)->core();
  CuttableProxy proxy((*host)->port());

  auto options = [&](int port) {
    ClientOptions c;
    c.target = absl::StrCat("127.0.0.1:", port);
    c.token = "tok";
    const KeepaliveSettings k = KeepaliveFor(timeout);
    c.keepalive_time = k.time;
    c.keepalive_timeout = k.timeout;
    return c;
  };
  CoordinatorClient direct(options((*host)->port()));
  CoordinatorClient cut_off(options(proxy.port()));
  const v1::JoinRequest a = Req("node-a", 0), b = Req("node-b", 1);
  absl::StatusOr<v1::Assignment> assigned_b;
  std::thread join_b([&] { assigned_b = cut_off.Join(b, absl::Now() + absl::Seconds(10)); });
  absl::StatusOr<v1::Assignment> assigned_a = direct.Join(a, absl::Now() + absl::Seconds(10));
  join_b.join();
  ASSERT_TRUE(assigned_a.ok()) << assigned_a.status();
  ASSERT_TRUE(assigned_b.ok()) << assigned_b.status();
  // Heartbeats every timeout/2 for a member whose stream carries liveness.
  EXPECT_EQ(assigned_a->heartbeat_interval_ms(), absl::ToInt64Milliseconds(timeout / 2));
  EXPECT_EQ(assigned_a->heartbeat_timeout_ms(), absl::ToInt64Milliseconds(timeout));
  const uint64_t round = assigned_a->round();

  auto watch = [&](CoordinatorClient& c, const v1::JoinRequest& r) {
    v1::WatchRequest w;
    *w.mutable_member() = r.member();
    w.set_job_id("job");
    w.set_round(round);
    return c.Watch(
        w, [](const v1::Directive&) {}, [](const absl::Status&) {});
  };
  std::unique_ptr<WatchStream> wa = watch(direct, a), wb = watch(cut_off, b);
  const absl::Time opened = absl::Now();
  while (core.GetSnapshot().watching < 2 && absl::Now() < opened + absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(core.GetSnapshot().watching, 2);

  // Healthy for half a timeout (five ping rounds), one heartbeat each: no loss.
  ASSERT_TRUE(Heartbeat(direct, a, round).ok());
  ASSERT_TRUE(Heartbeat(cut_off, b, round).ok());
  absl::SleepFor(timeout / 2);
  ASSERT_EQ(core.GetSnapshot().phase, Phase::kRunning) << core.GetSnapshot().verdict;
  ASSERT_TRUE(Heartbeat(direct, a, round).ok());
  ASSERT_TRUE(Heartbeat(cut_off, b, round).ok());

  const absl::Time cut = absl::Now();
  proxy.Cut();
  absl::Duration stream_closed = absl::InfiniteDuration();
  while (core.GetSnapshot().phase == Phase::kRunning && absl::Now() < cut + 3 * timeout) {
    if (stream_closed == absl::InfiniteDuration() && core.GetSnapshot().watching < 2) {
      stream_closed = absl::Now() - cut;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  const absl::Duration took = absl::Now() - cut;
  const Coordinator::Snapshot s = core.GetSnapshot();
  ASSERT_EQ(s.phase, Phase::kFailed);
  EXPECT_THAT(s.verdict, HasSubstr("node-b lost"));
  EXPECT_THAT(s.verdict, HasSubstr("pings"));
  std::cerr << "[measure] silent connection -> its stream closed: " << stream_closed
            << ", node lost: " << took << " (heartbeat timeout " << timeout << ")\n";
  // The heartbeat just before the cut was the last thing the server read, so
  // this is the window's late end: 1.05 x the timeout, plus scheduling on a
  // busy machine (the stream's end reaches the core through gRPC's threads).
  EXPECT_GE(took, timeout * 0.95);
  EXPECT_LE(took, timeout * 1.05 + absl::Milliseconds(60));
  wa.reset();
  wb.reset();
}

}  // namespace
}  // namespace trainlet::rendezvous

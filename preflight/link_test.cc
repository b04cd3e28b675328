// The link measurer on real loopback sockets: a LinkServer and MeasureLink
// in one process. Only what a loaded machine cannot change is asserted
// (bytes counted, refusals, bounds of seconds); speed is bench/'s business.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "preflight/link_client.h"
#include "preflight/link_server.h"
#include "preflight/link_wire.h"
#include "preflight/ring.h"
#include "preflight/testing/fake_resolver.h"

namespace trainlet::preflight {
namespace link_test {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::unique_ptr<LinkServer> StartServer(const std::string& node, LinkServerOptions o = {}) {
  o.job_id = "job-a";
  o.node_id = node;
  o.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<LinkServer>> s = LinkServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

v1::LinkTarget Target(const std::string& node, int port, const std::string& host = "127.0.0.1") {
  v1::LinkTarget t;
  t.set_node_id(node);
  t.set_host(host);
  t.set_port(port);
  return t;
}

LinkIdentity Me(uint64_t round = 4, uint64_t nonce = 99) {
  return LinkIdentity{"job-a", "pod-0", round, nonce};
}

MeasureOptions Small() {
  MeasureOptions o;
  o.max_bytes = 3 << 20;           // the default three samples: 1 MiB each.
  o.max_time = absl::Seconds(20);  // bytes, not time, end it: exact counts.
  o.connect_timeout = absl::Seconds(10);
  o.ping_timeout = absl::Seconds(10);
  return o;
}

// Waits (bounded) until the server has seen what the client did.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

TEST(LinkMeasurer, MeasuresALoopbackLink) {
  std::unique_ptr<LinkServer> server = StartServer("pod-1");
  ASSERT_NE(server, nullptr);
  server->SetRound(4, 99);
  const v1::LinkResult r = MeasureLink(Me(), Target("pod-1", server->port()), Small(), nullptr);
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.from_node(), "pod-0");
  EXPECT_EQ(r.to_node(), "pod-1");
  // Three samples of a third of the budget each; the best one is the link's.
  EXPECT_EQ(r.samples(), 3);
  EXPECT_EQ(r.bytes(), 1u << 20);
  EXPECT_EQ(r.total_bytes(), 3u << 20);
  EXPECT_GT(r.seconds(), 0);
  EXPECT_GT(r.bandwidth_bytes_per_second(), 0);
  EXPECT_DOUBLE_EQ(r.bandwidth_bytes_per_second(), r.bytes() / r.seconds());
  EXPECT_GT(r.rtt_seconds(), 0);
  EXPECT_LT(r.rtt_seconds(), r.seconds() + 10);
  EXPECT_TRUE(Eventually([&] { return server->stats().completed == 3; }));
  EXPECT_EQ(server->stats().bytes_received, 3u << 20);
  EXPECT_EQ(server->stats().refused, 0u);
}

TEST(LinkMeasurer, StopsAtTheTimeLimitCountingOnlyWhatArrived) {
  LinkServerOptions so;
  so.max_bulk_bytes = uint64_t{1} << 40;
  std::unique_ptr<LinkServer> server = StartServer("pod-1", so);
  ASSERT_NE(server, nullptr);
  server->SetRound(4, 99);
  MeasureOptions o = Small();
  o.max_bytes = uint64_t{1} << 40;  // more than 400 ms can carry on loopback.
  o.max_time = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  const v1::LinkResult r = MeasureLink(Me(), Target("pod-1", server->port()), o, nullptr);
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.samples(), 3);
  EXPECT_GE(r.seconds(), 0.13);  // each sample stops at a third of the time.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_GT(r.bytes(), 0u);
  EXPECT_GE(r.total_bytes(), r.bytes());
  EXPECT_LT(r.total_bytes(), uint64_t{1} << 40);
  // Every sample was cut short by a reset; the server took about what the
  // client counted (less what the reset dropped from its receive queue).
  EXPECT_TRUE(Eventually([&] { return server->stats().closed_early == 3; }));
  EXPECT_EQ(server->stats().completed, 0u);
  EXPECT_LE(server->stats().bytes_received, r.total_bytes() + (24u << 20));
}

TEST(LinkMeasurer, StaleForeignAndMisaddressedPeersAreRefused) {
  std::unique_ptr<LinkServer> server = StartServer("pod-1");
  ASSERT_NE(server, nullptr);
  server->SetRound(4, 99);
  MeasureOptions o = Small();
  o.connect_timeout = absl::Milliseconds(300);
  const v1::LinkTarget t = Target("pod-1", server->port());

  v1::LinkResult r = MeasureLink(Me(3, 99), t, o, nullptr);
  EXPECT_THAT(r.error(), HasSubstr("refused: wrong round (peer at round 4, this node at 3)"));
  r = MeasureLink(Me(4, 98), t, o, nullptr);
  EXPECT_THAT(r.error(), HasSubstr("wrong nonce"));
  r = MeasureLink(LinkIdentity{"job-b", "pod-0", 4, 99}, t, o, nullptr);
  EXPECT_THAT(r.error(), HasSubstr("wrong job"));
  r = MeasureLink(Me(), Target("pod-2", server->port()), o, nullptr);
  EXPECT_THAT(r.error(), HasSubstr("wrong node"));
  EXPECT_EQ(r.bytes(), 0u);
  EXPECT_TRUE(Eventually([&] { return server->stats().refused == 4; }));
  EXPECT_EQ(server->stats().bytes_received, 0u);
}

TEST(LinkMeasurer, APeerStillAtTheLastRoundIsWaitedForUntilTheConnectTimeout) {
  std::unique_ptr<LinkServer> server = StartServer("pod-1");
  ASSERT_NE(server, nullptr);
  server->SetRound(3, 1);
  std::thread later([&server] {
    absl::SleepFor(absl::Milliseconds(200));
    server->SetRound(4, 99);
  });
  const v1::LinkResult r = MeasureLink(Me(), Target("pod-1", server->port()), Small(), nullptr);
  later.join();
  EXPECT_EQ(r.error(), "");
  EXPECT_EQ(r.total_bytes(), 3u << 20);

  // One that never moves on: the error says where it is.
  server->SetRound(3, 1);
  MeasureOptions o = Small();
  o.connect_timeout = absl::Milliseconds(200);
  EXPECT_THAT(MeasureLink(Me(), Target("pod-1", server->port()), o, nullptr).error(),
              HasSubstr("peer at round 3, this node at 4"));
}

// A TCP socket bound to 127.0.0.1 on a free port (not listening), and
// that port; -1 when none could be had.
int BoundLoopbackSocket(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(LinkMeasurer, NothingListeningFailsWithinTheConnectTimeout) {
  int port = 0;
  const int fd = BoundLoopbackSocket(&port);
  ASSERT_GE(fd, 0);
  close(fd);  // a port nobody listens on.
  MeasureOptions o = Small();
  o.connect_timeout = absl::Milliseconds(200);
  const v1::LinkResult r = MeasureLink(Me(), Target("pod-1", port), o, nullptr);
  EXPECT_THAT(r.error(), HasSubstr("Connection refused"));
  EXPECT_EQ(r.bandwidth_bytes_per_second(), 0);
}

TEST(LinkMeasurer, NamesGoThroughTheResolver) {
  std::unique_ptr<LinkServer> server = StartServer("pod-1");
  ASSERT_NE(server, nullptr);
  server->SetRound(4, 99);
  testing::FakeResolver resolver;
  resolver.Add("pod-1.job", {"127.0.0.1"});
  EXPECT_EQ(
      MeasureLink(Me(), Target("pod-1", server->port(), "pod-1.job"), Small(), &resolver).error(),
      "");
  EXPECT_THAT(
      MeasureLink(Me(), Target("pod-1", server->port(), "gone.job"), Small(), &resolver).error(),
      HasSubstr("resolve gone.job: Domain name not found"));
  EXPECT_THAT(
      MeasureLink(Me(), Target("pod-1", server->port(), "pod-1.job"), Small(), nullptr).error(),
      HasSubstr("is not an address"));
}

// A raw connection for the server's rules.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Reads until EOF (or the 30 s receive timeout); what arrived.
std::string ReadToEnd(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(LinkServerRules, GarbageIsAnsweredBadRequestAndClosed) {
  std::unique_ptr<LinkServer> server = StartServer("pod-1");
  ASSERT_NE(server, nullptr);
  const int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  const std::string got = ReadToEnd(fd);
  close(fd);
  Reply reply;
  std::string error;
  ASSERT_EQ(ParseReply(got, &reply, &error), Parsed::kOk) << got.size();
  EXPECT_EQ(reply.status, ReplyStatus::kBadRequest);
  EXPECT_EQ(got.size(), kReplyBytes);  // and nothing more: closed.
}

TEST(LinkServerRules, ASilentPeerIsClosedAfterTheHelloTimeout) {
  LinkServerOptions o;
  o.hello_timeout = absl::Milliseconds(100);
  std::unique_ptr<LinkServer> server = StartServer("pod-1", o);
  ASSERT_NE(server, nullptr);
  const int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  const absl::Time start = absl::Now();
  EXPECT_EQ(ReadToEnd(fd), "");                       // EOF: the server closed it.
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));  // not the 30 s receive timeout.
  close(fd);
  EXPECT_TRUE(Eventually([&] { return server->stats().closed_early == 1; }));
}

TEST(LinkServerRules, AnOversizedBulkIsClosed) {
  LinkServerOptions so;
  so.max_bulk_bytes = 1 << 20;
  std::unique_ptr<LinkServer> server = StartServer("pod-1", so);
  ASSERT_NE(server, nullptr);
  server->SetRound(4, 99);
  const int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  Hello h{4, 99, "job-a", "pod-0", "pod-1"};
  const std::string bytes = EncodeHello(h) + EncodeFrame({FrameType::kBulk, 2 << 20});
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  const std::string got = ReadToEnd(fd);
  close(fd);
  EXPECT_EQ(got.size(), kReplyBytes);  // the OK reply, then the close: no DONE.
  EXPECT_TRUE(Eventually([&] { return server->stats().closed_early == 1; }));
}

TEST(LinkServerRules, TooManyConnectionsAreAnsweredBusy) {
  LinkServerOptions so;
  so.max_connections = 2;
  std::unique_ptr<LinkServer> server = StartServer("pod-1", so);
  ASSERT_NE(server, nullptr);
  const int a = Connect(server->port());
  const int b = Connect(server->port());
  ASSERT_TRUE(Eventually([&] { return server->stats().accepted == 2; }));
  const int c = Connect(server->port());
  ASSERT_GE(c, 0);
  const std::string got = ReadToEnd(c);
  Reply reply;
  std::string error;
  ASSERT_EQ(ParseReply(got, &reply, &error), Parsed::kOk);
  EXPECT_EQ(reply.status, ReplyStatus::kBusy);
  close(a);
  close(b);
  close(c);
}

TEST(LinkServerRules, AnAlreadyBoundSocketIsServed) {
  int port = 0;
  const int fd = BoundLoopbackSocket(&port);
  ASSERT_GE(fd, 0);
  LinkServerOptions o;
  o.listen_fd = fd;
  std::unique_ptr<LinkServer> server = StartServer("pod-1", o);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->port(), port);
  server->SetRound(4, 99);
  EXPECT_EQ(MeasureLink(Me(), Target("pod-1", server->port()), Small(), nullptr).error(), "");
}

TEST(LinkServerRules, BadOptionsAreRefused) {
  LinkServerOptions o;
  o.job_id = "job";
  o.node_id = "n";
  o.host = "not-an-address";
  EXPECT_THAT(LinkServer::Start(o).status().message(), HasSubstr("not a numeric"));
  o.host = "127.0.0.1";
  o.port = 70000;
  EXPECT_FALSE(LinkServer::Start(o).ok());
  o.port = 0;
  o.node_id = "";
  EXPECT_FALSE(LinkServer::Start(o).ok());
}

// Five nodes on loopback, each a server, each measuring its ring targets
// at the same time: every link measured, every server serving two.
TEST(LinkMeasurer, AFiveNodeRingOnLoopback) {
  std::vector<std::string> nodes = {"n0", "n1", "n2", "n3", "n4"};
  std::map<std::string, std::unique_ptr<LinkServer>> servers;
  for (const std::string& n : nodes) {
    servers[n] = StartServer(n);
    ASSERT_NE(servers[n], nullptr);
    servers[n]->SetRound(7, 1234);
  }
  const RingPlan plan = PlanRings(nodes, 7);
  std::map<std::string, std::vector<v1::LinkResult>> results;
  std::vector<std::thread> threads;
  absl::Mutex mu;
  for (const std::string& n : nodes) {
    v1::NetworkPlan p;
    p.set_round(7);
    p.set_nonce(1234);
    p.set_max_bytes_per_link(3 << 20);
    for (const std::string& to : plan.at(n)) *p.add_targets() = Target(to, servers[to]->port());
    threads.emplace_back([&, n, p] {
      absl::StatusOr<std::vector<v1::LinkResult>> r =
          MeasurePlan(LinkIdentity{"job-a", n, 0, 0}, p, Small(), nullptr);
      absl::MutexLock lock(&mu);
      results[n] = r.ok() ? *r : std::vector<v1::LinkResult>{};
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<v1::LinkResult> all;
  for (const std::string& n : nodes) {
    ASSERT_EQ(results[n].size(), 2u) << n;
    for (const v1::LinkResult& l : results[n]) {
      EXPECT_EQ(l.error(), "") << n;
      EXPECT_EQ(l.total_bytes(), 3u << 20) << n;
      all.push_back(l);
    }
  }
  for (const std::string& n : nodes) {
    EXPECT_TRUE(Eventually([&] { return servers[n]->stats().completed == 6; })) << n;
  }
  EXPECT_EQ(AnalyzeLinks(all).links, 10);
}

TEST(MeasurePlan, AnInvalidPlanIsRefused) {
  v1::NetworkPlan p;
  *p.add_targets() = Target("x", 0);
  EXPECT_EQ(MeasurePlan(Me(), p, Small(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace link_test
}  // namespace trainlet::preflight

// The listener over real sockets on loopback. Waiting for the accept thread
// is unavoidable here (it reacts to the kernel), so the tests poll for a
// condition with a generous deadline instead of sleeping a fixed time.
#include "rendezvous/tcp_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return pred();
}

// A connected client socket, or -1.
int Connect(int family, int port) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc;
  if (family == AF_INET) {
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in6 a = {};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_loopback;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed the client's connection (EOF or reset).
bool ClosedByServer(int client_fd, absl::Duration timeout = absl::Seconds(5)) {
  pollfd p = {client_fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
  char c;
  return recv(client_fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// Collects the connections the listener hands over.
struct Handed {
  absl::Mutex mu;
  std::vector<int> fds ABSL_GUARDED_BY(mu);
  int count() {
    absl::MutexLock l(&mu);
    return static_cast<int>(fds.size());
  }
  void CloseAll() {
    absl::MutexLock l(&mu);
    for (int fd : fds) close(fd);
    fds.clear();
  }
  TcpListener::Options Options(int max_connections) {
    TcpListener::Options o;
    o.max_connections = max_connections;
    o.name = "test";
    o.on_connection = [this](int fd, int) {
      absl::MutexLock l(&mu);
      fds.push_back(fd);
    };
    return o;
  }
};

TEST(ResolveBindAddresses, WildcardIsTheIpv6AnyAddressAlone) {
  for (const char* host : {"", "0.0.0.0", "::", "*"}) {
    auto r = ResolveBindAddresses(host, SOCK_DGRAM, "cannot bind UDP x");
    ASSERT_TRUE(r.ok()) << host << ": " << r.status();
    ASSERT_EQ(r->size(), 1u) << host;
    EXPECT_EQ((*r)[0].family(), AF_INET6) << host;
    EXPECT_TRUE(IsWildcardHost(host));
  }
  EXPECT_FALSE(IsWildcardHost("127.0.0.1"));
}

TEST(ResolveBindAddresses, LiteralsAndNames_OnceEach_ErrorsStartWithTheAction) {
  auto v4 = ResolveBindAddresses("127.0.0.1", SOCK_STREAM, "cannot listen on 127.0.0.1:1");
  ASSERT_TRUE(v4.ok()) << v4.status();
  ASSERT_EQ(v4->size(), 1u);
  EXPECT_EQ((*v4)[0].family(), AF_INET);
  BindAddress a = (*v4)[0];
  a.SetPort(29400);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&a.addr)->sin_port), 29400);
  // "localhost" may resolve to 127.0.0.1 and ::1, each once (never twice
  // for the two socket types getaddrinfo would otherwise list).
  auto local = ResolveBindAddresses("localhost", SOCK_DGRAM, "cannot bind UDP localhost:1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_GE(local->size(), 1u);
  EXPECT_LE(local->size(), 2u);
  auto bad = ResolveBindAddresses("no-such-host.invalid", SOCK_DGRAM, "cannot bind UDP h:1");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("cannot bind UDP h:1: no-such-host.invalid"));
  EXPECT_THAT(bad.status().message(), HasSubstr("does not resolve"));
}

TEST(TcpListenerBind, PortInUse_NamesTheAddressAndIsAddressInUse) {
  auto first = TcpListener::Bind({{"127.0.0.1", 0}});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port(0);
  auto second = TcpListener::Bind({{"127.0.0.1", port}});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(IsAddressInUse(second.status()));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", port, ": the port is in use")));
  // The wildcard address overlaps with 127.0.0.1 too.
  auto wildcard = TcpListener::Bind({{"0.0.0.0", port}});
  ASSERT_FALSE(wildcard.ok());
  EXPECT_TRUE(IsAddressInUse(wildcard.status())) << wildcard.status();
}

TEST(TcpListenerBind, AddressOfAnotherMachine_SaysItIsNotLocal) {
  auto l = TcpListener::Bind({{"192.0.2.7", 0}});  // TEST-NET-1: never local.
  ASSERT_FALSE(l.ok());
  EXPECT_FALSE(IsAddressInUse(l.status()));
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(),
              HasSubstr("cannot listen on 192.0.2.7:0: that is not an address of this machine"));
}

TEST(TcpListenerBind, OtherErrorsAreNotAddressInUse) {
  EXPECT_FALSE(IsAddressInUse(absl::UnavailableError("port is in use")));
  EXPECT_FALSE(IsAddressInUse(absl::OkStatus()));
}

TEST(TcpListener, HandsOverConnections_RefusesBeyondTheCap_AcceptsAgainWhenOneCloses) {
  auto l = TcpListener::Bind({{"127.0.0.1", 0}});
  ASSERT_TRUE(l.ok()) << l.status();
  Handed handed;
  std::vector<bool> changes;
  absl::Mutex changes_mu;
  TcpListener::Options o = handed.Options(3);
  o.on_accepting_change = [&](bool accepting) {
    absl::MutexLock lock(&changes_mu);
    changes.push_back(accepting);
  };
  (*l)->Start(o);
  const int port = (*l)->port(0);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Connect(AF_INET, port));
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 3; }));
  EXPECT_TRUE((*l)->accepting());

  const int refused = Connect(AF_INET, port);
  ASSERT_GE(refused, 0) << "the kernel completes the handshake; the listener closes it";
  EXPECT_TRUE(ClosedByServer(refused));
  EXPECT_FALSE((*l)->accepting());
  EXPECT_EQ((*l)->stats().refused_full, 1);
  EXPECT_EQ(handed.count(), 3);

  {
    // The server side of one connection goes away (gRPC closed it).
    absl::MutexLock lock(&handed.mu);
    close(handed.fds.back());
    handed.fds.pop_back();
  }
  ASSERT_TRUE(WaitFor([&] { return (*l)->accepting(); })) << "rechecked while full";
  const int again = Connect(AF_INET, port);
  ASSERT_TRUE(WaitFor([&] { return handed.count() == 3; }));
  EXPECT_EQ((*l)->stats().accepted, 4);
  {
    absl::MutexLock lock(&changes_mu);
    EXPECT_EQ(changes, (std::vector<bool>{false, true}));
  }
  for (int fd : clients) close(fd);
  close(refused);
  close(again);
  (*l)->Stop();
  handed.CloseAll();
}

TEST(TcpListener, WildcardAcceptsIpv4AndIpv6) {
  auto l = TcpListener::Bind({{"0.0.0.0", 0}});
  ASSERT_TRUE(l.ok()) << l.status();
  Handed handed;
  (*l)->Start(handed.Options(10));
  const int v4 = Connect(AF_INET, (*l)->port(0));
  ASSERT_GE(v4, 0);
  int expected = 1;
  const int v6 = Connect(AF_INET6, (*l)->port(0));
  if (v6 >= 0) ++expected;  // else this host has no IPv6 loopback.
  EXPECT_TRUE(WaitFor([&] { return handed.count() == expected; }));
  close(v4);
  if (v6 >= 0) close(v6);
  (*l)->Stop();
  handed.CloseAll();
}

TEST(TcpListener, StopClosesTheListeningSocket) {
  auto l = TcpListener::Bind({{"127.0.0.1", 0}});
  ASSERT_TRUE(l.ok());
  Handed handed;
  (*l)->Start(handed.Options(10));
  const int port = (*l)->port(0);
  (*l)->Stop();
  (*l)->Stop();  // idempotent.
  EXPECT_LT(Connect(AF_INET, port), 0);
}

// D2: runs in a forked child (a death test) under a low descriptor limit, so
// that exhausting descriptors cannot disturb the rest of the test binary.
// Filler descriptors use up the process's budget; one client connection then
// arrives when not a single descriptor is left for accept4 (EMFILE).
void SurviveExhaustion() {
  auto fail = [](const char* what) {
    fprintf(stderr, "FAILED: %s\n", what);
    _exit(1);
  };
  auto l = TcpListener::Bind({{"127.0.0.1", 0}});
  if (!l.ok()) fail("bind");
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) fail("setrlimit");
  Handed handed;
  (*l)->Start(handed.Options(1000));  // the cap is not what stops it here.
  const int port = (*l)->port(0);
  std::vector<int> fillers;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  close(fillers.back());
  fillers.pop_back();
  const int client = Connect(AF_INET, port);  // takes the last descriptor.
  if (client < 0) fail("connect");
  if (!WaitFor([&] { return (*l)->stats().refused_exhausted == 1; })) fail("never refused");
  if ((*l)->accepting()) fail("still says it is accepting");
  if (!ClosedByServer(client)) fail("the refused connection was left hanging");
  // Give the descriptors back: the listener must accept again.
  for (int fd : fillers) close(fd);
  close(client);
  if (!WaitFor([&] { return (*l)->accepting(); })) fail("never recovered");
  const int again = Connect(AF_INET, port);
  if (again < 0) fail("connect after recovery");
  if (!WaitFor([&] { return handed.count() == 1; })) fail("not accepted after recovery");
  (*l)->Stop();
  _exit(0);
}

TEST(TcpListenerDeathTest, SurvivesDescriptorExhaustionAndAcceptsAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(SurviveExhaustion(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace trainlet::rendezvous

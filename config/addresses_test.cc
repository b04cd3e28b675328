#include "config/addresses.h"

#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

TEST(Addresses, ThisHostOnlyAndItsLoopback) {
  for (const char* host : {"127.0.0.1", "127.3.4.5", "::1", "localhost", "0.0.0.0", "::"}) {
    EXPECT_TRUE(IsThisHostOnly(host)) << host;
  }
  for (const char* host : {"10.0.0.1", "fd00::1", "head"}) EXPECT_FALSE(IsThisHostOnly(host));
  EXPECT_EQ(LoopbackLike("::1"), "::1");
  EXPECT_EQ(LoopbackLike("localhost"), "127.0.0.1");
  EXPECT_EQ(LoopbackLike("0.0.0.0"), "127.0.0.1");
}

TEST(Addresses, HostNamesCompareAsDnsDoes) {
  EXPECT_TRUE(SameHostName("Head.Example.", "head.example"));
  EXPECT_FALSE(SameHostName("head", "head2"));
  EXPECT_FALSE(SameHostName("", ""));
}

TEST(Addresses, ALocalCoordinatorAsksTheResolverLast) {
  SystemInfo sys;
  sys.hostname = "node-a";
  sys.fqdn = "node-a.sub.ns.svc.cluster.local";
  sys.local_addrs = [] { return std::vector<std::string>{"10.0.0.7", "fd00::7"}; };
  int lookups = 0;
  sys.resolve = [&lookups](const std::string& host) -> std::optional<ResolvedHost> {
    ++lookups;
    if (host == "alias") return ResolvedHost{"alias.example", {"10.0.0.7"}};
    return ResolvedHost{host, {"10.9.9.9"}};
  };
  for (const char* host : {"localhost", "10.0.0.7", "fd00::7", "NODE-A", sys.fqdn.c_str()}) {
    EXPECT_TRUE(IsLocalCoordinator(host, sys)) << host;
  }
  EXPECT_FALSE(IsLocalCoordinator("10.0.0.8", sys));
  EXPECT_EQ(lookups, 0) << "addresses and own names need no lookup";
  EXPECT_TRUE(IsLocalCoordinator("alias", sys));
  EXPECT_FALSE(IsLocalCoordinator("elsewhere", sys));
  EXPECT_EQ(lookups, 2);
}

TEST(Addresses, OwnReachableName_FqdnThenCanonicalNameThenHostname) {
  SystemInfo sys;
  sys.hostname = "node-a";
  sys.fqdn = "node-a.sub";
  EXPECT_EQ(OwnReachableName(sys), "node-a.sub");
  sys.fqdn.clear();
  sys.resolve = [](const std::string&) -> std::optional<ResolvedHost> {
    return ResolvedHost{"node-a.corp.example.", {"10.0.0.7"}};
  };
  EXPECT_EQ(OwnReachableName(sys), "node-a.corp.example");
  sys.resolve = nullptr;
  EXPECT_EQ(OwnReachableName(sys), "node-a");
  sys.hostname = "localhost";
  EXPECT_EQ(OwnReachableName(sys), "");
}

}  // namespace
}  // namespace trainlet::agent

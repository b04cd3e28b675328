#include "preflight/dns.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "preflight/check_result.h"
#include "preflight/testing/fake_dns_server.h"
#include "preflight/testing/fake_resolver.h"

namespace trainlet::preflight {
namespace dns_test {

using ::testing::AllOf;
using testing::FakeDnsServer;
using testing::FakeResolver;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CheckDns, EveryNameResolvesPasses) {
  auto resolver = std::make_shared<FakeResolver>();
  resolver->Add("head-0", {"10.0.0.1"});
  resolver->Add("worker-1", {"10.0.0.2"});
  BoundedRunner runner;
  const v1::CheckResult r = CheckDns({"head-0", "worker-1", "head-0", ""}, resolver, runner);
  EXPECT_EQ(r.outcome(), v1::CheckResult::PASS) << r.reason();
  EXPECT_THAT(r.reason(), HasSubstr("2 names resolved"));
  EXPECT_EQ(resolver->asked(), (std::vector<std::string>{"head-0", "worker-1"}));
}

TEST(CheckDns, AnUnresolvableMemberFailsNamingIt) {
  auto resolver = std::make_shared<FakeResolver>();
  resolver->Add("head-0", {"10.0.0.1"});
  BoundedRunner runner;
  const v1::CheckResult r = CheckDns({"head-0", "worker-7.job.ns.svc"}, resolver, runner);
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), AllOf(HasSubstr("1 of 2 names do not resolve"),
                                HasSubstr("worker-7.job.ns.svc (Domain name not found)"),
                                Not(HasSubstr("head-0"))));
  EXPECT_EQ(r.value(), 1);
}

TEST(CheckDns, AResolverThatHangsFailsInTimeAndIsNotAskedAgainUntilItAnswers) {
  auto resolver = std::make_shared<FakeResolver>();
  resolver->Hang("slow");
  BoundedRunner runner;
  const v1::CheckResult r = CheckDns({"slow"}, resolver, runner, absl::Milliseconds(100));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("gave no answer"));
  const v1::CheckResult again = CheckDns({"slow"}, resolver, runner, absl::Milliseconds(100));
  EXPECT_EQ(again.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(again.reason(), HasSubstr("still blocked"));
  EXPECT_EQ(resolver->asked().size(), 1u);
  resolver->Release();  // the resolver's thread ends; the resolver lives on in it until then.
}

TEST(CheckDns, NoNamesIsSkipped) {
  BoundedRunner runner;
  EXPECT_EQ(CheckDns({}, std::make_shared<FakeResolver>(), runner).outcome(),
            v1::CheckResult::SKIPPED);
}

TEST(CheckDns, AtMostTheCapOfNamesIsResolved) {
  auto resolver = std::make_shared<FakeResolver>();
  std::vector<std::string> names;
  for (int i = 0; i < kMaxDnsNames + 5; ++i) {
    names.push_back("n" + std::to_string(i));
    resolver->Add(names.back(), {"10.0.0.1"});
  }
  BoundedRunner runner;
  const v1::CheckResult r = CheckDns(names, resolver, runner);
  EXPECT_EQ(r.outcome(), v1::CheckResult::PASS);
  EXPECT_THAT(r.reason(), HasSubstr("(5 more names not checked)"));
  EXPECT_EQ(resolver->asked().size(), static_cast<size_t>(kMaxDnsNames));
}

// The real c-ares resolver against a DNS server on loopback.
class AresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeDnsServer::Start();
    if (server_ == nullptr) GTEST_SKIP() << "no UDP socket on 127.0.0.1";
    AresOptions options;
    options.servers = server_->address();
    options.lookups = "b";  // DNS only: not this machine's /etc/hosts.
    resolver_ = MakeAresResolver(options);
  }
  std::unique_ptr<FakeDnsServer> server_;
  std::shared_ptr<Resolver> resolver_;
};

TEST_F(AresTest, KnownNameResolvesAndUnknownIsNotFound) {
  server_->AddA("head-0.job.test", "10.9.8.7");
  const std::vector<NameAnswer> a =
      resolver_->Resolve({"head-0.job.test", "nobody.job.test"}, absl::Seconds(10));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].addrs, std::vector<std::string>{"10.9.8.7"}) << a[0].error;
  EXPECT_TRUE(a[1].addrs.empty());
  EXPECT_THAT(a[1].error, HasSubstr("not found"));
}

TEST_F(AresTest, SilentServerIsGivenUpAtTheDeadline) {
  server_->Ignore("hangs.job.test");
  server_->AddA("fine.job.test", "10.0.0.5");
  const absl::Time start = absl::Now();
  const std::vector<NameAnswer> a =
      resolver_->Resolve({"hangs.job.test", "fine.job.test"}, absl::Milliseconds(300));
  // Bounded by the deadline, with room for a loaded machine; without the
  // deadline c-ares would wait out its own tries.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_THAT(a[0].error, HasSubstr("timed out after 300ms"));
  EXPECT_EQ(a[1].addrs, std::vector<std::string>{"10.0.0.5"});
  EXPECT_GE(server_->queries(), 1);
}

TEST_F(AresTest, CheckDnsWithTheRealResolver) {
  server_->AddA("head-0.job.test", "10.9.8.7");
  BoundedRunner runner;
  const v1::CheckResult r =
      CheckDns({"head-0.job.test", "late.job.test"}, resolver_, runner, absl::Seconds(10));
  EXPECT_EQ(r.outcome(), v1::CheckResult::FAIL);
  EXPECT_THAT(r.reason(), HasSubstr("late.job.test ("));
}

TEST(AresResolver, NumericAddressesAndLocalhostResolveWithoutAServer) {
  std::shared_ptr<Resolver> resolver = MakeAresResolver();
  const std::vector<NameAnswer> a = resolver->Resolve({"127.0.0.1", "::1"}, absl::Seconds(10));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].addrs, std::vector<std::string>{"127.0.0.1"}) << a[0].error;
  EXPECT_EQ(a[1].addrs, std::vector<std::string>{"::1"}) << a[1].error;
}

TEST(AresResolver, BadServerListIsAnErrorPerName) {
  AresOptions options;
  options.servers = "not a server";
  const std::vector<NameAnswer> a = MakeAresResolver(options)->Resolve({"x"}, absl::Seconds(1));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_THAT(a[0].error, HasSubstr("c-ares: servers"));
}

}  // namespace dns_test
}  // namespace trainlet::preflight

#include "common/host_names.h"

#include <string>

#include "gtest/gtest.h"

namespace trainlet {
namespace {

TEST(IsValidHost, AcceptsNamesAndAddresses) {
  for (const char* ok :
       {"localhost", "head", "job-node-0-0.job.default.svc.cluster.local", "tl-a.", "my_service",
        "10.0.0.3", "127.0.0.1", "::1", "fe80::1%eth0", "2001:db8::7", "a", "0node"}) {
    EXPECT_TRUE(IsValidHost(ok)) << ok;
  }
}

TEST(IsValidHost, RejectsWhatIsNotAHost) {
  const std::string long_label(64, 'a');
  const std::string long_name = std::string(250, 'a') + ".bcd";
  for (const std::string& bad :
       {std::string(""), std::string("a b"), std::string("host:1234"), std::string("[::1]"),
        std::string("-lead"), std::string("trail-"), std::string("a..b"), std::string("."),
        std::string("\xc3\xa4\n"), std::string("evil\0x", 6), std::string("a\tb"), long_label,
        long_name, std::string("fe80::1%"), std::string("1.2.3.4/8"),
        std::string("127.0.0.1\0evil", 14), std::string("::1\0x", 5)}) {
    EXPECT_FALSE(IsValidHost(bad)) << bad;
  }
}

TEST(IsLoopbackHost, KnowsLoopback) {
  for (const char* yes :
       {"localhost", "LOCALHOST.", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(yes)) << yes;
  }
  for (const char* no : {"10.0.0.1", "::2", "localhost2", "head", "128.0.0.1", ""}) {
    EXPECT_FALSE(IsLoopbackHost(no)) << no;
  }
  EXPECT_FALSE(IsLoopbackHost(std::string("127.0.0.1\0evil", 14)));
}

}  // namespace
}  // namespace trainlet

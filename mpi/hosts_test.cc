#include "mpi/hosts.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::mpi {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace hosts_test {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kKey1[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPDfVOErM2gZofCvvxaPGM5kgVfCuOHzoGE5cueIt82t";
constexpr char kKey2[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJqDUZrtysrbMoDu7US0nnFCQ/kK0INFNS103K3eJFMw";
constexpr char kEcdsa[] =
    "ecdsa-sha2-nistp256 "
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBKC9W2FQnZB+"
    "5LGYQtg1RyCeuR2h3sR79GRoQXfrUbDR"
    "wdJ8TW8I5L2RGeVoP+VbwYUjgx3OKk9t2ADzCbrP2KI=";

std::vector<MpiHost> TwoGoodHosts() {
  return {{"node-a", "w-0.job.ns.svc", 2, 2222, kKey1}, {"node-b", "10.0.0.7", 4, 22, kEcdsa}};
}

TEST(ValidateHosts, AcceptsNamesAddressesAndKnownKeyTypes) {
  EXPECT_TRUE(ValidateHosts(TwoGoodHosts()).ok());
  EXPECT_TRUE(ValidateHosts({}).ok());
  EXPECT_TRUE(ValidateHosts({{"n", "fe80::1", 1024, 65535, kKey2}}).ok());
}

TEST(ValidateHosts, AcceptsTheLauncherWithNoPortAndNoKey) {
  std::vector<MpiHost> hosts = TwoGoodHosts();
  hosts.insert(hosts.begin(), {"launcher", "job-launcher-0.job.ns.svc", 1, 0, ""});
  EXPECT_TRUE(ValidateHosts(hosts).ok());
}

// Each bad value is refused with a message naming the node and the value.
void ExpectRefused(MpiHost bad, const std::string& value_in_message) {
  std::vector<MpiHost> hosts = TwoGoodHosts();
  bad.node_id = "node-bad";
  hosts.push_back(bad);
  const absl::Status status = ValidateHosts(hosts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("node-bad"), HasSubstr(value_in_message)));
}

TEST(ValidateHosts, RefusesBadNamesNamingTheNode) {
  ExpectRefused({"", "a b", 1, 2222, kKey2}, "\"a b\"");
  ExpectRefused({"", "-x", 1, 2222, kKey2}, "\"-x\"");
  ExpectRefused({"", "host;rm", 1, 2222, kKey2}, "host;rm");
  ExpectRefused({"", "", 1, 2222, kKey2}, "name \"\"");
  ExpectRefused({"", std::string(300, 'a'), 1, 2222, kKey2}, "aaaa");
  ExpectRefused({"", "evil\nHost *", 1, 2222, kKey2}, "evil\\nHost *");
  ExpectRefused({"", "h:2222", 1, 2222, kKey2}, "h:2222");
}

TEST(ValidateHosts, RefusesSlotsAndPortsOutOfRange) {
  ExpectRefused({"", "w-9", 0, 2222, kKey2}, "slots 0");
  ExpectRefused({"", "w-9", 1025, 2222, kKey2}, "slots 1025");
  ExpectRefused({"", "w-9", 1, 70000, kKey2}, "port 70000");
  ExpectRefused({"", "w-9", 1, 0, kKey2}, "port 0");
}

TEST(ValidateHosts, RefusesKeysThatAreNotTypeAndBase64) {
  const std::string key = kKey2;
  ExpectRefused({"", "w-9", 1, 2222, key + "\nevil ssh-ed25519 AAAA"}, "\\nevil");
  ExpectRefused({"", "w-9", 1, 2222, key + " comment"}, "comment");
  ExpectRefused({"", "w-9", 1, 2222, "ssh-ed25519  AAAAC3Nz"}, "ssh-ed25519  AAAA");
  ExpectRefused({"", "w-9", 1, 2222, "ssh-dss AAAAB3NzaC1kc3MAAACBAP"}, "ssh-dss");
  ExpectRefused({"", "w-9", 1, 2222, ""}, "host key \"\"");
  ExpectRefused({"", "w-9", 1, 2222, "ssh-ed25519"}, "host key \"ssh-ed25519\"");
  // Base64 of a key of another type than the line says.
  ExpectRefused({"", "w-9", 1, 2222, std::string("ssh-rsa ") + (kKey2 + 12)}, "ssh-rsa AAAA");
  ExpectRefused({"", "w-9", 1, 2222, "ssh-ed25519 AAAA$BBB"}, "AAAA$BBB");
}

TEST(ValidateHosts, RefusesDuplicateNamesIgnoringCaseAndTrailingDot) {
  ExpectRefused({"", "w-0.job.ns.svc", 1, 2222, kKey2}, "w-0.job.ns.svc");
  ExpectRefused({"", "W-0.Job.ns.svc.", 1, 2222, kKey2}, "W-0.Job.ns.svc.");
}

TEST(IsValidPublicKeyLine, AcceptsRealKeys) {
  EXPECT_TRUE(IsValidPublicKeyLine(kKey1));
  EXPECT_TRUE(IsValidPublicKeyLine(kEcdsa));
  EXPECT_FALSE(IsValidPublicKeyLine(std::string(kKey1) + "\n"));
}

TEST(TotalSlots, SumsSlots) {
  EXPECT_EQ(TotalSlots(TwoGoodHosts()), 6);
  EXPECT_EQ(TotalSlots({}), 0);
}

}  // namespace hosts_test
}  // namespace
}  // namespace trainlet::mpi

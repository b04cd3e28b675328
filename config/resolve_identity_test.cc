#include "absl/strings/str_join.h"
#include "config/run_resolvers.h"
#include "config/testing/run_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using testing::RunSteps;

TEST(ResolveIdentity, JobIdFromTheTableOrTorchrunsRdzvId_NodeIdFromTheHostname) {
  RunSteps plain({});
  ASSERT_TRUE(plain.Through(&ResolveIdentity).ok());
  EXPECT_EQ(plain.config().job_id, "trainlet") << "the table's default";
  EXPECT_EQ(plain.config().node_id, "workstation");

  RunSteps rdzv({"--rdzv-id=llama"}, {{"TRAINLET_JOB_ID", "other"}});
  ASSERT_TRUE(rdzv.Through(&ResolveIdentity).ok());
  EXPECT_EQ(rdzv.config().job_id, "llama");
  EXPECT_THAT(absl::StrJoin(rdzv.config().notes, "\n"), HasSubstr("(torchrun's): the job id"));

  SystemInfo nameless = testing::Workstation();
  nameless.hostname.clear();
  RunSteps no_name({}, {}, nameless);
  EXPECT_EQ(no_name.Through(&ResolveIdentity).code(), absl::StatusCode::kFailedPrecondition);
  RunSteps named({"--node-id=n7"}, {}, nameless);
  ASSERT_TRUE(named.Through(&ResolveIdentity).ok());
  EXPECT_EQ(named.config().node_id, "n7");
}

TEST(ResolveIdentity, TheAddressPeersReachThisNodeAt) {
  // The host of a configured coordinator: exactly what the peers dial.
  RunSteps head({"--nnodes=2", "--node-rank=0", "--coordinator=head.example:29400"});
  ASSERT_TRUE(head.Through(&ResolveIdentity).ok());
  EXPECT_EQ(head.config().advertise_addr, "head.example");
  // The whole job on this host.
  RunSteps single({});
  ASSERT_TRUE(single.Through(&ResolveIdentity).ok());
  EXPECT_EQ(single.config().advertise_addr, "127.0.0.1");
  // Rank 0 of several with no address configured: its FQDN.
  SystemInfo pod = testing::Workstation();
  pod.hostname = "trainer";  // not a JobSet pod's name, which names the coordinator
  pod.fqdn = "trainer.sub.default.svc.cluster.local";
  RunSteps rank0({"--nnodes=2", "--node-rank=0"}, {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, pod);
  ASSERT_TRUE(rank0.Through(&ResolveIdentity).ok());
  EXPECT_EQ(rank0.config().advertise_addr, pod.fqdn);
  // A node that joins: the coordinator records where its join came from.
  RunSteps joins({"--nnodes=2", "--node-rank=1", "--coordinator=head"});
  ASSERT_TRUE(joins.Through(&ResolveIdentity).ok());
  EXPECT_EQ(joins.config().advertise_addr, "");
}

TEST(ResolveIdentity, ALoopbackAddressInAMultiNodePodIsAWarning) {
  RunSteps steps({"--nnodes=2", "--node-rank=0", "--advertise-addr=127.0.0.1"},
                 {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}});
  ASSERT_TRUE(steps.Through(&ResolveIdentity).ok());
  EXPECT_EQ(steps.config().advertise_addr, "127.0.0.1");
  EXPECT_THAT(absl::StrJoin(steps.config().warnings, "\n"),
              HasSubstr("--advertise-addr=127.0.0.1 is a loopback address"));
}

}  // namespace
}  // namespace trainlet::agent

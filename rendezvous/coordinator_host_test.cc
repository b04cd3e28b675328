// CoordinatorHost, HealthServer and GrpcServer over real gRPC on 127.0.0.1
// with the real stubs: health on each port, bind errors, the connection cap
// seen through health, the Join deadline answered by the coordinator.
#include "rendezvous/coordinator_host.h"

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/grpc_server.h"
#include "rendezvous/health_server.h"
#include "rendezvous/protocol_version.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace coordinator_host_test {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using ::testing::Not;

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

CoordinatorHostOptions HostOptions(int nnodes) {
  CoordinatorHostOptions o;
  o.core.job_id = "job";
  o.core.min_nodes = o.core.max_nodes = nnodes;
  o.core.last_call = absl::Milliseconds(500);
  o.core.heartbeat_timeout = absl::Seconds(5);
  o.core.min_nodes_timeout = absl::Minutes(5);
  o.core.incarnation = NewIncarnation();
  o.token = "tok";
  o.bind_addr = "127.0.0.1";
  o.port = 0;
  return o;
}

v1::JoinRequest Req(const std::string& node, uint64_t inc, int hint) {
  v1::JoinRequest r;
  r.mutable_member()->set_node_id(node);
  r.mutable_member()->set_incarnation(inc);
  r.set_job_id("job");
  r.set_protocol_version(kProtocolVersion);
  r.set_rank_hint(hint);
  r.set_local_world_size(1);
  r.set_master_port(29500);
  return r;
}

// A health client on its own connection (which it keeps).
class HealthClient {
 public:
  explicit HealthClient(int port) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = grpc::health::v1::Health::NewStub(channel_);
  }
  // SERVING / NOT_SERVING, or UNKNOWN when the call failed.
  HealthCheckResponse::ServingStatus Check() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    HealthCheckResponse resp;
    if (!stub_->Check(&ctx, req, &resp).ok()) return HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
};

std::unique_ptr<v1::Rendezvous::Stub> RendezvousStub(int port) {
  return v1::Rendezvous::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

int ConnectRaw(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(CoordinatorHost, ServesRendezvousAndHealthOnOnePort) {
  auto host = CoordinatorHost::Start(HostOptions(1));
  ASSERT_TRUE(host.ok()) << host.status();
  HealthClient health((*host)->port());
  EXPECT_EQ(health.Check(), HealthCheckResponse::NOT_SERVING);
  (*host)->SetServing(true);
  EXPECT_EQ(health.Check(), HealthCheckResponse::SERVING);
  EXPECT_TRUE((*host)->accepting());

  auto stub = RendezvousStub((*host)->port());
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, "tok");
  v1::JoinResponse resp;
  grpc::Status s = stub->Join(&ctx, Req("a", 1, 0), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.assignment().nnodes(), 1);
  EXPECT_EQ((*host)->core().GetSnapshot().members, 1);
}

TEST(CoordinatorHost, GivesMemoryBackOnceARoundsAnswersAreSent) {
  std::atomic<int> trims{0};
  CoordinatorHostOptions options = HostOptions(2);
  options.memory_trim = [&trims] { trims.fetch_add(1); };
  auto host = CoordinatorHost::Start(std::move(options));
  ASSERT_TRUE(host.ok()) << host.status();
  auto stub = RendezvousStub((*host)->port());
  grpc::ClientContext first_ctx;
  first_ctx.AddMetadata(kTokenMetadataKey, "tok");
  v1::JoinRequest first = Req("a", 1, 0);
  v1::JoinResponse first_resp;
  absl::Notification first_done;
  stub->async()->Join(&first_ctx, &first, &first_resp, [&](grpc::Status) { first_done.Notify(); });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(trims.load(), 0) << "nothing to give back while the round is open";
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, "tok");
  v1::JoinResponse resp;
  ASSERT_TRUE(stub->Join(&ctx, Req("b", 2, 1), &resp).ok());
  first_done.WaitForNotification();
  EXPECT_TRUE(WaitFor([&] { return trims.load() == 1; })) << trims.load();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(trims.load(), 1) << "once per answered round";
}

TEST(CoordinatorHost, PortTaken_IsAddressInUse_NamingTheAddress) {
  auto first = CoordinatorHost::Start(HostOptions(1));
  ASSERT_TRUE(first.ok()) << first.status();
  CoordinatorHostOptions o = HostOptions(1);
  o.port = (*first)->port();
  auto second = CoordinatorHost::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(IsAddressInUse(second.status()));
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", o.port, ": the port is in use")));
  // Not a raw gRPC core dump.
  EXPECT_THAT(second.status().message(), Not(HasSubstr("UNKNOWN:")));
}

TEST(CoordinatorHost, NotALocalAddress_SaysSo) {
  CoordinatorHostOptions o = HostOptions(1);
  o.bind_addr = "192.0.2.1";
  auto host = CoordinatorHost::Start(o);
  ASSERT_FALSE(host.ok());
  EXPECT_FALSE(IsAddressInUse(host.status()));
  EXPECT_THAT(host.status().message(), HasSubstr("not an address of this machine"));
}

TEST(CoordinatorHost, Shutdown_EndsParkedJoinsAndIsIdempotent) {
  auto host = CoordinatorHost::Start(HostOptions(2));
  ASSERT_TRUE(host.ok()) << host.status();
  auto stub = RendezvousStub((*host)->port());
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, "tok");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::JoinResponse resp;
  absl::Notification done;
  grpc::Status status;
  const v1::JoinRequest req = Req("a", 1, 0);
  stub->async()->Join(&ctx, &req, &resp, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(WaitFor([&] { return (*host)->core().GetSnapshot().gathering == 1; }));
  (*host)->Shutdown(absl::Milliseconds(200));
  (*host)->Shutdown(absl::Milliseconds(200));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(CoordinatorHost, ParkedJoin_AnsweredBeforeItsDeadline_NamingTheMissingRank) {
  auto host = CoordinatorHost::Start(HostOptions(2));
  ASSERT_TRUE(host.ok()) << host.status();
  auto stub = RendezvousStub((*host)->port());
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, "tok");
  const absl::Time deadline = absl::Now() + absl::Milliseconds(1500);
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::JoinResponse resp;
  grpc::Status s = stub->Join(&ctx, Req("a", 1, 0), &resp);
  EXPECT_LT(absl::Now(), deadline) << "the coordinator answers first";
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("1/2 joined; waiting for rank 1"));
  EXPECT_EQ((*host)->core().GetSnapshot().gathering, 0);
}

TEST(HealthServer, ServesOnlyHealth) {
  auto health = HealthServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(health.ok()) << health.status();
  (*health)->SetServing(true);
  HealthClient client((*health)->port());
  EXPECT_EQ(client.Check(), HealthCheckResponse::SERVING);
  auto stub = RendezvousStub((*health)->port());
  grpc::ClientContext ctx;
  v1::LeaveResponse resp;
  v1::LeaveRequest req;
  EXPECT_EQ(stub->Leave(&ctx, req, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  (*health)->Shutdown();
  (*health)->Shutdown();
}

TEST(GrpcServer, AtTheConnectionCap_HealthSaysNotServing_ThenServingAgain) {
  GrpcServerOptions o;
  o.listen.push_back({"127.0.0.1", 0});
  o.max_connections = 3;
  auto server = GrpcServer::Start(o, {});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  const int port = (*server)->port(0);
  HealthClient health(port);  // connection 1 of 3, kept.
  ASSERT_EQ(health.Check(), HealthCheckResponse::SERVING);
  std::vector<int> raw;
  for (int i = 0; i < 3; ++i) raw.push_back(ConnectRaw(port));  // 2 fill it, 1 is refused.
  ASSERT_TRUE(WaitFor([&] { return !(*server)->accepting(); }));
  EXPECT_EQ(health.Check(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ((*server)->listener_stats().refused_full, 1);
  for (int fd : raw) close(fd);  // gRPC sees EOF and closes its side.
  ASSERT_TRUE(WaitFor([&] { return (*server)->accepting(); }));
  EXPECT_EQ(health.Check(), HealthCheckResponse::SERVING);
  HealthClient fresh(port);
  EXPECT_EQ(fresh.Check(), HealthCheckResponse::SERVING);
}

TEST(GrpcLogSink, GrpcLinesOnlyAtDebug_Escaped) {
  InstallGrpcLogSink();
  grpc_init();  // gpr_log drops everything before gRPC is initialized.
  const LogLevel before = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  gpr_log(GPR_ERROR, "%s", "UNKNOWN:No address added out of total 1 resolved\nforged");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  SetLogLevel(LogLevel::kDebug);
  ::testing::internal::CaptureStderr();
  gpr_log(GPR_ERROR, "%s", "UNKNOWN:No address added out of total 1 resolved\nforged");
  const std::string line = ::testing::internal::GetCapturedStderr();
  SetLogLevel(before);
  grpc_shutdown();
  EXPECT_THAT(line, HasSubstr(" D trainlet"));
  EXPECT_THAT(line, HasSubstr("gRPC E "));
  EXPECT_THAT(line, HasSubstr("resolved\\nforged\n"));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

TEST(GrpcServer, ListenAddressesParse) {
  auto a = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
  auto b = ParseListenAddress("0.0.0.0:29400");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "0.0.0.0");
  EXPECT_EQ(b->port, 29400);
  EXPECT_FALSE(ParseListenAddress("host").ok());
  EXPECT_FALSE(ParseListenAddress("host:99999").ok());
}

}  // namespace coordinator_host_test
}  // namespace
}  // namespace trainlet::rendezvous

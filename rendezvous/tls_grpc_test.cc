// Mutual TLS on the coordinator port over real gRPC on 127.0.0.1, with
// certificates generated at test time (testing/test_pki.h): the right
// certificate joins; a certificate from another CA, no certificate, a
// plaintext client or a coordinator certificate for another name is refused
// at the handshake; the token is still checked over TLS.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/testing/test_pki.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;
using testing::TestPki;

v1::JoinRequest Req(const std::string& node, uint64_t inc) {
  v1::JoinRequest r;
  r.mutable_member()->set_node_id(node);
  r.mutable_member()->set_incarnation(inc);
  r.set_job_id("job");
  r.set_protocol_version(kProtocolVersion);
  r.set_rank_hint(-1);
  r.set_local_world_size(1);
  r.set_master_port(29500);
  return r;
}

class TlsGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki);
    auto server = pki_->IssueConfig("coordinator", "ca", {"DNS:localhost", "IP:127.0.0.1"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_tls_ = *server;
    auto client = pki_->IssueConfig("node", "ca", {"DNS:node"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_tls_ = *client;
  }
  void TearDown() override {
    if (host_) host_->Shutdown(absl::ZeroDuration());
  }

  void StartHost(int nnodes, const TlsConfig& tls) {
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
    o.tls = tls;
    auto host = CoordinatorHost::Start(std::move(o));
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    host_->SetServing(true);
    target_ = absl::StrCat("127.0.0.1:", host_->port());
  }

  absl::StatusOr<v1::Assignment> Join(const TlsConfig& tls, const std::string& token = "tok",
                                      const std::string& node = "a",
                                      absl::Duration timeout = absl::Seconds(20)) {
    ClientOptions o;
    o.target = target_;
    o.token = token;
    o.tls = tls;
    CoordinatorClient client(o);
    return client.Join(Req(node, 7), absl::Now() + timeout);
  }

  std::unique_ptr<TestPki> pki_;
  TlsConfig server_tls_;
  TlsConfig client_tls_;
  std::unique_ptr<CoordinatorHost> host_;
  std::string target_;
};

TEST_F(TlsGrpcTest, MutualTls_TwoAgents_Join) {
  StartHost(2, server_tls_);
  absl::StatusOr<v1::Assignment> a, b;
  std::thread other([&] { b = Join(client_tls_, "tok", "b"); });
  a = Join(client_tls_, "tok", "a");
  other.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->world_size(), 2);
  EXPECT_NE(a->node_rank(), b->node_rank());
}

TEST_F(TlsGrpcTest, RightCertificate_WrongToken_IsRejectedByTheCoordinator) {
  StartHost(1, server_tls_);
  absl::StatusOr<v1::Assignment> a = Join(client_tls_, "wrong");
  ASSERT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("--token-file"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, CertificateFromAnotherCa_IsRefusedSayingWhy) {
  StartHost(1, server_tls_);
  auto stranger = pki_->IssueConfig("stranger", "other-ca", {"DNS:stranger"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  TlsConfig tls = *stranger;
  tls.ca_pem = client_tls_.ca_pem;  // it trusts the coordinator; not the other way round.
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::Assignment> a = Join(tls);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated) << a.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "refused at once, not retried";
  EXPECT_THAT(a.status().message(), HasSubstr("client certificate (/CN=stranger) is not accepted"));
  EXPECT_THAT(a.status().message(), HasSubstr("--tls-ca"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, OverlongClientChain_IsRefusedSayingWhy) {
  StartHost(1, server_tls_);
  TlsConfig tls = client_tls_;
  for (size_t i = 0; i <= PeerVerifier::kMaxIntermediates; ++i) tls.cert_pem += tls.ca_pem;
  absl::StatusOr<v1::Assignment> a = Join(tls);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("client certificate chain is too long"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, CoordinatorFromAnotherCa_IsRefusedByTheClient) {
  auto stranger = pki_->IssueConfig("stranger", "other-ca", {"IP:127.0.0.1"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  TlsConfig server = *stranger;
  server.ca_pem = server_tls_.ca_pem;  // it would accept our node.
  StartHost(1, server);
  absl::StatusOr<v1::Assignment> a = Join(client_tls_);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("TLS with the coordinator"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, NoClientCertificate_IsRefused) {
  StartHost(1, server_tls_);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = client_tls_.ca_pem;  // verifies the server, presents nothing.
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(target_, grpc::SslCredentials(ssl)));
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-trainlet-token", "tok");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::JoinResponse response;
  grpc::Status s = stub->Join(&ctx, Req("a", 1), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, PlaintextAgent_IsRefusedByATlsCoordinator_WithAHint) {
  StartHost(1, server_tls_);
  // Its connections are closed before HTTP/2: indistinguishable from a
  // coordinator that is not up yet, so it retries until its deadline.
  absl::StatusOr<v1::Assignment> a = Join(TlsConfig{}, "tok", "a", absl::Seconds(3));
  ASSERT_EQ(a.status().code(), absl::StatusCode::kDeadlineExceeded) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("closes plaintext connections"));
  EXPECT_THAT(a.status().message(), HasSubstr("--tls-cert"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, TlsAgent_IsRefusedByAPlaintextCoordinator) {
  StartHost(1, TlsConfig{});
  absl::StatusOr<v1::Assignment> a = Join(client_tls_);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("uses TLS"));
  EXPECT_EQ(host_->core().GetSnapshot().gathering, 0);
}

TEST_F(TlsGrpcTest, CoordinatorCertificateForAnotherName_NeedsServerName) {
  auto named = pki_->IssueConfig("named", "ca", {"DNS:job-node-0-0.job"});
  ASSERT_TRUE(named.ok()) << named.status();
  StartHost(1, *named);
  absl::StatusOr<v1::Assignment> refused = Join(client_tls_);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--tls-server-name"));
  TlsConfig with_name = client_tls_;
  with_name.server_name = "job-node-0-0.job";
  absl::StatusOr<v1::Assignment> a = Join(with_name);
  ASSERT_TRUE(a.ok()) << a.status();
}

TEST_F(TlsGrpcTest, HealthOnTheTlsCoordinatorPort_NeedsTls) {
  StartHost(1, server_tls_);
  auto check = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(target_, creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&ctx, {}, &response);
  };
  EXPECT_FALSE(check(grpc::InsecureChannelCredentials()).ok());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = client_tls_.ca_pem;
  ssl.pem_private_key = client_tls_.key_pem;
  ssl.pem_cert_chain = client_tls_.cert_pem;
  grpc::Status s = check(grpc::SslCredentials(ssl));
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace trainlet::rendezvous

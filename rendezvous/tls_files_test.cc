#include "rendezvous/tls_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/testing/test_pki.h"

namespace trainlet::rendezvous {
namespace {

using testing::CertFiles;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::TestPki;

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki);
    auto node = pki_->Issue("node", "ca", {"DNS:localhost"});
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *node;
  }
  TlsFiles Files() const {
    return {{node_.cert, "--tls-cert"}, {node_.key, "--tls-key"}, {node_.ca, "--tls-ca"}};
  }

  std::unique_ptr<TestPki> pki_;
  CertFiles node_;
  trainlet::testing::TempRoot scratch_;
};

TEST_F(TlsFilesTest, CertManagerLayout_LoadsWithoutWarnings) {
  std::vector<std::string> warnings;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(Files(), &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enabled());
  EXPECT_THAT(c->cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(c->key_pem, HasSubstr("PRIVATE KEY"));
  EXPECT_THAT(c->ca_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_TRUE(c->server_name.empty());
  EXPECT_THAT(warnings, IsEmpty());
}

TEST_F(TlsFilesTest, MissingFile_NamesFlagAndPath) {
  TlsFiles f = Files();
  f.key.path = scratch_.path() + "/absent.key";
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls-key"));
  EXPECT_THAT(c.status().message(), HasSubstr("absent.key"));
  EXPECT_THAT(c.status().message(), HasSubstr("No such file"));
}

TEST_F(TlsFilesTest, CertFileWithoutCertificate_IsRefused) {
  TlsFiles f = Files();
  f.cert.path = scratch_.Write("tls.crt", "not a certificate\n");
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls-cert"));
  EXPECT_THAT(c.status().message(), HasSubstr("holds no PEM certificate"));
}

TEST_F(TlsFilesTest, KeyGivenAsCa_IsRefused) {
  TlsFiles f = Files();
  f.ca.path = node_.key;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls-ca"));
  EXPECT_THAT(c.status().message(), HasSubstr("CA certificate"));
}

TEST_F(TlsFilesTest, CertificateGivenAsKey_IsRefused) {
  TlsFiles f = Files();
  f.key.path = node_.cert;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls-key"));
  EXPECT_THAT(c.status().message(), HasSubstr("no usable PEM private key"));
}

TEST_F(TlsFilesTest, KeyOfAnotherCertificate_IsRefused) {
  auto other = pki_->Issue("other", "ca", {"DNS:localhost"});
  ASSERT_TRUE(other.ok()) << other.status();
  TlsFiles f = Files();
  f.key.path = other->key;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("is not the private key of the certificate in"));
  EXPECT_THAT(c.status().message(), HasSubstr(node_.cert));
}

TEST_F(TlsFilesTest, CertificateOfAnotherCa_LoadsWithAWarning) {
  auto stranger = pki_->Issue("stranger", "other-ca", {"DNS:localhost"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  TlsFiles f = Files();
  f.cert.path = stranger->cert;
  f.key.path = stranger->key;
  std::vector<std::string> warnings;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("does not verify against the CA in --tls-ca"));
}

TEST_F(TlsFilesTest, OversizedFile_IsRefused) {
  TlsFiles f = Files();
  f.ca.path = scratch_.Write("ca.crt", std::string(kMaxTlsFileBytes + 1, 'x'));
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("larger than"));
}

TEST_F(TlsFilesTest, KeyReadableByOthers_LoadsWithAWarningNamingTheController) {
  ASSERT_EQ(chmod(node_.key.c_str(), 0644), 0);
  TlsFiles f = Files();
  f.owner = "controller";
  std::vector<std::string> warnings;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("the controller's --tls-key " + node_.key));
  EXPECT_THAT(warnings[0], HasSubstr("readable by every user (mode 0644)"));
  EXPECT_THAT(warnings[0], HasSubstr("defaultMode: 0400"));
}

TEST_F(TlsFilesTest, KeyReadableByItsGroupOnly_LoadsWithoutWarnings) {
  // A Secret mounted with fsGroup: 0440, group-readable by design.
  ASSERT_EQ(chmod(node_.key.c_str(), 0440), 0);
  std::vector<std::string> warnings;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(Files(), &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(warnings, IsEmpty());
}

TEST_F(TlsFilesTest, KeyWritableByOthers_IsRefusedNamingTheServer) {
  ASSERT_EQ(chmod(node_.key.c_str(), 0602), 0);
  for (const char* owner : {"controller", "coordinator"}) {
    TlsFiles f = Files();
    f.owner = owner;
    absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
    ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << owner;
    EXPECT_THAT(c.status().message(),
                HasSubstr(absl::StrCat("the ", owner, "'s --tls-key ", node_.key)));
    EXPECT_THAT(c.status().message(), HasSubstr("writable by every user (mode 0602)"));
  }
}

TEST_F(TlsFilesTest, KeyModeFollowsTheSecretsSymlink) {
  // A mounted Secret: tls.key -> ..data/tls.key; the file's mode counts.
  ASSERT_EQ(chmod(node_.key.c_str(), 0666), 0);
  const std::string link = scratch_.path() + "/tls.key";
  ASSERT_EQ(symlink(node_.key.c_str(), link.c_str()), 0);
  TlsFiles f = Files();
  f.key.path = link;
  absl::StatusOr<TlsConfig> c = LoadTlsFiles(f, nullptr);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("writable by every user (mode 0666)"));
}

std::string ReadAll(const std::string& path) {
  std::string data;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return data;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
  std::fclose(f);
  return data;
}

TEST_F(TlsFilesTest, PeerVerifier_AcceptsTheCasCertificatesOnly) {
  auto verifier = PeerVerifier::Create(ReadAll(node_.ca));
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string good = ReadAll(node_.cert);
  EXPECT_TRUE((*verifier)->Verify(good, "").ok());
  EXPECT_TRUE((*verifier)->Verify(good, "").ok()) << "remembered";

  auto stranger = pki_->Issue("stranger", "other-ca", {"DNS:localhost"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::Status refused = (*verifier)->Verify(ReadAll(stranger->cert), "");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(), HasSubstr("(/CN=stranger) is not accepted"));
  EXPECT_THAT(refused.message(), HasSubstr("local issuer"));

  absl::Status none = (*verifier)->Verify("", "");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(), HasSubstr("no client certificate"));
  EXPECT_EQ((*verifier)->Verify("garbage", "").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(PeerVerifier::Create("no certificate").ok());
}

TEST_F(TlsFilesTest, PeerVerifier_RefusedChain_IsRememberedBriefly) {
  SimulatedClock clock(absl::Now());
  auto verifier = PeerVerifier::Create(ReadAll(node_.ca), &clock);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  auto stranger = pki_->Issue("stranger", "other-ca", {"DNS:localhost"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  const std::string leaf = ReadAll(stranger->cert);
  const std::string chain = ReadAll(stranger->ca);
  for (int i = 0; i < 3; ++i) {
    absl::Status refused = (*verifier)->Verify(leaf, chain);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(refused.message(), HasSubstr("(/CN=stranger) is not accepted"));
  }
  EXPECT_EQ((*verifier)->verifications(), 1) << "a repeated refused chain is a lookup";
  clock.Advance(PeerVerifier::kRejectionTtl + absl::Seconds(1));
  EXPECT_EQ((*verifier)->Verify(leaf, chain).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*verifier)->verifications(), 2) << "verified again after the TTL";
}

TEST_F(TlsFilesTest, PeerVerifier_LongChain_IsRefusedBeforeParsing) {
  auto verifier = PeerVerifier::Create(ReadAll(node_.ca));
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string good = ReadAll(node_.cert);
  std::string chain;
  for (size_t i = 0; i < PeerVerifier::kMaxIntermediates; ++i) chain += ReadAll(node_.ca);
  EXPECT_TRUE((*verifier)->Verify(good, chain).ok()) << "at the limit";
  chain += ReadAll(node_.ca);
  absl::Status refused = (*verifier)->Verify(good, chain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(), HasSubstr("chain is too long (6 PEM blocks"));
  refused = (*verifier)->Verify(good, std::string(PeerVerifier::kMaxChainBytes, '#'));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(), HasSubstr("too long"));
  EXPECT_EQ((*verifier)->verifications(), 1) << "only the chain within the limits was parsed";
  // gRPC may list the leaf again at the head of the chain: not counted twice.
  EXPECT_TRUE((*verifier)->Verify(good, good + ReadAll(node_.ca)).ok());
}

TEST_F(TlsFilesTest, PeerVerifier_CachesAreBounded_AndRefusalsDoNotEvictAcceptances) {
  SimulatedClock clock(absl::Now());
  auto verifier = PeerVerifier::Create(ReadAll(node_.ca), &clock, /*max_remembered=*/4);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string good = ReadAll(node_.cert);
  ASSERT_TRUE((*verifier)->Verify(good, "").ok());
  auto stranger = pki_->Issue("stranger", "other-ca", {"DNS:localhost"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  const std::string bad = ReadAll(stranger->cert);
  for (int i = 0; i < 50; ++i) {
    // Text outside PEM blocks is ignored by OpenSSL but changes the key.
    EXPECT_FALSE((*verifier)->Verify(bad, absl::StrCat("variant ", i)).ok());
    EXPECT_LE((*verifier)->remembered(), 1u + 4u);
  }
  const int64_t before = (*verifier)->verifications();
  EXPECT_TRUE((*verifier)->Verify(good, "").ok());
  EXPECT_EQ((*verifier)->verifications(), before) << "the acceptance is still remembered";
}

TEST_F(TlsFilesTest, PeerVerifier_Acceptance_LastsUntilTheChainsFirstExpiry) {
  ASSERT_TRUE(pki_->IssueCa("short-inter", "ca", /*days=*/1).ok());
  auto leaf = pki_->Issue("via-short", "short-inter", {"DNS:localhost"});  // valid 2 days
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  SimulatedClock clock(absl::Now());  // after the certificates' notBefore
  auto verifier = PeerVerifier::Create(ReadAll(node_.ca), &clock);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string cert = ReadAll(leaf->cert);
  const std::string chain = ReadAll(leaf->ca);  // the intermediate
  ASSERT_TRUE((*verifier)->Verify(cert, chain).ok()) << (*verifier)->Verify(cert, chain);
  clock.Advance(absl::Hours(36));  // the intermediate has expired, the leaf has not
  absl::Status refused = (*verifier)->Verify(cert, chain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(), HasSubstr("expired"));
}

}  // namespace
}  // namespace trainlet::rendezvous

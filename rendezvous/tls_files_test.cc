#include "rendezvous/tls_files.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace trainlet::rendezvous

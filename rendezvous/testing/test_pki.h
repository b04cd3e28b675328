// Certificates for TLS tests, generated at test time with the openssl
// command line into a temporary directory (removed by the destructor): no
// key is ever committed. Two independent CAs; certificates are ECDSA P-256,
// valid for two days, usable for server and client authentication, like a
// cert-manager Certificate with both usages.
//
// Test-only; thread-compatible.
#ifndef TRAINLET_RENDEZVOUS_TESTING_TEST_PKI_H_
#define TRAINLET_RENDEZVOUS_TESTING_TEST_PKI_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/testing/temp_root.h"
#include "rendezvous/tls_files.h"

namespace trainlet::rendezvous::testing {

// One certificate's files, in cert-manager's layout (<dir>/tls.crt,
// <dir>/tls.key, <dir>/ca.crt with the issuing CA).
struct CertFiles {
  std::string dir;
  std::string cert;
  std::string key;
  std::string ca;
  TlsFiles files() const;  // origins "tls.crt", "tls.key", "ca.crt".
};

class TestPki {
 public:
  // Creates CAs "ca" and "other-ca" (an error when openssl fails).
  static absl::StatusOr<std::unique_ptr<TestPki>> Create();

  // A certificate signed by `ca` ("ca" or "other-ca") with these subject
  // alternative names ("DNS:localhost", "IP:127.0.0.1"), in <root>/<name>/.
  absl::StatusOr<CertFiles> Issue(const std::string& name, const std::string& ca,
                                  const std::vector<std::string>& sans);
  // An intermediate CA `name` signed by `ca`, valid for `days`, usable as
  // Issue()'s `ca`; its certificate in <root>/<name>/ca.crt.
  absl::Status IssueCa(const std::string& name, const std::string& ca, int days);
  // The loaded material of Issue(), for in-process servers and clients.
  absl::StatusOr<TlsConfig> IssueConfig(const std::string& name, const std::string& ca,
                                        const std::vector<std::string>& sans);

  const std::string& root() const { return root_.path(); }

 private:
  TestPki() = default;
  absl::Status NewCa(const std::string& name);
  trainlet::testing::TempRoot root_;
};

}  // namespace trainlet::rendezvous::testing

#endif  // TRAINLET_RENDEZVOUS_TESTING_TEST_PKI_H_

// Mutual TLS material for the coordinator port: this side's certificate and
// key, and the CA bundle that verifies the peer, read from cert-manager style
// Secret files (tls.crt, tls.key, ca.crt) and checked with OpenSSL before any
// socket exists, so that a wrong file is a clear error at start rather than a
// handshake failure later.
//
// The server (CoordinatorHost) requires a client certificate in the
// handshake (which proves the client holds its key) and PeerVerifier checks
// that it chains to the CA before any rendezvous call runs, so that a
// refused node gets a gRPC status naming the reason rather than a closed
// connection. The client (CoordinatorClient) verifies the coordinator's
// certificate in the handshake, against the CA and the name it dials (or
// TlsConfig::server_name). Health ports stay plaintext (kubelet gRPC probes
// speak no TLS). docs/security.md is the user copy.
//
// LoadTlsFiles: a function over files, thread-compatible. PeerVerifier:
// thread-safe. No gRPC.
#ifndef TRAINLET_RENDEZVOUS_TLS_FILES_H_
#define TRAINLET_RENDEZVOUS_TLS_FILES_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainlet::rendezvous {

// PEM text as gRPC takes it. Empty cert_pem: plaintext.
struct TlsConfig {
  std::string cert_pem;  // this side's certificate, leaf first, then its chain.
  std::string key_pem;   // its private key.
  std::string ca_pem;    // the CA(s) a peer's certificate must chain to.
  // Client only: the name the coordinator's certificate must carry (a DNS or
  // IP SAN); empty: the host part of the address dialled.
  std::string server_name;
  bool enabled() const { return !cert_pem.empty(); }
};

// One file and the input that named it, for error messages
// ("--tls-cert", "TRAINLET_TLS_CERT").
struct TlsFile {
  std::string path;
  std::string origin;
};

struct TlsFiles {
  TlsFile cert;
  TlsFile key;
  TlsFile ca;
};

// The largest file read (a certificate chain or CA bundle is a few KiB).
inline constexpr size_t kMaxTlsFileBytes = 1 << 20;

// Reads and checks the three files: each readable and at most
// kMaxTlsFileBytes; `cert` holds at least one PEM certificate, `key` a PEM
// private key that matches it, `ca` at least one PEM certificate and nothing
// that is not one. FailedPrecondition naming the origin and path otherwise.
// Appends to `warnings` (one sentence each) what is legal but will likely
// fail later: the certificate expired or not yet valid, or it does not
// verify against `ca` (peers trusting only that CA will refuse it).
absl::StatusOr<TlsConfig> LoadTlsFiles(const TlsFiles& files, std::vector<std::string>* warnings);

// Checks client certificates against a CA bundle, as the handshake would
// (chain, validity dates), and remembers the leaves it accepted until they
// expire, so that a heartbeat costs a map lookup.
class PeerVerifier {
 public:
  // InvalidArgument when `ca_pem` holds no certificate.
  static absl::StatusOr<std::unique_ptr<PeerVerifier>> Create(const std::string& ca_pem);
  ~PeerVerifier();

  // OK when `leaf_pem` (with `intermediates_pem`, the rest of the chain the
  // peer sent, possibly empty) chains to one of the CAs and is valid now.
  // Unauthenticated naming the reason ("no client certificate", OpenSSL's
  // verification error and the certificate's subject) otherwise.
  absl::Status Verify(const std::string& leaf_pem, const std::string& intermediates_pem);

 private:
  struct Roots;
  explicit PeerVerifier(std::unique_ptr<Roots> roots);
  static constexpr size_t kMaxRemembered = 4096;

  const std::unique_ptr<Roots> roots_;
  absl::Mutex mu_;
  // Accepted leaf PEM -> its notAfter.
  std::map<std::string, absl::Time> accepted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TLS_FILES_H_

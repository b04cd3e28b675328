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

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

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
  // The server that loads them, named in every message ("controller":
  // "the controller's --tls-key ..."); empty: the flags alone.
  std::string owner;
};

// The largest file read (a certificate chain or CA bundle is a few KiB).
inline constexpr size_t kMaxTlsFileBytes = 1 << 20;

// Reads and checks the three files: each readable and at most
// kMaxTlsFileBytes; `cert` holds at least one PEM certificate, `key` a PEM
// private key that matches it, `ca` at least one PEM certificate and nothing
// that is not one. FailedPrecondition naming the origin and path otherwise,
// and when `key` is writable by other users (S_IWOTH: anyone on the host
// could swap in their own key). Appends to `warnings` (one sentence each)
// what is legal but unsafe or will likely fail later: `key` readable by
// other users (S_IROTH; the group bits are left alone, as fsGroup sets
// them), the certificate expired or not yet valid, or it does not verify
// against `ca` (peers trusting only that CA will refuse it).
absl::StatusOr<TlsConfig> LoadTlsFiles(const TlsFiles& files, std::vector<std::string>* warnings);

// Checks client certificates against a CA bundle, as the handshake would
// (chain, validity dates, client purpose), and remembers the outcome so that
// a heartbeat costs a hash and a map lookup: an accepted chain until the
// earliest notAfter in its verified chain, a refused one for
// kRejectionTtl. The handshake does not verify the client's chain (so that a
// refused node gets a status naming the reason), so anyone who reaches the
// port can present one: what it costs is bounded. A chain of more than
// kMaxIntermediates certificates after the leaf, or more than kMaxChainBytes
// of PEM, is refused before it is parsed; verification stops at that depth;
// each of the two caches holds at most `max_remembered` entries (expired ones
// are dropped first, then the whole cache when it is still full).
class PeerVerifier {
 public:
  static constexpr size_t kMaxIntermediates = 4;
  static constexpr size_t kMaxChainBytes = 16 * 1024;
  static constexpr size_t kMaxRemembered = 4096;
  static constexpr absl::Duration kRejectionTtl = absl::Seconds(30);

  // InvalidArgument when `ca_pem` holds no certificate. `clock` (wall time:
  // certificate dates are) must outlive the verifier. `server` names the
  // refusing side in messages ("coordinator", "controller").
  static absl::StatusOr<std::unique_ptr<PeerVerifier>> Create(
      const std::string& ca_pem, Clock* clock = Clock::Real(),
      size_t max_remembered = kMaxRemembered, absl::string_view server = "coordinator");
  ~PeerVerifier();

  // OK when `leaf_pem` (with `intermediates_pem`, the rest of the chain the
  // peer sent, possibly empty) chains to one of the CAs and is valid now.
  // Unauthenticated naming the reason ("no client certificate", a chain over
  // the limits, OpenSSL's verification error and the certificate's subject)
  // otherwise.
  absl::Status Verify(const std::string& leaf_pem, const std::string& intermediates_pem);

  // Chains parsed and verified with OpenSSL so far (calls the caches and the
  // limits did not answer).
  int64_t verifications() const;
  // Entries in the accept and reject caches.
  size_t remembered() const;

 private:
  struct Roots;
  struct Outcome {
    absl::Status status;
    absl::Time until;
  };
  using Cache = std::map<std::string, Outcome>;  // SHA-256 of leaf and chain.
  PeerVerifier(std::unique_ptr<Roots> roots, Clock* clock, size_t max_remembered,
               absl::string_view server);
  // Verifies with OpenSSL; sets *until to the time the outcome may be reused.
  absl::Status VerifyChain(const std::string& leaf_pem, const std::string& intermediates_pem,
                           absl::Time now, absl::Time* until);
  // Makes room for one more entry in `cache`.
  void Evict(Cache* cache, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<Roots> roots_;
  Clock* const clock_;
  const size_t max_remembered_;
  const std::string server_;
  mutable absl::Mutex mu_;
  Cache accepted_ ABSL_GUARDED_BY(mu_);
  Cache rejected_ ABSL_GUARDED_BY(mu_);
  int64_t verifications_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TLS_FILES_H_

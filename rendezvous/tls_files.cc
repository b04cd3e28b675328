#include "rendezvous/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_free(s); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

std::string Named(const TlsFile& f) { return absl::StrCat(f.origin, " ", SafeForLog(f.path, 256)); }

// OpenSSL's first queued error as text (its queue is per thread and shared
// with gRPC: always left empty).
std::string OpenSslError() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::string> ReadFile(const TlsFile& f) {
  if (f.path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(f.origin, ": empty path"));
  }
  std::FILE* file = std::fopen(f.path.c_str(), "rb");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: cannot read %s: %s (a mounted Secret's file must exist and be "
                        "readable by this process)",
                        f.origin, SafeForLog(f.path, 256), std::strerror(errno)));
  }
  std::string data;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0 && data.size() <= kMaxTlsFileBytes) {
    data.append(buf, n);
  }
  const bool read_error = std::ferror(file) != 0;
  const int saved_errno = errno;
  std::fclose(file);
  if (read_error) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: cannot read %s: %s", f.origin, SafeForLog(f.path, 256), std::strerror(saved_errno)));
  }
  if (data.size() > kMaxTlsFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %s is larger than %d bytes; expected a PEM file", f.origin,
                        SafeForLog(f.path, 256), kMaxTlsFileBytes));
  }
  return data;
}

// Every PEM certificate in `pem`, in order; an empty result when there is none.
std::vector<X509Ptr> ReadCertificates(const std::string& pem) {
  std::vector<X509Ptr> certs;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the end of the input reads as an error.
  return certs;
}

// Refuses to prompt for a passphrase: an encrypted key fails to load.
int NoPassphrase(char*, int, int, void*) { return -1; }

std::string Asn1Time(const ASN1_TIME* t) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Why `leaf` (with `chain` as untrusted intermediates) does not verify
// against `roots`; empty when it does. Validity dates are checked apart.
std::string VerifyError(X509* leaf, const std::vector<X509Ptr>& chain,
                        const std::vector<X509Ptr>& roots) {
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  if (!store || !ctx || !untrusted) return "out of memory";
  for (const X509Ptr& r : roots) X509_STORE_add_cert(store.get(), r.get());
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted.get(), chain[i].get());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) != 1) {
    return OpenSslError();
  }
  X509_STORE_CTX_set_flags(ctx.get(), X509_V_FLAG_NO_CHECK_TIME);
  const int ok = X509_verify_cert(ctx.get());
  std::string why =
      ok == 1 ? "" : X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  ERR_clear_error();
  return why;
}

// The certificate's subject, one line, for messages.
std::string Subject(X509* x) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof(buf));
  return SafeForLog(buf, 200);
}

}  // namespace

struct PeerVerifier::Roots {
  std::vector<X509Ptr> certs;
};

PeerVerifier::PeerVerifier(std::unique_ptr<Roots> roots) : roots_(std::move(roots)) {}
PeerVerifier::~PeerVerifier() = default;

absl::StatusOr<std::unique_ptr<PeerVerifier>> PeerVerifier::Create(const std::string& ca_pem) {
  auto roots = std::make_unique<Roots>();
  roots->certs = ReadCertificates(ca_pem);
  if (roots->certs.empty()) {
    return absl::InvalidArgumentError("the CA bundle holds no PEM certificate");
  }
  return std::unique_ptr<PeerVerifier>(new PeerVerifier(std::move(roots)));
}

absl::Status PeerVerifier::Verify(const std::string& leaf_pem,
                                  const std::string& intermediates_pem) {
  if (leaf_pem.empty()) {
    return absl::UnauthenticatedError(
        "no client certificate: this coordinator uses mutual TLS; give every agent --tls-cert, "
        "--tls-key and --tls-ca");
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = accepted_.find(leaf_pem);
    if (it != accepted_.end()) {
      if (absl::Now() < it->second) return absl::OkStatus();
      accepted_.erase(it);
    }
  }
  std::vector<X509Ptr> chain = ReadCertificates(leaf_pem);
  if (chain.empty()) {
    return absl::UnauthenticatedError("the client certificate is not a PEM certificate");
  }
  for (X509Ptr& x : ReadCertificates(intermediates_pem)) chain.push_back(std::move(x));
  X509* leaf = chain.front().get();
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  if (!store || !ctx || !untrusted) return absl::ResourceExhaustedError("out of memory");
  for (const X509Ptr& r : roots_->certs) X509_STORE_add_cert(store.get(), r.get());
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted.get(), chain[i].get());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) != 1) {
    return absl::InternalError(absl::StrCat("cannot verify a certificate: ", OpenSslError()));
  }
  // As the handshake would for a TLS client certificate.
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  const bool ok = X509_verify_cert(ctx.get()) == 1;
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  if (!ok) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the client certificate (", Subject(leaf),
        ") is not accepted: ", X509_verify_cert_error_string(error),
        "; --tls-cert must be signed by a CA in the coordinator's --tls-ca, and be valid now"));
  }
  // Remember it until it expires.
  struct tm not_after_tm = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(leaf), &not_after_tm) == 1) {
    const absl::Time not_after = absl::FromTM(not_after_tm, absl::UTCTimeZone());
    absl::MutexLock lock(&mu_);
    if (accepted_.size() >= kMaxRemembered) accepted_.clear();
    accepted_.emplace(leaf_pem, not_after);
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsConfig> LoadTlsFiles(const TlsFiles& files, std::vector<std::string>* warnings) {
  ERR_clear_error();
  TlsConfig out;
  absl::StatusOr<std::string> cert = ReadFile(files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(files.key);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadFile(files.ca);
  if (!ca.ok()) return ca.status();

  std::vector<X509Ptr> chain = ReadCertificates(*cert);
  if (chain.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Named(files.cert),
                     " holds no PEM certificate (expected -----BEGIN CERTIFICATE-----, as in a "
                     "cert-manager Secret's tls.crt)"));
  }
  std::vector<X509Ptr> roots = ReadCertificates(*ca);
  if (roots.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Named(files.ca),
                     " holds no PEM certificate (expected the CA certificate, as in a cert-manager "
                     "Secret's ca.crt)"));
  }
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey;
  {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(key->data(), static_cast<int>(key->size())));
    if (bio) pkey.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, &NoPassphrase, nullptr));
  }
  if (!pkey) {
    return absl::FailedPreconditionError(
        absl::StrCat(Named(files.key),
                     " holds no usable PEM private key (expected an unencrypted "
                     "-----BEGIN ... PRIVATE KEY-----, as in a cert-manager Secret's tls.key): ",
                     OpenSslError()));
  }
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, pkey.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(
        absl::StrCat(Named(files.key), " is not the private key of the certificate in ",
                     Named(files.cert), " (mount tls.crt and tls.key of the same Secret)"));
  }

  if (warnings != nullptr) {
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
      warnings->push_back(absl::StrCat("the certificate in ", Named(files.cert), " expired on ",
                                       Asn1Time(X509_get0_notAfter(leaf)),
                                       "; peers will refuse it until it is renewed"));
    } else if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
      warnings->push_back(absl::StrCat("the certificate in ", Named(files.cert),
                                       " is not valid before ", Asn1Time(X509_get0_notBefore(leaf)),
                                       "; peers will refuse it until then (check the clock)"));
    }
    if (std::string why = VerifyError(leaf, chain, roots); !why.empty()) {
      warnings->push_back(absl::StrCat(
          "the certificate in ", Named(files.cert), " does not verify against the CA in ",
          Named(files.ca), " (", why,
          "); peers that trust only that CA will refuse this one (mount tls.crt and ca.crt of "
          "Secrets from the same issuer)"));
    }
  }
  ERR_clear_error();
  out.cert_pem = *std::move(cert);
  out.key_pem = *std::move(key);
  out.ca_pem = *std::move(ca);
  return out;
}

}  // namespace trainlet::rendezvous

#include "rendezvous/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "rendezvous/token.h"

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

// "the controller's --tls-key /etc/tls/tls.key", or without an owner
// "--tls-key /etc/tls/tls.key".
std::string OwnedName(const TlsFiles& files, const TlsFile& f) {
  return files.owner.empty() ? Named(f) : absl::StrCat("the ", files.owner, "'s ", Named(f));
}

// The private key's permission bits: writable by other users is refused
// (anyone on the host could put their own key in the server's place);
// readable by them is a warning (it works, but the key is out). Group
// access is left alone: a Kubernetes Secret mounted with fsGroup is
// group-readable by design.
absl::Status CheckKeyMode(const TlsFiles& files, mode_t mode, std::vector<std::string>* warnings) {
  const std::string perms = absl::StrFormat("%04o", mode & 07777);
  if ((mode & S_IWOTH) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        OwnedName(files, files.key), " is writable by every user (mode ", perms,
        "): anyone on this host could replace the private key; make it 0600 (chmod go-w), or "
        "mount its Secret with defaultMode: 0400"));
  }
  if ((mode & S_IROTH) != 0 && warnings != nullptr) {
    warnings->push_back(absl::StrCat(
        OwnedName(files, files.key), " is readable by every user (mode ", perms,
        "): anyone on this host can read the private key; make it 0600 (chmod o-r), or mount its "
        "Secret with defaultMode: 0400 (0440 with fsGroup)"));
  }
  return absl::OkStatus();
}

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

// A file's bytes and permission bits (of the file read, after symlinks:
// a mounted Secret's files are symlinks into its ..data directory).
struct FileContents {
  std::string data;
  mode_t mode = 0;
};

absl::StatusOr<FileContents> ReadFile(const TlsFiles& files, const TlsFile& f) {
  const std::string who =
      files.owner.empty() ? f.origin : absl::StrCat("the ", files.owner, "'s ", f.origin);
  if (f.path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(who, ": empty path"));
  }
  FileContents out;
  unsigned mode = 0;
  absl::StatusOr<std::string> data = ReadBoundedFile(f.path, kMaxTlsFileBytes, who, "", &mode);
  if (!data.ok()) return data.status();
  out.data = *std::move(data);
  out.mode = static_cast<mode_t>(mode);
  return out;
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

PeerVerifier::PeerVerifier(std::unique_ptr<Roots> roots, Clock* clock, size_t max_remembered,
                           absl::string_view server)
    : roots_(std::move(roots)),
      clock_(clock),
      max_remembered_(std::max<size_t>(1, max_remembered)),
      server_(server) {}
PeerVerifier::~PeerVerifier() = default;

absl::StatusOr<std::unique_ptr<PeerVerifier>> PeerVerifier::Create(const std::string& ca_pem,
                                                                   Clock* clock,
                                                                   size_t max_remembered,
                                                                   absl::string_view server) {
  auto roots = std::make_unique<Roots>();
  roots->certs = ReadCertificates(ca_pem);
  if (roots->certs.empty()) {
    return absl::InvalidArgumentError("the CA bundle holds no PEM certificate");
  }
  return std::unique_ptr<PeerVerifier>(
      new PeerVerifier(std::move(roots), clock, max_remembered, server));
}

int64_t PeerVerifier::verifications() const {
  absl::MutexLock lock(&mu_);
  return verifications_;
}

size_t PeerVerifier::remembered() const {
  absl::MutexLock lock(&mu_);
  return accepted_.size() + rejected_.size();
}

namespace {

// PEM blocks in `pem` (an upper bound on the certificates it holds).
size_t PemBlocks(absl::string_view pem) {
  size_t n = 0;
  for (size_t at = pem.find("-----BEGIN "); at != absl::string_view::npos;
       at = pem.find("-----BEGIN ", at + 1)) {
    ++n;
  }
  return n;
}

std::string Sha256(const std::string& leaf_pem, const std::string& intermediates_pem) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  const uint64_t leaf_size = leaf_pem.size();  // so that the split point is part of the key.
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), &leaf_size, sizeof(leaf_size)) != 1 ||
      EVP_DigestUpdate(ctx.get(), leaf_pem.data(), leaf_pem.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), intermediates_pem.data(), intermediates_pem.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &size) != 1) {
    ERR_clear_error();
    return "";
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

absl::Time AsTime(const ASN1_TIME* t) {
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTM(tm, absl::UTCTimeZone());
}

}  // namespace

void PeerVerifier::Evict(Cache* cache, absl::Time now) {
  if (cache->size() < max_remembered_) return;
  for (auto it = cache->begin(); it != cache->end();) {
    it = it->second.until <= now ? cache->erase(it) : std::next(it);
  }
  if (cache->size() >= max_remembered_) cache->clear();
}

absl::Status PeerVerifier::Verify(const std::string& leaf_pem,
                                  const std::string& intermediates_pem) {
  if (leaf_pem.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("no client certificate: this ", server_,
                                                   " uses mutual TLS; give every agent --tls-cert, "
                                                   "--tls-key and --tls-ca"));
  }
  // Limits first, on the text: no parsing of what a stranger sent beyond them.
  // gRPC may list the leaf again at the head of the chain.
  absl::string_view rest = intermediates_pem;
  if (absl::StartsWith(rest, leaf_pem)) rest.remove_prefix(leaf_pem.size());
  const size_t bytes = leaf_pem.size() + rest.size();
  const size_t blocks = PemBlocks(leaf_pem) + PemBlocks(rest);
  if (bytes > kMaxChainBytes || blocks > kMaxIntermediates + 1) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "the client certificate chain is too long (%d PEM blocks, %d bytes; at most %d and %d): "
        "--tls-cert must hold the node's certificate and at most %d intermediate CA certificates",
        blocks, bytes, kMaxIntermediates + 1, kMaxChainBytes, kMaxIntermediates));
  }
  const std::string key = Sha256(leaf_pem, intermediates_pem);
  const absl::Time now = clock_->Now();
  if (!key.empty()) {
    absl::MutexLock lock(&mu_);
    for (Cache* cache : {&accepted_, &rejected_}) {
      auto it = cache->find(key);
      if (it == cache->end()) continue;
      if (now < it->second.until) return it->second.status;
      cache->erase(it);
    }
  }
  absl::Time until = now;
  absl::Status status = VerifyChain(leaf_pem, intermediates_pem, now, &until);
  if (!key.empty() && status.code() != absl::StatusCode::kResourceExhausted &&
      status.code() != absl::StatusCode::kInternal) {
    absl::MutexLock lock(&mu_);
    Cache* cache = status.ok() ? &accepted_ : &rejected_;
    if (now < until) {
      Evict(cache, now);
      (*cache)[key] = Outcome{status, until};
    }
  }
  return status;
}

absl::Status PeerVerifier::VerifyChain(const std::string& leaf_pem,
                                       const std::string& intermediates_pem, absl::Time now,
                                       absl::Time* until) {
  {
    absl::MutexLock lock(&mu_);
    ++verifications_;
  }
  *until = now + kRejectionTtl;
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
    ERR_clear_error();
    return absl::InternalError("cannot verify a certificate: OpenSSL could not start");
  }
  // As the handshake would for a TLS client certificate, at this verifier's time.
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  X509_STORE_CTX_set_depth(ctx.get(), static_cast<int>(kMaxIntermediates));
  X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(now));
  const bool ok = X509_verify_cert(ctx.get()) == 1;
  const int error = X509_STORE_CTX_get_error(ctx.get());
  if (!ok) {
    ERR_clear_error();
    return absl::UnauthenticatedError(absl::StrCat(
        "the client certificate (", Subject(leaf),
        ") is not accepted: ", X509_verify_cert_error_string(error),
        "; --tls-cert must be signed by a CA in the ", server_, "'s --tls-ca, and be valid now"));
  }
  // Reusable until the first certificate of the verified chain (leaf,
  // intermediates, root) expires.
  absl::Time expiry = absl::InfiniteFuture();
  STACK_OF(X509)* verified = X509_STORE_CTX_get0_chain(ctx.get());
  const int n = verified == nullptr ? 0 : sk_X509_num(verified);
  for (int i = 0; i < n; ++i) {
    expiry = std::min(expiry, AsTime(X509_get0_notAfter(sk_X509_value(verified, i))));
  }
  if (n == 0) expiry = now;  // nothing to go by: verify again next time.
  ERR_clear_error();
  *until = expiry;
  return absl::OkStatus();
}

absl::StatusOr<TlsConfig> LoadTlsFiles(const TlsFiles& files, std::vector<std::string>* warnings) {
  ERR_clear_error();
  TlsConfig out;
  absl::StatusOr<FileContents> cert_file = ReadFile(files, files.cert);
  if (!cert_file.ok()) return cert_file.status();
  absl::StatusOr<FileContents> key_file = ReadFile(files, files.key);
  if (!key_file.ok()) return key_file.status();
  if (absl::Status s = CheckKeyMode(files, key_file->mode, warnings); !s.ok()) return s;
  absl::StatusOr<FileContents> ca_file = ReadFile(files, files.ca);
  if (!ca_file.ok()) return ca_file.status();
  std::string* const cert = &cert_file->data;
  std::string* const key = &key_file->data;
  std::string* const ca = &ca_file->data;

  std::vector<X509Ptr> chain = ReadCertificates(*cert);
  if (chain.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(OwnedName(files, files.cert),
                     " holds no PEM certificate (expected -----BEGIN CERTIFICATE-----, as in a "
                     "cert-manager Secret's tls.crt)"));
  }
  std::vector<X509Ptr> roots = ReadCertificates(*ca);
  if (roots.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(OwnedName(files, files.ca),
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
        absl::StrCat(OwnedName(files, files.key),
                     " holds no usable PEM private key (expected an unencrypted "
                     "-----BEGIN ... PRIVATE KEY-----, as in a cert-manager Secret's tls.key): ",
                     OpenSslError()));
  }
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, pkey.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(absl::StrCat(
        OwnedName(files, files.key), " is not the private key of the certificate in ",
        OwnedName(files, files.cert), " (mount tls.crt and tls.key of the same Secret)"));
  }

  if (warnings != nullptr) {
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
      warnings->push_back(absl::StrCat("the certificate in ", OwnedName(files, files.cert),
                                       " expired on ", Asn1Time(X509_get0_notAfter(leaf)),
                                       "; peers will refuse it until it is renewed"));
    } else if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
      warnings->push_back(absl::StrCat("the certificate in ", OwnedName(files, files.cert),
                                       " is not valid before ", Asn1Time(X509_get0_notBefore(leaf)),
                                       "; peers will refuse it until then (check the clock)"));
    }
    if (std::string why = VerifyError(leaf, chain, roots); !why.empty()) {
      warnings->push_back(absl::StrCat(
          "the certificate in ", OwnedName(files, files.cert),
          " does not verify against the CA in ", OwnedName(files, files.ca), " (", why,
          "); peers that trust only that CA will refuse this one (mount tls.crt and ca.crt of "
          "Secrets from the same issuer)"));
    }
  }
  ERR_clear_error();
  out.cert_pem = std::move(*cert);
  out.key_pem = std::move(*key);
  out.ca_pem = std::move(*ca);
  return out;
}

}  // namespace trainlet::rendezvous

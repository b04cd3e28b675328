#include "rendezvous/grpc_auth.h"

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "rendezvous/token.h"

namespace trainlet::rendezvous {
namespace {

// The peer's PEM certificate and the rest of the chain it sent, from the
// TLS handshake (empty without TLS or without a client certificate).
void PeerCertificates(const grpc::ServerContextBase& ctx, std::string* leaf,
                      std::string* intermediates) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return;
  for (const grpc::string_ref& v : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
    leaf->assign(v.data(), v.size());
  }
  for (const grpc::string_ref& v :
       auth->FindPropertyValues(GRPC_X509_PEM_CERT_CHAIN_PROPERTY_NAME)) {
    intermediates->append(v.data(), v.size());
  }
}

}  // namespace

absl::Status CheckCaller(const grpc::ServerContextBase& ctx, const std::string& token,
                         PeerVerifier* peers, absl::string_view server) {
  if (peers != nullptr) {
    std::string leaf, intermediates;
    PeerCertificates(ctx, &leaf, &intermediates);
    if (absl::Status s = peers->Verify(leaf, intermediates); !s.ok()) return s;
  }
  if (token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "no job token: this ", server, " requires one; give every agent the same --token-file"));
  }
  if (!ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), token)) {
    return absl::UnauthenticatedError(
        "wrong job token: check that every agent reads the same --token-file");
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsConfig& tls,
                                                            grpc::ChannelArguments* args) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_private_key = tls.key_pem;
  ssl.pem_cert_chain = tls.cert_pem;
  // The name the server's certificate must carry, when it is not the host
  // dialled (an IP address, or node 0 dialling itself on loopback).
  if (!tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

}  // namespace trainlet::rendezvous

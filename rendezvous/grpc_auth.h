// Authentication at the gRPC edge, shared by every trainlet service and
// client (the coordinator's Rendezvous, the controller's Controller, and
// their clients): the per-job token in metadata (kTokenMetadataKey,
// compared in constant time) and, with mutual TLS, the client certificate
// checked against the CA (PeerVerifier, tls_files.h) on the server side, and
// the TLS channel credentials on the client side.
//
// Threading: functions; thread-safe when `peers` is.
#ifndef TRAINLET_RENDEZVOUS_GRPC_AUTH_H_
#define TRAINLET_RENDEZVOUS_GRPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rendezvous/tls_files.h"

namespace trainlet::rendezvous {

// The metadata key that carries the job token.
inline constexpr char kTokenMetadataKey[] = "x-trainlet-token";

// OK when the caller of `ctx` may call: its client certificate chains to
// the CA (when `peers` is not null), then it sent `token` (when not empty).
// Unauthenticated naming the reason otherwise; `server` names the refusing
// side in the message ("coordinator", "controller").
absl::Status CheckCaller(const grpc::ServerContextBase& ctx, const std::string& token,
                         PeerVerifier* peers, absl::string_view server);

// Channel credentials for `tls` (insecure when it is disabled); sets the
// TLS target name override in `args` when tls.server_name is set.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsConfig& tls,
                                                            grpc::ChannelArguments* args);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_AUTH_H_

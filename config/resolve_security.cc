// ResolveSecurity (run_resolvers.h): the job's token and TLS material.
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "config/run_resolvers.h"

namespace trainlet::agent {
namespace {

std::string UnderRoot(absl::string_view root, absl::string_view path) {
  while (absl::ConsumeSuffix(&root, "/")) {
  }
  return absl::StrCat(root, path);
}

// In Kubernetes, the token Secret mounted at kKubernetesTokenPath, if any.
absl::Status ReadKubernetesSecretToken(const SystemInfo& sys, RunConfig* c) {
  std::string path = UnderRoot(sys.root, kKubernetesTokenPath);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
    return absl::OkStatus();  // No Secret mounted.
  }
  absl::StatusOr<std::string> token =
      ReadTokenFile(OptionValue{path, "the Kubernetes token Secret", ValueSource::kDiscovery});
  if (!token.ok()) return token.status();
  c->token_file = kKubernetesTokenPath;
  c->token = *std::move(token);
  c->discovery_notes.push_back(
      absl::StrCat("token from ", kKubernetesTokenPath, " (Kubernetes Secret)"));
  return absl::OkStatus();
}

std::string NoTokenWarning(const RunConfig& c) {
  std::string where = c.host_coordinator == HostCoordinator::kNo
                          ? JoinHostPort(c.coordinator_host, c.coordinator_port)
                          : absl::StrCat("port ", c.coordinator_port, " on ", c.bind_addr);
  return absl::StrCat(
      "no token: this multi-node job is unauthenticated, so anyone who can reach the "
      "coordinator (",
      where,
      ") can join the job, take a rank, and make every node stop or restart; give every node "
      "the same secret with --token-file=PATH (TRAINLET_TOKEN_FILE), or in Kubernetes mount a "
      "Secret so that it appears at ",
      kKubernetesTokenPath);
}

}  // namespace

absl::Status ResolveSecurity(RunInputs* in, RunConfig* c) {
  // A token file, else (Kubernetes) the token Secret.
  if (const OptionValue* token_file = in->parsed.Find("token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(*token_file);
    if (!token.ok()) return token.status();
    c->token_file = token_file->text;
    c->token = *std::move(token);
  } else if (in->k8s.in_kubernetes) {
    if (absl::Status s = ReadKubernetesSecretToken(in->sys, c); !s.ok()) return s;
  }
  absl::StatusOr<rendezvous::TlsConfig> tls = ParseTlsOptions(in->parsed, &c->warnings);
  if (!tls.ok()) return tls.status();
  c->tls = *std::move(tls);
  if (in->multi_node && c->token.empty()) c->warnings.push_back(NoTokenWarning(*c));
  return absl::OkStatus();
}

}  // namespace trainlet::agent

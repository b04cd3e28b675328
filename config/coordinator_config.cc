#include "config/coordinator_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kCoordinatorUsage = "trainlet coordinator [OPTIONS]";
constexpr absl::string_view kCoordinatorDescription =
    "Runs a standalone rendezvous coordinator: agents started with\n"
    "--coordinator=HOST:PORT join it, and it assigns ranks, watches heartbeats and\n"
    "tells every agent when to stop, restart or finish. See docs/configuration.md.";

}  // namespace

const std::vector<OptionSpec>& CoordinatorOptionTable() {
  static const std::vector<OptionSpec>* table = [] {
    auto* t = new std::vector<OptionSpec>{
        {"port", OptionKind::kInt, "PORT", absl::StrCat(kDefaultCoordinatorPort),
         "Port to listen on, 1..65535."},
        {"bind-addr", OptionKind::kString, "ADDR", "0.0.0.0",
         "Address to listen on; :: or [::] for IPv6."},
        {"nnodes", OptionKind::kString, "N|MIN:MAX", "1",
         "Number of nodes, or MIN:MAX for an elastic job."},
        {"job-id", OptionKind::kString, "ID", "trainlet",
         "Job id, [A-Za-z0-9._-]{1,128}; agents with another id are refused."},
        {"token-file", OptionKind::kString, "PATH", "",
         "File holding the job's shared secret (trailing whitespace ignored); none: no "
         "authentication."},
        {"health-port", OptionKind::kInt, "PORT", "0 (none)",
         "Plaintext gRPC health port (grpc.health.v1) for kubelet probes; with TLS the "
         "coordinator port answers health to any TLS client with a certificate (its chain is "
         "not checked), which kubelet probes cannot be."},
    };
    for (OptionSpec& spec : TlsOptionSpecs(/*client=*/false)) t->push_back(std::move(spec));
    for (OptionSpec& spec : RoundPolicyOptionSpecs()) t->push_back(std::move(spec));
    return t;
  }();
  return *table;
}

std::string CoordinatorHelpText() {
  return HelpText(kCoordinatorUsage, kCoordinatorDescription, CoordinatorOptionTable(), false);
}

absl::StatusOr<CoordinatorConfig> ParseCoordinatorConfig(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  const std::vector<OptionSpec>& table = CoordinatorOptionTable();
  absl::StatusOr<ParsedOptions> parsed_or = ParseOptions(table, args, env, kCoordinatorUsage);
  if (!parsed_or.ok()) return parsed_or.status();
  const ParsedOptions& parsed = *parsed_or;
  CoordinatorConfig c;
  if (parsed.help_requested) {
    c.help_requested = true;
    return c;
  }
  if (parsed.saw_separator) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the coordinator runs no COMMAND; remove -- and what follows; usage: ", kCoordinatorUsage));
  }

  absl::StatusOr<int> port = ParseIntValue(ValueOrDefault(parsed, table, "port"), 1, 65535);
  if (!port.ok()) return port.status();
  c.port = *port;
  absl::StatusOr<std::string> bind =
      ParseIpAddressValue(ValueOrDefault(parsed, table, "bind-addr"));
  if (!bind.ok()) return bind.status();
  c.bind_addr = *bind;
  absl::StatusOr<NnodesRange> nnodes = ParseNnodesValue(ValueOrDefault(parsed, table, "nnodes"));
  if (!nnodes.ok()) return nnodes.status();
  c.nnodes = *nnodes;
  OptionValue job = ValueOrDefault(parsed, table, "job-id");
  if (absl::Status s = ValidateJobId(job); !s.ok()) return s;
  c.job_id = job.text;
  if (const OptionValue* token_file = parsed.Find("token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(*token_file);
    if (!token.ok()) return token.status();
    c.token_file = token_file->text;
    c.token = *std::move(token);
  }
  absl::StatusOr<rendezvous::TlsConfig> tls = ParseTlsOptions(parsed, &c.warnings, "coordinator");
  if (!tls.ok()) return tls.status();
  c.tls = *std::move(tls);
  if (const OptionValue* health = parsed.Find("health-port")) {
    absl::StatusOr<int> port = ParseIntValue(*health, 0, 65535);
    if (!port.ok()) return port.status();
    if (*port != 0 && *port == c.port) {
      return absl::InvalidArgumentError(
          absl::StrCat(health->origin, ": the health port must differ from --port (", c.port, ")"));
    }
    c.health_port = *port;
  }
  absl::StatusOr<RoundPolicy> policy = ParseRoundPolicy(parsed, table, c.nnodes, std::nullopt);
  if (!policy.ok()) return policy.status();
  c.policy = *policy;
  absl::StatusOr<LogLevel> level = ParseLogLevelValue(ValueOrDefault(parsed, table, "log-level"));
  if (!level.ok()) return level.status();
  c.log_level = *level;
  return c;
}

}  // namespace trainlet::agent

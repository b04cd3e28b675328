#include "cmd/controller_command.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "controller/controller_host.h"
#include "controller/report_limits.h"
#include "launcher/signal_wait.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kControllerUsage = "trainlet controller [OPTIONS]";
constexpr absl::string_view kControllerDescription =
    "Runs the thin controller: agents started with --controller=HOST:PORT report\n"
    "their health and progress to it; it keeps each job's nodes, rounds, restarts\n"
    "with their causes and hang verdicts, with history in SQLite (--db). It is on\n"
    "no job's critical path. See docs/controller.md.";

// [ADDR]:PORT, IPv6 in brackets; an empty ADDR listens on every address.
absl::Status ParseListen(const OptionValue& v, std::string* host, int* port) {
  const size_t colon = v.text.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(v.origin,
                     ": expected [ADDR]:PORT (\":29600\", \"10.0.0.5:29600\", "
                     "\"[::]:29600\"), got \"",
                     SafeForLog(v.text, 64), "\""));
  }
  OptionValue port_value = v;
  port_value.text = v.text.substr(colon + 1);
  absl::StatusOr<int> p = ParseIntValue(port_value, 1, 65535);
  if (!p.ok()) return p.status();
  std::string addr = v.text.substr(0, colon);
  if (addr.empty()) {
    *host = "0.0.0.0";
  } else {
    OptionValue addr_value = v;
    addr_value.text = addr;
    absl::StatusOr<std::string> ip = ParseIpAddressValue(addr_value);
    if (!ip.ok()) return ip.status();
    *host = *ip;
  }
  *port = *p;
  return absl::OkStatus();
}

}  // namespace

const std::vector<OptionSpec>& ControllerOptionTable() {
  static const std::vector<OptionSpec>* table = [] {
    auto* t = new std::vector<OptionSpec>{
        {"listen", OptionKind::kString, "[ADDR]:PORT", ":29600",
         "gRPC address agents report to (and `trainlet status` reads)."},
        {"http", OptionKind::kString, "[ADDR]:PORT", ":29680",
         "The views: status page /, /api/jobs, /metrics, /healthz (read-only)."},
        {"http-token-file", OptionKind::kString, "PATH", "",
         "File holding the token the views want (Authorization: Bearer) on every path but / "
         "and /healthz; may be --token-file's; none: the views need no token."},
        {"http-tls", OptionKind::kString, "off|on|mutual", "off",
         "The views over HTTPS with --tls-cert/--tls-key; mutual: clients also need a "
         "certificate signed by --tls-ca."},
        {"db", OptionKind::kString, "PATH", "",
         "SQLite file for the history (rounds, restarts, hangs); none: memory only, lost at "
         "restart."},
        {"history-retention", OptionKind::kInt, "N", "1000",
         "History entries kept per job in --db (the oldest go first), 1..1000000."},
        {"history-max-age", OptionKind::kDuration, "DURATION", "720h",
         "History entries older than this are dropped from --db; 0: no age limit."},
        {"history-max-jobs", OptionKind::kInt, "N", "1000",
         "Jobs kept in --db (the one heard from longest ago goes first), 1..100000."},
        {"db-required", OptionKind::kBool, "", "false",
         "Exit (78) when --db is damaged, instead of moving it aside and starting with an "
         "empty history."},
        {"stale-after", OptionKind::kDuration, "DURATION", "15s",
         "A node that has not reported for this long (at least 3 report intervals) is "
         "stale."},
        {"token-file", OptionKind::kString, "PATH", "",
         "File holding the token agents send (trailing whitespace ignored), or one per line, "
         "\"jobs=PATTERN[,...] TOKEN\" for one that may write only those jobs; none: no "
         "authentication."},
        {"log-level", OptionKind::kString, "LEVEL", "info", "debug, info, warning or error."},
    };
    for (OptionSpec& spec : TlsOptionSpecs(/*client=*/false)) {
      if (spec.name == "tls-cert") {
        spec.help =
            "This side's certificate (PEM, leaf first; a cert-manager Secret's tls.crt) for "
            "mutual TLS on the controller's --listen port (and the views with --http-tls); needs "
            "--tls-key and --tls-ca. None: plaintext.";
      }
      t->push_back(std::move(spec));
    }
    return t;
  }();
  return *table;
}

std::string ControllerHelpText() {
  return HelpText(kControllerUsage, kControllerDescription, ControllerOptionTable(), false);
}

absl::StatusOr<ControllerConfig> ParseControllerConfig(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  const std::vector<OptionSpec>& table = ControllerOptionTable();
  absl::StatusOr<ParsedOptions> parsed_or = ParseOptions(table, args, env, kControllerUsage);
  if (!parsed_or.ok()) return parsed_or.status();
  const ParsedOptions& parsed = *parsed_or;
  ControllerConfig c;
  if (parsed.help_requested) {
    c.help_requested = true;
    return c;
  }
  if (parsed.saw_separator) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the controller runs no COMMAND; remove -- and what follows; usage: ", kControllerUsage));
  }
  if (absl::Status s =
          ParseListen(ValueOrDefault(parsed, table, "listen"), &c.listen_host, &c.listen_port);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ParseListen(ValueOrDefault(parsed, table, "http"), &c.http_host, &c.http_port);
      !s.ok()) {
    return s;
  }
  if (c.http_port == c.listen_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: its port must differ from --listen's (", c.listen_port, ")"));
  }
  if (const OptionValue* db = parsed.Find("db")) c.db_path = db->text;
  absl::StatusOr<int> retention =
      ParseIntValue(ValueOrDefault(parsed, table, "history-retention"), 1, 1000000);
  if (!retention.ok()) return retention.status();
  c.history_retention = *retention;
  absl::StatusOr<int> max_jobs =
      ParseIntValue(ValueOrDefault(parsed, table, "history-max-jobs"), 1, 100000);
  if (!max_jobs.ok()) return max_jobs.status();
  c.history_max_jobs = *max_jobs;
  absl::StatusOr<bool> db_required = ParseBoolValue(ValueOrDefault(parsed, table, "db-required"));
  if (!db_required.ok()) return db_required.status();
  c.db_required = *db_required;
  if (c.db_required && c.db_path.empty()) {
    return absl::InvalidArgumentError("--db-required: needs --db=PATH (the history database)");
  }
  if (absl::Status s =
          ParseDurationOptions(parsed, table,
                               {{"history-max-age", absl::ZeroDuration(), &c.history_max_age},
                                {"stale-after", absl::Seconds(1), &c.stale_after}});
      !s.ok()) {
    return s;
  }
  if (const OptionValue* token_file = parsed.Find("token-file")) {
    absl::StatusOr<controller::JobTokens> tokens =
        controller::JobTokens::ReadFile(token_file->text, token_file->origin);
    if (!tokens.ok()) return tokens.status();
    c.tokens = *std::move(tokens);
  }
  absl::StatusOr<rendezvous::TlsConfig> tls = ParseTlsOptions(parsed, &c.warnings, "controller");
  if (!tls.ok()) return tls.status();
  c.tls = *std::move(tls);
  if (const OptionValue* token_file = parsed.Find("http-token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(*token_file);
    if (!token.ok()) return token.status();
    c.http_token = *std::move(token);
  }
  const OptionValue http_tls = ValueOrDefault(parsed, table, "http-tls");
  if (http_tls.text != "off" && http_tls.text != "on" && http_tls.text != "mutual") {
    return absl::InvalidArgumentError(absl::StrCat(http_tls.origin,
                                                   ": expected off, on or mutual, got \"",
                                                   SafeForLog(http_tls.text, 32), "\""));
  }
  if (http_tls.text != "off" && !c.tls.enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        http_tls.origin, "=", http_tls.text,
        " serves the views with the controller's certificate: give --tls-cert, --tls-key and "
        "--tls-ca (or --tls-dir)"));
  }
  c.http_tls = http_tls.text;
  absl::StatusOr<LogLevel> level = ParseLogLevelValue(ValueOrDefault(parsed, table, "log-level"));
  if (!level.ok()) return level.status();
  c.log_level = *level;
  return c;
}

int RunController(const ControllerConfig& config) {
  SetLogPrefix("controller");
  // Serves until a terminating signal; no workers here.
  auto signals = launcher::SignalWait::Create();
  if (!signals.ok()) {
    TLOG(kError) << signals.status().message();
    return kExitOsError;
  }
  for (const std::string& warning : config.warnings) TLOG(kWarning) << warning;
  controller::ControllerHostOptions options;
  options.core.stale_after = config.stale_after;
  options.history.path = config.db_path;
  options.history.max_entries_per_job = config.history_retention;
  options.history.max_age = config.history_max_age;
  options.history.max_jobs = config.history_max_jobs;
  options.db_required = config.db_required;
  options.tokens = config.tokens;
  options.listen = {config.listen_host, config.listen_port};
  options.http = {config.http_host, config.http_port};
  options.http_token = config.http_token;
  options.http_tls = config.http_tls == "mutual" ? controller::HttpTls::kMutual
                     : config.http_tls == "on"   ? controller::HttpTls::kServer
                                                 : controller::HttpTls::kOff;
  options.version = config.version;
  options.tls = config.tls;
  auto host = controller::ControllerHost::Start(std::move(options));
  if (!host.ok()) {
    TLOG(kError) << host.status().message();
    return ExitCodeForServerStartError(host.status());
  }
  int sig = 0;
  while (sig == 0) sig = (*signals)->AwaitTerminatingSignal(absl::InfiniteDuration());
  TLOG(kInfo) << "received signal " << sig << "; shutting down";
  EndingFacts ending;  // a signal is its normal end
  ending.ending = Ending::kSignal;
  ending.signal = sig;
  const int exit_code = ExitCodeFor(ending);
  (*host)->Shutdown(absl::Milliseconds(200));
  TLOG(kInfo) << "exiting with code " << exit_code;
  return exit_code;
}

}  // namespace trainlet::agent

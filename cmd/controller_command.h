// `trainlet controller [OPTIONS]`: the thin controller (docs/controller.md)
// as its own process. Agents started with --controller=HOST:PORT report to
// it; it keeps jobs, nodes, rounds, restarts with their causes and hang
// verdicts, with history in SQLite (--db) that survives its restarts. It is
// on no job's critical path: a job runs the same with it down.
//
// Values come from flags, then TRAINLET_* variables, then defaults, as for
// `trainlet coordinator`. Errors: InvalidArgument (exit 64) for malformed
// input, FailedPrecondition (exit 78) for an unreadable token file or TLS
// options given in part.
//
// ParseControllerConfig: pure except for reading the token and TLS files.
// RunController: owns the calling thread until SIGTERM/SIGINT.
#ifndef TRAINLET_CMD_CONTROLLER_COMMAND_H_
#define TRAINLET_CMD_CONTROLLER_COMMAND_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "config/options.h"
#include "controller/job_tokens.h"
#include "rendezvous/tls_files.h"

namespace trainlet::agent {

struct ControllerConfig {
  bool help_requested = false;
  std::string listen_host = "0.0.0.0";  // --listen=[ADDR]:PORT
  int listen_port = 29600;
  // --http=[ADDR]:PORT: the views (the status page, /api/jobs, /metrics).
  std::string http_host = "0.0.0.0";
  int http_port = 29680;
  std::string db_path;                                    // --db; empty: history in memory only.
  int history_retention = 1000;                           // --history-retention: entries per job.
  absl::Duration history_max_age = absl::Hours(24 * 30);  // --history-max-age; 0: none.
  int history_max_jobs = 1000;                            // --history-max-jobs
  bool db_required = false;                        // --db-required: a damaged --db is fatal (78).
  absl::Duration stale_after = absl::Seconds(15);  // --stale-after
  controller::JobTokens tokens;                    // from --token-file; none: no authentication.
  rendezvous::TlsConfig tls;                       // --tls-*
  // The views: from --http-token-file (empty: none), and --http-tls
  // ("off", "on": HTTPS with --tls-cert/--tls-key, "mutual": and a client
  // certificate of --tls-ca).
  std::string http_token;
  std::string http_tls = "off";
  std::vector<std::string> warnings;
  LogLevel log_level = LogLevel::kInfo;
  std::string version;  // trainlet's, for the views (main.cc sets it).
};

absl::StatusOr<ControllerConfig> ParseControllerConfig(
    const std::vector<std::string>& args, const std::map<std::string, std::string>& env);
const std::vector<OptionSpec>& ControllerOptionTable();
std::string ControllerHelpText();

// Exit code: 128+N on signal N (its normal end), 71 when it cannot listen,
// 78 when the history database cannot be opened, holds a newer schema, or
// is damaged with --db-required (without it, a damaged one is moved aside).
int RunController(const ControllerConfig& config);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_CONTROLLER_COMMAND_H_

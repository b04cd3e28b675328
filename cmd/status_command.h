// `trainlet status [--controller=HOST:PORT] [--json] [--evidence] [--timeout=DUR]
// [--token-file=PATH] [--tls-*] [JOB]`: what the controller knows of its jobs,
// as a table (controller/views.h RenderStatusTable) or as JSON (--json), or
// with --evidence every line of a job's hang evidence. The address, the
// token, the output and the exit codes: docs/controller-views.md,
// "trainlet status".
//
// One address: HOST:PORT may be the controller's HTTP views or the gRPC port
// the agents report to; a first connection tells them apart (a gRPC server
// greets with an HTTP/2 SETTINGS frame, the views answer HTTP/1.1). Over
// HTTP it reads `/api/jobs`, then each job's nodes a page at a time; over
// gRPC, ListJobs and GetStatus, adapted by controller/snapshot.h as the
// views are.
//
// Single-threaded, but for the thread that bounds each HTTP request to
// --timeout in all (httplib's own timeouts are per read) and gRPC's own.
#ifndef TRAINLET_CMD_STATUS_COMMAND_H_
#define TRAINLET_CMD_STATUS_COMMAND_H_

#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "config/options.h"
#include "controller/view_model.h"
#include "rendezvous/tls_files.h"

namespace trainlet::agent {

struct StatusOptions {
  std::string host = "127.0.0.1";
  int port = 29680;
  std::string address_source = "the default";  // names the input in errors.
  bool json = false;
  bool evidence = false;
  double timeout_seconds = 5;
  std::string job;  // empty: every job.
  bool help = false;
  // File inputs, read by RunStatus: --token-file or TRAINLET_TOKEN_FILE, and
  // the --tls-* values (ParseTlsOptions reads them).
  std::optional<OptionValue> token_file;
  ParsedOptions tls;
};

// Its option table (drives parsing, TRAINLET_* names and help).
const std::vector<OptionSpec>& StatusOptionTable();

// Parses the words after "status". InvalidArgument naming the flag.
absl::StatusOr<StatusOptions> ParseStatusOptions(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env);

// HOST, HOST:PORT, [IPV6] or [IPV6]:PORT; a missing port is 29680.
absl::Status ParseHttpAddress(absl::string_view text, std::string* host, int* port);

// Where `trainlet status` reads the views: the HTTP views or the gRPC port.
// Errors: NotFound (an unknown job), Unavailable (unreachable, no answer in
// time, not a controller), Unauthenticated (token or certificate refused),
// each naming the address.
class ViewsClient {
 public:
  virtual ~ViewsClient() = default;
  // The figures and every job's summary.
  virtual absl::StatusOr<controller::ControllerSnapshot> Summary() = 0;
  // One job with all its nodes.
  virtual absl::StatusOr<controller::JobView> Job(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<controller::EvidenceView>> Evidence(
      const std::string& job_id) = 0;
};

// The gRPC client (status_command_grpc.cc: the one gRPC translation unit).
std::unique_ptr<ViewsClient> NewGrpcViewsClient(const std::string& host, int port,
                                                const std::string& token,
                                                const rendezvous::TlsConfig& tls,
                                                absl::Duration timeout);

// Runs the command as parsed; writes the result to `out`, errors to `err`;
// returns the exit code.
int RunStatus(const StatusOptions& options, std::ostream& out, std::ostream& err);

// Both: parses `args` (a usage error is said on `err`, exit 64), then runs.
int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err);

std::string StatusHelpText();

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_STATUS_COMMAND_H_

// `trainlet status [--controller=HOST:PORT] [--json] [--timeout=DUR] [JOB]`:
// fetches the controller's /api/jobs over HTTP (cpp-httplib's client) and
// prints the jobs as a table (controller/views.h RenderStatusTable), or as
// the same JSON with --json. With JOB, that job only, in full (workers,
// GPUs, every restart and hang kept).
//
// The address: --controller, else TRAINLET_CONTROLLER_HTTP, else
// 127.0.0.1:29680 (the controller's --http default). A HOST without a port
// gets 29680.
//
// Exit codes: 0; 1 JOB is not known to the controller; 64 usage; 69 the
// controller is unreachable, did not answer within --timeout, or answered
// something that is not a trainlet controller's /api/jobs.
//
// Single-threaded.
#ifndef TRAINLET_AGENT_STATUS_COMMAND_H_
#define TRAINLET_AGENT_STATUS_COMMAND_H_

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::agent {

inline constexpr int kExitStatusJobUnknown = 1;

struct StatusOptions {
  std::string host = "127.0.0.1";
  int port = 29680;
  bool json = false;
  double timeout_seconds = 5;
  std::string job;  // empty: every job.
  bool help = false;
};

// Parses the words after "status". InvalidArgument naming the flag.
absl::StatusOr<StatusOptions> ParseStatusOptions(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env);

// HOST, HOST:PORT, [IPV6] or [IPV6]:PORT; a missing port is 29680.
absl::Status ParseHttpAddress(absl::string_view text, std::string* host, int* port);

// Runs the command; writes the result to `out`, errors to `err`; returns
// the exit code.
int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err);

std::string StatusHelpText();

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_STATUS_COMMAND_H_

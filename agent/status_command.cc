#include "agent/status_command.h"

#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "controller/views.h"
#include "httplib.h"

namespace trainlet::agent {
namespace {

constexpr int kDefaultPort = 29680;
// The largest /api/jobs answer read (a 4,096-node job is about 4 MiB).
constexpr size_t kMaxAnswerBytes = 64 << 20;

// httplib's error, as a person reads it.
std::string Describe(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or failed";
    case httplib::Error::ConnectionTimeout:
      return "no connection within --timeout";
    case httplib::Error::Read:
      return "no answer within --timeout, or the connection broke";
    case httplib::Error::Write:
      return "the request could not be sent";
    default:
      return httplib::to_string(error);
  }
}

}  // namespace

absl::Status ParseHttpAddress(absl::string_view text, std::string* host, int* port) {
  const std::string shown = SafeForLog(text, 64);
  absl::string_view h = text;
  absl::string_view p;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller address '", shown, "': '[' without ']' (use [IPV6]:PORT)"));
    }
    h = text.substr(1, close - 1);
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat("controller address '", shown, "': expected :PORT after ']'"));
      }
      p = rest.substr(1);
    }
  } else if (const size_t colon = text.rfind(':'); colon != absl::string_view::npos) {
    if (text.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat(
          "controller address '", shown, "': an IPv6 address needs brackets: [IPV6]:PORT"));
    }
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (!IsValidHost(h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("controller address '", shown, "': not a host name or IP address"));
  }
  int value = kDefaultPort;
  if (!p.empty() || text.back() == ':') {
    if (!absl::SimpleAtoi(p, &value) || value < 1 || value > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller address '", shown, "': the port must be 1-65535"));
    }
  }
  *host = std::string(h);
  *port = value;
  return absl::OkStatus();
}

absl::StatusOr<StatusOptions> ParseStatusOptions(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  StatusOptions options;
  std::string address = "127.0.0.1:29680";
  std::string address_source = "the default";
  if (auto it = env.find("TRAINLET_CONTROLLER_HTTP"); it != env.end() && !it->second.empty()) {
    address = it->second;
    address_source = "TRAINLET_CONTROLLER_HTTP";
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value_of = [&](absl::string_view flag, std::string* value) -> absl::StatusOr<bool> {
      if (arg == flag) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
        }
        *value = args[++i];
        return true;
      }
      if (absl::StartsWith(arg, absl::StrCat(flag, "="))) {
        *value = arg.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string value;
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      return options;
    }
    if (arg == "--json") {
      options.json = true;
      continue;
    }
    auto controller = value_of("--controller", &value);
    if (!controller.ok()) return controller.status();
    if (*controller) {
      address = value;
      address_source = "--controller";
      continue;
    }
    auto timeout = value_of("--timeout", &value);
    if (!timeout.ok()) return timeout.status();
    if (*timeout) {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d <= absl::ZeroDuration() || d > absl::Minutes(5)) {
        return absl::InvalidArgumentError(absl::StrCat("--timeout=", SafeForLog(value, 32),
                                                       ": expected a duration up to 5m, like 5s"));
      }
      options.timeout_seconds = absl::ToDoubleSeconds(d);
      continue;
    }
    if (absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", SafeForLog(arg, 64)));
    }
    if (!options.job.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("one JOB at most (got '",
                                                     SafeForLog(options.job, 64), "' and '",
                                                     SafeForLog(arg, 64), "')"));
    }
    options.job = arg;
  }
  if (absl::Status s = ParseHttpAddress(address, &options.host, &options.port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), " (from ", address_source, ")"));
  }
  return options;
}

std::string StatusHelpText() {
  return "Usage: trainlet status [--controller=HOST:PORT] [--json] [--timeout=DUR] [JOB]\n"
         "\n"
         "Prints what the trainlet controller knows of its jobs: nodes, ranks, workers,\n"
         "progress, restarts and their causes, hangs, GPU health (docs/controller-views.md).\n"
         "\n"
         "  --controller=HOST:PORT  the controller's HTTP address (its --http);\n"
         "                          default TRAINLET_CONTROLLER_HTTP, else 127.0.0.1:29680\n"
         "  --json                  the controller's /api/jobs JSON instead of a table\n"
         "  --timeout=DUR           give up after DUR (default 5s)\n"
         "  JOB                     that job only, in full\n"
         "\n"
         "Exit codes: 0; 1 JOB unknown to the controller; 64 usage; 69 the controller\n"
         "is unreachable or did not answer as one.\n";
}

int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err) {
  auto options = ParseStatusOptions(args, env);
  if (!options.ok()) {
    err << "trainlet status: " << options.status().message() << "\n"
        << "Run 'trainlet status --help' for usage.\n";
    return kExitUsage;
  }
  if (options->help) {
    out << StatusHelpText();
    return kExitSuccess;
  }
  const std::string where =
      absl::StrCat(absl::StrContains(options->host, ':') ? "[" : "", options->host,
                   absl::StrContains(options->host, ':') ? "]" : "", ":", options->port);
  httplib::Client client(options->host, options->port);
  const auto seconds = static_cast<time_t>(options->timeout_seconds);
  const auto micros =
      static_cast<time_t>((options->timeout_seconds - static_cast<double>(seconds)) * 1e6);
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  client.set_write_timeout(seconds, micros);
  std::string body;
  bool too_big = false;
  auto res = client.Get("/api/jobs", [&](const char* data, size_t length) {
    if (body.size() + length > kMaxAnswerBytes) {
      too_big = true;
      return false;
    }
    body.append(data, length);
    return true;
  });
  if (too_big) {
    err << "trainlet status: the controller at " << where << " answered over "
        << (kMaxAnswerBytes >> 20) << " MiB; ask for one JOB\n";
    return kExitUnavailable;
  }
  if (!res) {
    err << "trainlet status: cannot reach the controller at http://" << where << "/api/jobs ("
        << Describe(res.error())
        << "); is `trainlet controller` running with --http there? (--controller or "
           "TRAINLET_CONTROLLER_HTTP set the address)\n";
    return kExitUnavailable;
  }
  if (res->status != 200) {
    err << "trainlet status: the controller at " << where << " answered HTTP " << res->status
        << " for /api/jobs; is that address a trainlet controller's --http port?\n";
    return kExitUnavailable;
  }
  auto snapshot = controller::ParseSnapshotJson(body, kMaxAnswerBytes);
  if (!snapshot.ok()) {
    err << "trainlet status: " << where << ": " << snapshot.status().message() << "\n";
    return kExitUnavailable;
  }
  bool found = options->job.empty();
  if (!options->job.empty()) {
    std::vector<controller::JobView> kept;
    for (controller::JobView& job : snapshot->jobs) {
      if (job.job_id == options->job) kept.push_back(std::move(job));
    }
    found = !kept.empty();
    snapshot->jobs = std::move(kept);
  }
  if (options->json) {
    out << controller::RenderJson(*snapshot);
  } else {
    out << controller::RenderStatusTable(*snapshot, options->job);
  }
  if (!found) {
    err << "trainlet status: the controller at " << where << " knows no job '"
        << SafeForLog(options->job, 128) << "'\n";
    return kExitStatusJobUnknown;
  }
  return kExitSuccess;
}

}  // namespace trainlet::agent

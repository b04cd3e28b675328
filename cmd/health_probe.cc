#include "cmd/health_probe.h"

#include <grpcpp/grpcpp.h>

#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace trainlet::agent {
namespace {

constexpr char kHealthUsage[] = "trainlet health [HOST:]PORT [--timeout-ms=N]";
constexpr char kHealthDescription[] =
    "Asks the agent's grpc.health.v1 service whether it is ready (joined and\n"
    "workers running). Exit 0: SERVING; 1: not serving or unreachable; 64: bad\n"
    "arguments. Default address: 127.0.0.1:29401 (the agent's --health-port); a\n"
    "PORT alone is on 127.0.0.1.";

}  // namespace

const std::vector<OptionSpec>& HealthOptionTable() {
  static const auto* table = new std::vector<OptionSpec>{
      {"timeout-ms", OptionKind::kInt, "N", "1000",
       "How long to wait for the answer, in milliseconds (at most an hour).", /*hidden=*/false,
       /*flag_only=*/true},
  };
  return *table;
}

std::string HealthHelpText() {
  return HelpText(kHealthUsage, kHealthDescription, HealthOptionTable(),
                  /*kubernetes_discovery=*/false);
}

absl::StatusOr<HealthOptions> ParseHealthOptions(const std::vector<std::string>& args) {
  const std::vector<OptionSpec>& table = HealthOptionTable();
  absl::StatusOr<ParsedOptions> parsed =
      ParseOptions(table, args, /*env=*/{}, kHealthUsage, /*foreign=*/{}, /*takes_words=*/true);
  if (!parsed.ok()) return parsed.status();
  HealthOptions options;
  if (parsed->help_requested) {
    options.help = true;
    return options;
  }
  if (parsed->saw_separator) {
    return absl::InvalidArgumentError(
        absl::StrCat("health runs no COMMAND; remove -- and what follows; usage: ", kHealthUsage));
  }
  if (parsed->words.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("one [HOST:]PORT at most (got '", SafeForLog(parsed->words[0], 64), "' and '",
                     SafeForLog(parsed->words[1], 64), "'); usage: ", kHealthUsage));
  }
  if (!parsed->words.empty()) {
    const std::string& address = parsed->words[0];
    int port = 0;
    options.target = absl::SimpleAtoi(address, &port) ? absl::StrCat("127.0.0.1:", port) : address;
  }
  absl::StatusOr<int> timeout_ms =
      ParseIntValue(ValueOrDefault(*parsed, table, "timeout-ms"), 1, 3600 * 1000);
  if (!timeout_ms.ok()) return timeout_ms.status();
  options.timeout_ms = *timeout_ms;
  return options;
}

int RunHealthProbe(const HealthOptions& options) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(options.timeout_ms));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "trainlet health: " << SafeForLog(options.target, 128) << ": " << s.error_message()
              << "\n";
    return 1;
  }
  bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::cout << (serving ? "SERVING" : "NOT_SERVING") << "\n";
  return serving ? kExitSuccess : 1;
}

}  // namespace trainlet::agent

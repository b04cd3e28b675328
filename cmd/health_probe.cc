#include "cmd/health_probe.h"

#include <grpcpp/grpcpp.h>

#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace trainlet::agent {

int RunHealthProbe(const std::vector<std::string>& args) {
  std::string target = "127.0.0.1:29401";
  int timeout_ms = 1000;
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << "Usage: trainlet health [HOST:]PORT [--timeout-ms=N]\n"
                   "Asks the agent's grpc.health.v1 service whether it is ready (joined and\n"
                   "workers running). Exit 0: SERVING; 1: not serving or unreachable.\n"
                   "Default address: 127.0.0.1:29401 (the agent's --health-port).\n";
      return kExitSuccess;
    }
    if (a.rfind("--timeout-ms=", 0) == 0) {
      if (!absl::SimpleAtoi(a.substr(13), &timeout_ms) || timeout_ms <= 0) {
        std::cerr << "trainlet health: --timeout-ms: expected a positive integer, got \""
                  << a.substr(13) << "\"\n";
        return kExitUsage;
      }
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "trainlet health: unknown flag " << a << "\n";
      return kExitUsage;
    } else {
      int port = 0;
      target = absl::SimpleAtoi(a, &port) ? absl::StrCat("127.0.0.1:", port) : a;
    }
  }
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "trainlet health: " << target << ": " << s.error_message() << "\n";
    return 1;
  }
  bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::cout << (serving ? "SERVING" : "NOT_SERVING") << "\n";
  return serving ? kExitSuccess : 1;
}

}  // namespace trainlet::agent

#include "rendezvous/grpc_log.h"

#include <grpc/support/log.h>

#include <cstring>

#include "absl/strings/match.h"
#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

constexpr size_t kMaxGrpcLine = 1024;

const char* Basename(const char* path) {
  const char* slash = path == nullptr ? nullptr : strrchr(path, '/');
  return slash == nullptr ? (path == nullptr ? "?" : path) : slash + 1;
}

void Sink(gpr_log_func_args* args) {
  const char* message = args->message == nullptr ? "" : args->message;
  if (absl::StartsWith(message, "assertion failed")) {
    TLOG(kError) << "gRPC " << Basename(args->file) << ":" << args->line << ": "
                 << SafeForLog(message, kMaxGrpcLine);
    return;
  }
  TLOG(kDebug) << "gRPC " << gpr_log_severity_string(args->severity) << " " << Basename(args->file)
               << ":" << args->line << ": " << SafeForLog(message, kMaxGrpcLine);
}

}  // namespace

void InstallGrpcLogSink() { gpr_set_log_function(&Sink); }

}  // namespace trainlet::rendezvous

#include "common/exit_codes.h"

#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainlet {

const std::vector<ExitCodeRow>& ExitCodeTable() {
  static const auto* table = new std::vector<ExitCodeRow>{
      {"0", "every worker on every node exited 0"},
      {"1-63, 82-125", "a local worker's own exit code (the first local failure)"},
      {"64",
       "usage: bad flag or environment value, a torchrun flag trainlet does not take, an "
       "unknown TRAINLET_* variable with --strict-env, no COMMAND"},
      {"69", "coordinator unreachable, join timeout, coordinator lost, fenced"},
      {"70", "internal error in trainlet (please report it)"},
      {"71", "OS resource: port in use, fork failed, descriptor limit"},
      {"75", "a worker on another node failed (or a node was lost)"},
      {"77",
       "rejected by the coordinator: wrong token or job id, or the TLS handshake refused "
       "(certificate, CA, server name, TLS on one side)"},
      {"78",
       "inconsistent configuration: rank >= nnodes or taken (two agents of one job hosting "
       "its coordinator), no node count in a JobSet pod, empty or unreadable token file, "
       "duplicate node, TLS options given in part or naming unusable files"},
      {"79", "elastic job gave up: restarts used up or too few nodes"},
      {"80",
       "a hang (--hang-timeout) named a local worker its suspect, and the job gave up on "
       "it"},
      {"81", "this node's GPU health is fatal (elastic job): reschedule the pod elsewhere"},
      {"126", "COMMAND cannot be executed"},
      {"127", "COMMAND not found"},
      {"128+N", "a worker (or the agent) was killed by signal N"},
  };
  return *table;
}

std::string FormatExitCodeTable(size_t width) {
  constexpr size_t kIndent = 11;  // "  " + the codes column (8) + " ".
  std::string out;
  for (const ExitCodeRow& row : ExitCodeTable()) {
    // Codes that do not fit their column go on a line of their own.
    std::string line = absl::StrCat("  ", row.codes);
    if (line.size() < kIndent) {
      line.resize(kIndent, ' ');
    } else {
      absl::StrAppend(&line, "\n", std::string(kIndent, ' '));
    }
    size_t column = kIndent;
    bool first = true;
    for (absl::string_view word : absl::StrSplit(row.meaning, ' ')) {
      if (!first && column + 1 + word.size() > width) {
        absl::StrAppend(&line, "\n", std::string(kIndent, ' '));
        column = kIndent;
        first = true;
      }
      if (!first) {
        line += ' ';
        ++column;
      }
      absl::StrAppend(&line, word);
      column += word.size();
      first = false;
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

int ExitCodeForRendezvousError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitSuccess;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitRejected;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
      return kExitConfig;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return kExitUnavailable;
    default:
      return kExitInternal;
  }
}

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  return kExitInternal;
}

}  // namespace trainlet

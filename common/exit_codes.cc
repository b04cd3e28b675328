#include "common/exit_codes.h"

#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainlet {
namespace {

// Where an exit code can come from, in the order a rule tries them.
enum class Source {
  kPreflightFailed,    // 82 when --preflight=fail failed the job.
  kRestartsExhausted,  // 79 when the restart budget ran out.
  kRunningFailure,     // the first worker that failed while the round ran.
  kAnyFailure,         // the first worker that exited non-zero, stops included.
  kSignal,             // 128 + the terminating signal.
  kGiven,              // the code the ending carries (join or spawn error).
  kSuccess,            // 0
  kPeerFailed,         // 75
  kUnavailable,        // 69
};

struct ExitRule {
  Ending ending;
  std::vector<Source> sources;  // the first one that applies wins.
};

// The exit policy (docs/exit-codes.md). A signal is tini-like: the first
// failing worker's code, else 128+N. A verdict prefers this node's own
// failure over the generic 75, so that the pod of the failing worker carries
// the worker's code.
const std::vector<ExitRule>& ExitPolicy() {
  static const std::vector<ExitRule>* const kPolicy = new std::vector<ExitRule>{
      {Ending::kJobFinished, {Source::kSuccess}},
      {Ending::kJobFailed,
       {Source::kPreflightFailed, Source::kRestartsExhausted, Source::kRunningFailure,
        Source::kSignal, Source::kPeerFailed}},
      {Ending::kSignal, {Source::kAnyFailure, Source::kSignal}},
      {Ending::kFenced, {Source::kUnavailable}},
      {Ending::kCoordinatorLost, {Source::kRunningFailure, Source::kUnavailable}},
      {Ending::kCoordinatorLostAfterSuccess, {Source::kSuccess}},
      {Ending::kNoVerdict, {Source::kRunningFailure, Source::kUnavailable}},
      {Ending::kJoinFailed, {Source::kGiven}},
      {Ending::kSpawnFailed, {Source::kGiven}},
      {Ending::kNodeUnhealthy, {Source::kGiven}},
  };
  return *kPolicy;
}

}  // namespace

const std::vector<ExitCodeRow>& ExitCodeTable() {
  static const auto* table = new std::vector<ExitCodeRow>{
      {"0", "every worker on every node exited 0"},
      {"1-63, 83-125", "a local worker's own exit code (the first local failure)"},
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
      {"82", "--preflight=fail: a node failed a check before a round (the message names both)"},
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

absl::string_view EndingName(Ending ending) {
  switch (ending) {
    case Ending::kJobFinished:
      return "job finished";
    case Ending::kJobFailed:
      return "job failed";
    case Ending::kSignal:
      return "stopped by a signal";
    case Ending::kFenced:
      return "declared lost by the coordinator";
    case Ending::kCoordinatorLost:
      return "lost the coordinator";
    case Ending::kCoordinatorLostAfterSuccess:
      return "lost the coordinator after the local workers succeeded";
    case Ending::kNoVerdict:
      return "no verdict from the coordinator";
    case Ending::kJoinFailed:
      return "rendezvous failed";
    case Ending::kSpawnFailed:
      return "cannot start COMMAND";
    case Ending::kNodeUnhealthy:
      return "node unhealthy";
  }
  return "unknown";
}

int ExitCodeFor(const EndingFacts& f) {
  for (const ExitRule& rule : ExitPolicy()) {
    if (rule.ending != f.ending) continue;
    for (Source source : rule.sources) {
      switch (source) {
        case Source::kPreflightFailed:
          if (f.preflight_failed) return kExitPreflightFailed;
          break;
        case Source::kRestartsExhausted:
          if (f.restarts_exhausted) return kExitRestartsExhausted;
          break;
        case Source::kRunningFailure:
          if (f.running_failure != 0) return f.running_failure;
          break;
        case Source::kAnyFailure:
          if (f.any_failure != 0) return f.any_failure;
          break;
        case Source::kSignal:
          if (f.signal != 0) return kExitSignalBase + f.signal;
          break;
        case Source::kGiven:
          return f.given_code;
        case Source::kSuccess:
          return kExitSuccess;
        case Source::kPeerFailed:
          return kExitPeerFailed;
        case Source::kUnavailable:
          return kExitUnavailable;
      }
    }
  }
  return kExitInternal;
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

int ExitCodeForJoinError(const absl::Status& status, JoinRefusal refusal) {
  switch (refusal) {
    case JoinRefusal::kFenced:
      // This pod should be restarted (a new incarnation may scale the job
      // back up), so not a never-retry code.
      return kExitUnavailable;
    case JoinRefusal::kJobFailed:
      return kExitPeerFailed;
    case JoinRefusal::kRestartsExhausted:
      return kExitRestartsExhausted;
    case JoinRefusal::kPreflightFailed:
      return kExitPreflightFailed;
    case JoinRefusal::kJobSucceeded:
      // Too late to take part, but there is nothing left to do: the job
      // succeeded (a pod restarted after the end, a left-out survivor).
      return kExitSuccess;
    case JoinRefusal::kNone:
      break;
  }
  return ExitCodeForRendezvousError(status);
}

int ExitCodeForConfigError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitSuccess;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kFailedPrecondition:
      return kExitConfig;
    default:
      return kExitInternal;
  }
}

int ExitCodeForSpawnError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kPermissionDenied:
      return kExitNotExecutable;
    case absl::StatusCode::kResourceExhausted:
      return kExitOsError;
    default:
      return kExitInternal;
  }
}

int ExitCodeForPlanError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return kExitConfig;
    default:
      return ExitCodeForSpawnError(status);
  }
}

int ExitCodeForServerStartError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
      return kExitConfig;
    default:
      return kExitOsError;
  }
}

int ExitCodeForStatusQuery(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return kExitStatusJobUnknown;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitRejected;
    case absl::StatusCode::kFailedPrecondition:
      return kExitConfig;
    default:
      return kExitUnavailable;
  }
}

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  return kExitInternal;
}

}  // namespace trainlet

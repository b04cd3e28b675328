// trainlet's exit policy: every mapping from how a command ended to its exit
// code lives in this file and exit_codes.cc, and nowhere else
// (docs/exit-codes.md is the user-facing copy; exit_codes_test checks the
// table, the docs and every mapping against each other). Pure functions.
//
// Codes 64-79 are trainlet's own verdicts, chosen from sysexits(3) so that a
// Kubernetes podFailurePolicy can tell a configuration error (never retry)
// from a worker failure (maybe retry); 80 and 81 are trainlet's too (a hung
// worker, an unhealthy node), beyond sysexits' range. Every other non-zero
// code is the failing worker's: its exit status, or 128+signal when a signal
// killed it.
#ifndef TRAINLET_COMMON_EXIT_CODES_H_
#define TRAINLET_COMMON_EXIT_CODES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainlet {

enum ExitCode : int {
  kExitSuccess = 0,
  kExitUsage = 64,              // bad flag or env value, unknown flag, no COMMAND.
  kExitUnavailable = 69,        // coordinator unreachable / join timeout / lost.
  kExitInternal = 70,           // a trainlet bug; please report.
  kExitOsError = 71,            // cannot listen (port in use), fork failed, ...
  kExitPeerFailed = 75,         // a worker on another node failed; ours were stopped.
  kExitRejected = 77,           // wrong token or job id.
  kExitConfig = 78,             // inconsistent job: rank hint >= nnodes, duplicate
                                // node id or rank, round full, unreadable token file.
  kExitRestartsExhausted = 79,  // elastic: restart budget spent or too few nodes.
  kExitWorkerHung = 80,         // a local worker stopped reporting progress
                                // (--hang-timeout) and the job gave up on it.
  kExitNodeUnhealthy = 81,      // elastic: this node's GPU health is fatal;
                                // reschedule the pod on another node.
  kExitPreflightFailed = 82,    // --preflight=fail: a node failed a check.
  kExitNotExecutable = 126,     // COMMAND exists but cannot be executed.
  kExitNotFound = 127,          // COMMAND not found.
  kExitSignalBase = 128,        // 128+N: killed by signal N.
};

// One row of the table `trainlet --help` prints; docs/exit-codes.md has the
// same rows (common_test checks that), with what to check for each.
struct ExitCodeRow {
  const char* codes;    // "0", "1-63, 83-125", "128+N".
  const char* meaning;  // one sentence, no final period.
};
const std::vector<ExitCodeRow>& ExitCodeTable();
// The table as `--help` prints it: the codes, then the meaning wrapped at
// `width` columns.
std::string FormatExitCodeTable(size_t width = 78);

// ---- How an agent's run ended (agent/round.h decides which), and the one
// table from that to its exit code.

enum class Ending {
  kJobFinished,                  // the coordinator: every worker of the job exited 0.
  kJobFailed,                    // the coordinator: the job failed.
  kSignal,                       // a terminating signal stopped the agent.
  kFenced,                       // the coordinator declared this incarnation lost.
  kCoordinatorLost,              // nothing from the coordinator for its silence limit.
  kCoordinatorLostAfterSuccess,  // ... after every local worker exited 0.
  kNoVerdict,                    // no verdict within the verdict timeout after a stop.
  kJoinFailed,                   // the rendezvous failed (code decided by the error).
  kSpawnFailed,                  // COMMAND could not be started (126/127/71...).
  kNodeUnhealthy,                // elastic: this node's GPU health is fatal (81).
};
absl::string_view EndingName(Ending ending);

struct EndingFacts {
  Ending ending = Ending::kJobFinished;
  // The first worker that failed while the round ran (not one stopped by
  // us), or 0.
  int running_failure = 0;
  // The first worker that exited non-zero at all, stops included, or 0.
  int any_failure = 0;
  int signal = 0;                   // the terminating signal, or 0.
  bool restarts_exhausted = false;  // kJobFailed: the budget ran out.
  bool preflight_failed = false;    // kJobFailed: --preflight=fail failed it (82).
  int given_code = 0;               // kJoinFailed, kSpawnFailed.
  // What happened, for a person: the coordinator's reason for a verdict,
  // the error of a failed join, ...; empty when the ending says it all.
  std::string why;
};

// The exit code for `facts` by the exit policy table: a signal is tini-like
// (the first failing worker's code, else 128+N); a verdict prefers this
// node's own failure over the generic 75, so that the pod of the failing
// worker carries the worker's code. `trainlet coordinator` ends its run by
// the same table (kJobFinished, kJobFailed, kSignal).
int ExitCodeFor(const EndingFacts& facts);

// ---- Errors, by their canonical status code.

// A failed rendezvous call (a join, a standalone client's call).
int ExitCodeForRendezvousError(const absl::Status& status);

// Why the coordinator refused a join when the refusal is its verdict on the
// job or on this node (rendezvous/error_reason.h carries it on the status);
// kNone for any other error.
enum class JoinRefusal {
  kNone,
  kFenced,
  kJobFailed,
  kRestartsExhausted,
  kJobSucceeded,
  kPreflightFailed,
};

// A join the coordinator refused or that timed out. A refusal because the
// job is over or this incarnation is fenced is a verdict (69, 75, 79, or 0
// for a job that already succeeded), not a configuration error; anything
// else as ExitCodeForRendezvousError.
int ExitCodeForJoinError(const absl::Status& status, JoinRefusal refusal);

// A configuration error: kExitUsage (64) for InvalidArgument (a malformed
// flag or env value), kExitConfig (78) for FailedPrecondition (consistent
// syntax, impossible job: rank hint >= nnodes, unreadable or empty token
// file, no GPU, no node count in a JobSet pod), kExitInternal otherwise.
int ExitCodeForConfigError(const absl::Status& status);

// COMMAND could not be started (launcher/command_resolver.h, the
// supervisor's spawn): NotFound -> 127, PermissionDenied -> 126,
// ResourceExhausted (fork, descriptors) -> 71, else 70.
int ExitCodeForSpawnError(const absl::Status& status);

// A round whose launch plan could not prepare it (agent/launch_plan.h):
// DeadlineExceeded (the MPI workers never became reachable) -> 69;
// InvalidArgument or FailedPrecondition (what the peers sent cannot be
// written, a key that is not one) -> 78; otherwise as a spawn error.
int ExitCodeForPlanError(const absl::Status& status);

// A server that could not start (`trainlet controller`'s): what the
// operator must fix in the configuration (FailedPrecondition: a key others
// may write; DataLoss: a history database of another schema) -> 78, else
// (the port is taken, the address is not local) -> 71.
int ExitCodeForServerStartError(const absl::Status& status);

// `trainlet status`, when the controller gave no answer to print: NotFound
// (it does not know the job) -> 1 (kExitStatusJobUnknown), a refused token
// or certificate -> 77, an unusable token or TLS file -> 78, else
// (unreachable, not a controller) -> 69.
inline constexpr int kExitStatusJobUnknown = 1;
int ExitCodeForStatusQuery(const absl::Status& status);

// Turns a waitpid(2) status into a shell-style exit code (code or 128+sig).
int ExitCodeFromWaitStatus(int wait_status);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_EXIT_CODES_H_

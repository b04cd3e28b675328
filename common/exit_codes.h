// trainlet's exit-code contract (docs/exit-codes.md is the user-facing copy).
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
  kExitNotExecutable = 126,     // COMMAND exists but cannot be executed.
  kExitNotFound = 127,          // COMMAND not found.
  kExitSignalBase = 128,        // 128+N: killed by signal N.
};

// One row of the table `trainlet --help` prints; docs/exit-codes.md has the
// same rows (common_test checks that), with what to check for each.
struct ExitCodeRow {
  const char* codes;    // "0", "1-63, 82-125", "128+N".
  const char* meaning;  // one sentence, no final period.
};
const std::vector<ExitCodeRow>& ExitCodeTable();
// The table as `--help` prints it: the codes, then the meaning wrapped at
// `width` columns.
std::string FormatExitCodeTable(size_t width = 78);

// The exit code for a failed rendezvous call, by canonical status code.
int ExitCodeForRendezvousError(const absl::Status& status);

// Turns a waitpid(2) status into a shell-style exit code (code or 128+sig).
int ExitCodeFromWaitStatus(int wait_status);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_EXIT_CODES_H_

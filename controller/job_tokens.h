// The controller's tokens (--token-file): one token for every job, as the
// agents' token file has, or job-scoped tokens, so that one team's agents
// cannot write (or read) another team's jobs (docs/controller.md, "Tokens").
//
// The file, one token per line:
//
//   # comments and blank lines are ignored
//   s3cret-for-every-job                  a token for every job
//   jobs=team-a-* 3f9a1c...                a token for the jobs it names:
//   jobs=team-b-train,team-b-eval 77c1...  job ids, or prefixes ending in '*'
//
// A line that does not start with "jobs=" (after any indentation) is a
// token for every job: the whole line minus trailing whitespace, as a
// single-token file always was. A scoped token is one word: a comment goes
// on a line of its own.
// Tokens are printable ASCII (gRPC metadata), each is listed once, and a
// file lists at most kMaxTokens.
//
// Pure and thread-compatible; Find compares in constant time.
#ifndef TRAINLET_CONTROLLER_JOB_TOKENS_H_
#define TRAINLET_CONTROLLER_JOB_TOKENS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::controller {

// Tokens a file may list (every call compares the one it presents with
// each of them).
inline constexpr int kMaxTokens = 4096;

// The jobs a token may write and read.
struct TokenScope {
  bool all_jobs = false;
  // Job ids, or prefixes with a trailing '*'.
  std::vector<std::string> patterns;

  bool Allows(absl::string_view job_id) const;
  // "every job", or "jobs team-a-*, team-b-train".
  std::string Describe() const;
};

class JobTokens {
 public:
  JobTokens() = default;
  // One token for every job.
  static JobTokens AnyJob(std::string token);
  // The file's text (see above); FailedPrecondition naming `origin`, the
  // line and what is wrong.
  static absl::StatusOr<JobTokens> Parse(absl::string_view text, absl::string_view origin);
  // Reads and parses the file at `path` (at most 1 MiB); `origin` names it
  // in errors ("--token-file").
  static absl::StatusOr<JobTokens> ReadFile(const std::string& path, absl::string_view origin);

  // No token at all: every caller is accepted (for every job).
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The scope of `presented`; null when no token matches. Every token is
  // compared, each in constant time.
  const TokenScope* Find(absl::string_view presented) const;

 private:
  struct Entry {
    std::string token;
    TokenScope scope;
  };
  std::vector<Entry> entries_;
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_JOB_TOKENS_H_

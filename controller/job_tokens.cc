#include "controller/job_tokens.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "controller/report_limits.h"
#include "rendezvous/token.h"

namespace trainlet::controller {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxTokenBytes = 4096;
constexpr absl::string_view kJobsPrefix = "jobs=";

absl::Status LineError(absl::string_view origin, int line, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(origin, " line ", line, ": ", what));
}

// A job id, or a prefix of one followed by '*'.
bool IsPattern(absl::string_view p) {
  if (absl::EndsWith(p, "*")) p.remove_suffix(1);
  return !p.empty() && IsValidJobId(p);
}

}  // namespace

bool TokenScope::Allows(absl::string_view job_id) const {
  if (all_jobs) return true;
  for (const std::string& p : patterns) {
    if (absl::EndsWith(p, "*")
            ? absl::StartsWith(job_id, absl::string_view(p).substr(0, p.size() - 1))
            : job_id == p) {
      return true;
    }
  }
  return false;
}

std::string TokenScope::Describe() const {
  if (all_jobs) return "every job";
  return absl::StrCat("jobs ", absl::StrJoin(patterns, ", "));
}

JobTokens JobTokens::AnyJob(std::string token) {
  JobTokens t;
  if (!token.empty()) t.entries_.push_back({std::move(token), TokenScope{true, {}}});
  return t;
}

absl::StatusOr<JobTokens> JobTokens::Parse(absl::string_view text, absl::string_view origin) {
  JobTokens t;
  absl::flat_hash_set<std::string> seen;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) continue;
    Entry entry;
    // A scoped line may be indented; an unscoped one is the whole line.
    const absl::string_view scoped = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(scoped, kJobsPrefix)) {
      const size_t space = scoped.find_first_of(" \t");
      if (space == absl::string_view::npos) {
        return LineError(origin, number,
                         "expected \"jobs=PATTERN[,PATTERN...] TOKEN\" (a token after a space)");
      }
      for (absl::string_view p :
           absl::StrSplit(scoped.substr(kJobsPrefix.size(), space - kJobsPrefix.size()), ',')) {
        if (!IsPattern(p)) {
          return LineError(origin, number,
                           absl::StrCat("\"", p.substr(0, 140),
                                        "\" is no job pattern: a job id ([A-Za-z0-9._-]{1,128}), "
                                        "or a prefix of one ending in '*'"));
        }
        entry.scope.patterns.emplace_back(p);
      }
      entry.token = std::string(absl::StripLeadingAsciiWhitespace(scoped.substr(space)));
      if (entry.token.find_first_of(" \t") != std::string::npos) {
        return LineError(origin, number,
                         "a job-scoped token is one word after \"jobs=PATTERN[,PATTERN...] \"; "
                         "comments go on lines of their own");
      }
    } else {
      entry.scope.all_jobs = true;
      entry.token = std::string(line);
    }
    if (entry.token.size() > kMaxTokenBytes) {
      return LineError(origin, number,
                       absl::StrCat("the token is longer than ", kMaxTokenBytes, " bytes"));
    }
    for (size_t i = 0; i < entry.token.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(entry.token[i]);
      if (c < 0x20 || c > 0x7e) {
        return LineError(origin, number,
                         absl::StrCat("the token has a byte that is not printable ASCII at "
                                      "offset ",
                                      i, " (gRPC metadata carries 0x20-0x7E only)"));
      }
    }
    if (static_cast<int>(t.entries_.size()) >= kMaxTokens) {
      return LineError(origin, number,
                       absl::StrCat("more than ", kMaxTokens,
                                    " tokens (every call is compared with each); give a team's "
                                    "jobs one token with a pattern"));
    }
    if (!seen.insert(entry.token).second) {
      return LineError(origin, number,
                       "the same token is listed twice; give each scope its own token");
    }
    t.entries_.push_back(std::move(entry));
  }
  if (t.entries_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin,
                     " has no token (only comments or whitespace), which would turn "
                     "authentication off; put the job's token in it"));
  }
  return t;
}

absl::StatusOr<JobTokens> JobTokens::ReadFile(const std::string& path, absl::string_view origin) {
  absl::StatusOr<std::string> text =
      rendezvous::ReadBoundedFile(path, kMaxFileBytes, origin, "token file");
  if (!text.ok()) return text.status();
  return Parse(*text, absl::StrCat(origin, " ", path));
}

const TokenScope* JobTokens::Find(absl::string_view presented) const {
  const TokenScope* found = nullptr;
  for (const Entry& e : entries_) {
    if (rendezvous::ConstantTimeEquals(presented, e.token) && found == nullptr) found = &e.scope;
  }
  return found;
}

}  // namespace trainlet::controller

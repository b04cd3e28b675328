// What the coordinator makes of a member's preflight report under
// --preflight (docs/preflight.md): the failed checks as one line, and the
// round's warning lines, bounded. The decisions themselves (fail the job,
// leave the node out, warn) are the coordinator's (coordinator.h, "Preflight").
//
// Pure functions and a value type; thread-compatible.
#ifndef TRAINLET_RENDEZVOUS_PREFLIGHT_POLICY_H_
#define TRAINLET_RENDEZVOUS_PREFLIGHT_POLICY_H_

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::rendezvous {

// A warning or verdict line is at most this long; a round keeps at most
// kMaxPreflightWarnings of them (Assignment.preflight_warnings).
inline constexpr size_t kMaxPreflightLine = 1024;
inline constexpr int kMaxPreflightWarnings = 16;

// The FAIL results of `report` as "dns: 1 of 4 names do not resolve (...);
// path_round_trip: ...", at most kMaxPreflightLine bytes (escaped for a
// log); "" when no check failed (SKIPPED is not failed).
std::string FailedChecks(const v1::PreflightReport& report);

// The warning lines of a round, one per node (a node's newer line
// replaces its older one), at most kMaxPreflightWarnings.
class PreflightWarnings {
 public:
  // Returns whether `node_id`'s line is new or changed, and kept (beyond
  // kMaxPreflightWarnings lines it is only counted: Lines() then ends "and
  // K more node(s)").
  bool Set(absl::string_view node_id, absl::string_view failed);
  void Clear() {
    lines_.clear();
    left_out_.clear();
  }
  std::vector<std::string> Lines() const;
  bool empty() const { return lines_.empty(); }

 private:
  struct Line {
    std::string node_id;
    std::string text;
  };
  std::vector<Line> lines_;
  std::set<std::string> left_out_;  // nodes beyond the kept lines
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_PREFLIGHT_POLICY_H_

#include "rendezvous/preflight_policy.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

// SafeForLog's output (ASCII) within kMaxPreflightLine, its escapes counted.
std::string Capped(std::string line) {
  if (line.size() > kMaxPreflightLine) line.resize(kMaxPreflightLine);
  return line;
}

}  // namespace

std::string FailedChecks(const v1::PreflightReport& report) {
  std::string line;
  for (const v1::CheckResult& r : report.results()) {
    if (r.outcome() != v1::CheckResult::FAIL) continue;
    absl::StrAppend(&line, line.empty() ? "" : "; ", r.check(), ": ", r.reason());
  }
  return Capped(SafeForLog(line, kMaxPreflightLine));
}

bool PreflightWarnings::Set(absl::string_view node_id, absl::string_view failed) {
  const std::string text =
      Capped(SafeForLog(absl::StrCat("node ", node_id, ": ", failed), kMaxPreflightLine));
  for (Line& l : lines_) {
    if (l.node_id != node_id) continue;
    if (l.text == text) return false;
    l.text = text;
    return true;
  }
  if (static_cast<int>(lines_.size()) >= kMaxPreflightWarnings) {
    left_out_.insert(std::string(node_id));
    return false;  // not kept: nothing new to tell
  }
  lines_.push_back({std::string(node_id), text});
  return true;
}

std::vector<std::string> PreflightWarnings::Lines() const {
  std::vector<std::string> out;
  out.reserve(lines_.size() + 1);
  for (const Line& l : lines_) out.push_back(l.text);
  if (!left_out_.empty()) out.push_back(absl::StrCat("and ", left_out_.size(), " more node(s)"));
  return out;
}

}  // namespace trainlet::rendezvous

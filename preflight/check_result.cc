#include "preflight/check_result.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainlet::preflight {

v1::CheckResult MakeResult(absl::string_view check, v1::CheckResult::Outcome outcome,
                           absl::string_view reason, double value, absl::string_view unit,
                           double threshold) {
  v1::CheckResult r;
  r.set_check(std::string(check));
  r.set_outcome(outcome);
  r.set_reason(Truncated(reason, kMaxReasonBytes));
  r.set_value(std::isfinite(value) ? value : 0);
  r.set_unit(std::string(unit));
  r.set_threshold(std::isfinite(threshold) ? threshold : 0);
  return r;
}

std::string Truncated(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  if (max < 3) return std::string(text.substr(0, max));
  return absl::StrCat(text.substr(0, max - 3), "...");
}

std::string HumanBytes(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
  auto scaled = [bytes](uint64_t unit, const char* name) {
    if (bytes % unit == 0) return absl::StrCat(bytes / unit, " ", name);
    return absl::StrFormat("%.1f %s", static_cast<double>(bytes) / unit, name);
  };
  if (bytes >= kTiB) return scaled(kTiB, "TiB");
  if (bytes >= kGiB) return scaled(kGiB, "GiB");
  if (bytes >= kMiB) return scaled(kMiB, "MiB");
  if (bytes >= kKiB) return scaled(kKiB, "KiB");
  return absl::StrCat(bytes, " bytes");
}

std::string HumanRate(double bytes_per_second) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0) return "?";
  if (bytes_per_second >= 1e9) return absl::StrFormat("%.2f GB/s", bytes_per_second / 1e9);
  if (bytes_per_second >= 1e6) return absl::StrFormat("%.1f MB/s", bytes_per_second / 1e6);
  if (bytes_per_second >= 1e3) return absl::StrFormat("%.1f kB/s", bytes_per_second / 1e3);
  return absl::StrFormat("%.0f B/s", bytes_per_second);
}

namespace {

bool IsCheckName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxCheckNameBytes) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

bool IsUnit(absl::string_view s) {
  if (s.size() > kMaxUnitBytes) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && c != '_') return false;
  }
  return true;
}

// A node id or host: not empty, within `max`, printable ASCII without
// spaces (so that it can be logged and compared as it is).
bool IsPrintableId(absl::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool NonNegative(double v) { return std::isfinite(v) && v >= 0; }

// "preflight report: results[2].unit must be ...": `what` that starts with
// '.' or ':' continues the field's name.
absl::Status Invalid(absl::string_view field, absl::string_view what) {
  const bool joined = !what.empty() && (what[0] == '.' || what[0] == ':');
  return absl::InvalidArgumentError(
      absl::StrCat("preflight report: ", field, joined ? "" : " ", what));
}

absl::Status ValidateResult(const v1::CheckResult& r, int i) {
  const std::string at = absl::StrCat("results[", i, "]");
  if (!IsCheckName(r.check())) {
    return Invalid(at,
                   absl::StrCat(".check must be 1-", kMaxCheckNameBytes, " bytes of [a-z0-9_]"));
  }
  if (r.outcome() != v1::CheckResult::PASS && r.outcome() != v1::CheckResult::FAIL &&
      r.outcome() != v1::CheckResult::SKIPPED) {
    return Invalid(at, ".outcome must be PASS, FAIL or SKIPPED");
  }
  if (r.reason().size() > kMaxReasonBytes) {
    return Invalid(at, absl::StrCat(".reason is over ", kMaxReasonBytes, " bytes"));
  }
  if (!IsUnit(r.unit())) {
    return Invalid(at, absl::StrCat(".unit must be at most ", kMaxUnitBytes, " bytes of [a-z_]"));
  }
  if (!std::isfinite(r.value())) return Invalid(at, ".value is not finite");
  if (!NonNegative(r.threshold())) return Invalid(at, ".threshold must be finite and >= 0");
  if (r.micros() < 0) return Invalid(at, ".micros is negative");
  return absl::OkStatus();
}

absl::Status ValidateLink(const v1::LinkResult& l, int i) {
  const std::string at = absl::StrCat("links[", i, "]");
  if (!IsPrintableId(l.from_node(), kMaxNodeIdBytes) ||
      !IsPrintableId(l.to_node(), kMaxNodeIdBytes)) {
    return Invalid(at, absl::StrCat(".from_node and .to_node must be 1-", kMaxNodeIdBytes,
                                    " printable bytes"));
  }
  if (l.error().size() > kMaxErrorBytes) {
    return Invalid(at, absl::StrCat(".error is over ", kMaxErrorBytes, " bytes"));
  }
  if (!NonNegative(l.seconds()) || !NonNegative(l.bandwidth_bytes_per_second()) ||
      !NonNegative(l.rtt_seconds()) || l.samples() < 0) {
    return Invalid(at, ": seconds, bandwidth, rtt and samples must be finite and >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateReport(const v1::PreflightReport& report) {
  if (!IsPrintableId(report.node_id(), kMaxNodeIdBytes)) {
    return Invalid("node_id", absl::StrCat("must be 1-", kMaxNodeIdBytes, " printable bytes"));
  }
  if (report.results_size() > kMaxResults) {
    return Invalid("results", absl::StrCat("has more than ", kMaxResults, " entries"));
  }
  if (report.links_size() > kMaxLinks) {
    return Invalid("links", absl::StrCat("has more than ", kMaxLinks, " entries"));
  }
  for (int i = 0; i < report.results_size(); ++i) {
    if (absl::Status s = ValidateResult(report.results(i), i); !s.ok()) return s;
  }
  for (int i = 0; i < report.links_size(); ++i) {
    if (absl::Status s = ValidateLink(report.links(i), i); !s.ok()) return s;
  }
  if (report.duration_micros() < 0) return Invalid("duration_micros", "is negative");
  return absl::OkStatus();
}

absl::Status ValidatePlan(const v1::NetworkPlan& plan) {
  if (plan.targets_size() > kMaxTargets) {
    return absl::InvalidArgumentError(
        absl::StrCat("network plan: more than ", kMaxTargets, " targets"));
  }
  for (int i = 0; i < plan.targets_size(); ++i) {
    const v1::LinkTarget& t = plan.targets(i);
    if (!IsPrintableId(t.node_id(), kMaxNodeIdBytes) || !IsPrintableId(t.host(), kMaxHostBytes) ||
        t.port() <= 0 || t.port() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("network plan: targets[", i, "] needs a node_id and host of 1-",
                       kMaxHostBytes, " printable bytes and a port in 1-65535"));
    }
  }
  if (plan.max_millis_per_link() < 0 || plan.max_millis_per_link() > kMaxMillisPerLink) {
    return absl::InvalidArgumentError(
        absl::StrCat("network plan: max_millis_per_link outside 0-", kMaxMillisPerLink));
  }
  return absl::OkStatus();
}

}  // namespace trainlet::preflight

#include "preflight/clock_offset.h"

#include "absl/strings/str_cat.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

namespace {

bool Finite(absl::Time t) { return t != absl::InfiniteFuture() && t != absl::InfinitePast(); }

std::string Shown(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Microseconds(100)));
}

}  // namespace

std::optional<ClockOffset> ComputeClockOffset(const ClockSample& s) {
  if (!Finite(s.agent_sent) || !Finite(s.coordinator_received) || !Finite(s.coordinator_answered) ||
      !Finite(s.agent_received)) {
    return std::nullopt;
  }
  if (s.agent_sent == absl::UnixEpoch() || s.coordinator_received == absl::UnixEpoch()) {
    return std::nullopt;  // a timestamp the sender never set.
  }
  const absl::Duration whole = s.agent_received - s.agent_sent;
  const absl::Duration served = s.coordinator_answered - s.coordinator_received;
  if (whole < absl::ZeroDuration() || served < absl::ZeroDuration() || served > whole) {
    return std::nullopt;
  }
  ClockOffset out;
  out.offset =
      ((s.coordinator_received - s.agent_sent) + (s.coordinator_answered - s.agent_received)) / 2;
  out.rtt = whole - served;
  return out;
}

v1::CheckResult CheckClockOffset(const std::optional<ClockSample>& sample,
                                 absl::Duration max_offset) {
  if (!sample.has_value()) {
    return Skipped(kCheckClockOffset, "no timed exchange with the coordinator yet");
  }
  std::optional<ClockOffset> o = ComputeClockOffset(*sample);
  if (!o.has_value()) {
    return Skipped(kCheckClockOffset,
                   "the exchange's timestamps are inconsistent (a clock stepped during it?)");
  }
  const absl::Duration size = absl::AbsDuration(o->offset);
  const absl::Duration half = o->rtt / 2;
  const double value = absl::ToDoubleSeconds(o->offset);
  const double threshold = absl::ToDoubleSeconds(max_offset);
  const std::string what = absl::StrCat(
      "the coordinator's clock is ", o->offset < absl::ZeroDuration() ? "behind" : "ahead",
      " of this node's by ", Shown(size), " (+- ", Shown(half), ")");
  if (size - half > max_offset) {
    return MakeResult(kCheckClockOffset, v1::CheckResult::FAIL,
                      absl::StrCat(what, ", more than ", Shown(max_offset),
                                   ": check this node's time synchronisation (chrony, NTP)"),
                      value, kUnitSeconds, threshold);
  }
  if (size + half > max_offset) {
    return MakeResult(kCheckClockOffset, v1::CheckResult::SKIPPED,
                      absl::StrCat(what, ": the round trip is too long to tell whether it is over ",
                                   Shown(max_offset)),
                      value, kUnitSeconds, threshold);
  }
  return MakeResult(kCheckClockOffset, v1::CheckResult::PASS, what, value, kUnitSeconds, threshold);
}

}  // namespace trainlet::preflight

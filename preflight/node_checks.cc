#include "preflight/node_checks.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

namespace {

// Runs `check` and stamps each of its results with the time it took.
template <typename F>
void Timed(std::vector<v1::CheckResult>* out, F check) {
  Clock* clock = Clock::Monotonic();
  const absl::Time start = clock->Now();
  std::vector<v1::CheckResult> results = check();
  const int64_t micros = absl::ToInt64Microseconds(clock->Now() - start);
  for (v1::CheckResult& r : results) {
    r.set_micros(micros);
    out->push_back(std::move(r));
  }
}

}  // namespace

NodeChecker::NodeChecker(NodeCheckConfig config, std::string node_id,
                         std::shared_ptr<Resolver> resolver)
    : config_(std::move(config)), node_id_(std::move(node_id)), resolver_(std::move(resolver)) {}

std::vector<v1::CheckResult> NodeChecker::Run(const NodeCheckInputs& in) {
  // DNS on a thread of its own while the path is checked here; CheckDns
  // returns within io_timeout and a little, so the join is bounded.
  std::vector<v1::CheckResult> dns;
  std::optional<std::thread> dns_thread;
  auto check_dns = [this, &in, &dns] {
    Timed(&dns, [&] {
      return std::vector<v1::CheckResult>{
          resolver_ == nullptr ? Skipped(kCheckDns, "no resolver")
                               : CheckDns(in.names, resolver_, dns_runner_, config_.io_timeout)};
    });
  };
  try {
    dns_thread.emplace(check_dns);
  } catch (const std::system_error&) {
    check_dns();  // no thread: one after the other, still each bounded.
  }

  std::vector<v1::CheckResult> out;
  Timed(&out, [&] { return CheckGpus(in.gpus, config_.gpu); });
  Timed(&out, [&] { return std::vector<v1::CheckResult>{CheckShmSize(in.host, config_.host)}; });
  Timed(&out, [&] { return std::vector<v1::CheckResult>{CheckMemlock(in.host, config_.host)}; });
  std::vector<v1::CheckResult> path;
  Timed(&path, [&] {
    return CheckPath(config_.path, node_id_, config_.path_thresholds, path_runner_,
                     config_.io_timeout);
  });
  Timed(&out, [&] {
    return std::vector<v1::CheckResult>{CheckClockOffset(in.clock, config_.max_clock_offset)};
  });
  if (dns_thread.has_value()) dns_thread->join();
  for (v1::CheckResult& r : dns) out.push_back(std::move(r));
  for (v1::CheckResult& r : path) out.push_back(std::move(r));
  return out;
}

v1::PreflightReport MakeReport(const std::string& node_id, uint64_t incarnation, uint64_t round,
                               std::vector<v1::CheckResult> results,
                               std::vector<v1::LinkResult> links, absl::Time started,
                               absl::Duration took) {
  v1::PreflightReport r;
  r.set_node_id(Truncated(node_id, kMaxNodeIdBytes));
  r.set_incarnation(incarnation);
  r.set_round(round);
  for (size_t i = 0; i < results.size() && i < static_cast<size_t>(kMaxResults); ++i) {
    *r.add_results() = std::move(results[i]);
  }
  for (size_t i = 0; i < links.size() && i < static_cast<size_t>(kMaxLinks); ++i) {
    *r.add_links() = std::move(links[i]);
  }
  r.set_started_unix_micros(absl::ToUnixMicros(started));
  r.set_duration_micros(std::max<int64_t>(0, absl::ToInt64Microseconds(took)));
  return r;
}

std::string SummaryLine(const v1::PreflightReport& report) {
  int pass = 0, fail = 0, skipped = 0;
  std::vector<std::string> failed;
  for (const v1::CheckResult& r : report.results()) {
    if (r.outcome() == v1::CheckResult::PASS) ++pass;
    if (r.outcome() == v1::CheckResult::SKIPPED) ++skipped;
    if (r.outcome() == v1::CheckResult::FAIL) {
      ++fail;
      failed.push_back(absl::StrCat(r.check(), ": ", SafeForLog(r.reason(), 200)));
    }
  }
  int links_failed = 0;
  for (const v1::LinkResult& l : report.links()) links_failed += l.error().empty() ? 0 : 1;
  std::string line =
      absl::StrCat("preflight round ", report.round(), ": ", pass, " passed, ", fail, " failed, ",
                   skipped, " skipped in ",
                   absl::FormatDuration(absl::Trunc(absl::Microseconds(report.duration_micros()),
                                                    absl::Microseconds(100))));
  if (report.links_size() > 0) {
    absl::StrAppend(&line, "; ", report.links_size(), " links measured",
                    links_failed > 0 ? absl::StrCat(", ", links_failed, " failed") : "");
  }
  if (!failed.empty()) absl::StrAppend(&line, "; FAILED ", absl::StrJoin(failed, "; "));
  return line;
}

}  // namespace trainlet::preflight

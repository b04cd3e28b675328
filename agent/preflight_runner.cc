#include "agent/preflight_runner.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::agent {
namespace {

bool Gates(v1::PreflightPolicy policy) {
  return policy == v1::PREFLIGHT_EXCLUDE || policy == v1::PREFLIGHT_FAIL;
}

}  // namespace

bool PreflightPassed(const v1::PreflightReport& report) {
  for (const v1::CheckResult& r : report.results()) {
    if (r.outcome() == v1::CheckResult::FAIL) return false;
  }
  return true;
}

void PreflightLines::Log(const google::protobuf::RepeatedPtrField<std::string>& lines) {
  absl::MutexLock lock(&mu_);
  for (const std::string& line : lines) {
    if (logged_.size() >= 256) logged_.clear();  // bounded; a line may then come again.
    if (logged_.insert(line).second) {
      TLOG(kWarning) << what_ << " (the coordinator): " << SafeForLog(line, 1024);
    }
  }
}

PreflightRunner::PreflightRunner(Options options, std::unique_ptr<preflight::NodeChecker> checker,
                                 InputsFn inputs, Clock* clock)
    : options_(std::move(options)),
      checker_(std::move(checker)),
      inputs_(std::move(inputs)),
      clock_(clock) {}

PreflightRunner::~PreflightRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PreflightRunner::SetPolicy(v1::PreflightPolicy policy) {
  if (policy != v1::PREFLIGHT_POLICY_UNSPECIFIED) options_.policy = policy;
}

bool PreflightRunner::Due(bool forced) const {
  if (options_.policy == v1::PREFLIGHT_OFF || checker_ == nullptr) return false;
  return forced || !ever_run_ || clock_->Now() - last_run_ >= options_.interval;
}

bool PreflightRunner::GpuDue(bool forced) const {
  if (options_.policy == v1::PREFLIGHT_OFF || !options_.gpu_check) return false;
  return forced || gpu_failed_ || !gpu_ever_run_ || clock_->Now() - last_gpu_ >= options_.interval;
}

std::vector<v1::CheckResult> PreflightRunner::RunGpu() {
  const absl::Time start = clock_->Now();
  std::vector<v1::CheckResult> results = options_.gpu_check();
  last_gpu_ = clock_->Now();
  gpu_ever_run_ = true;
  gpu_failed_ = false;
  const int64_t micros = absl::ToInt64Microseconds(last_gpu_ - start);
  for (v1::CheckResult& r : results) {
    r.set_micros(micros);
    gpu_failed_ = gpu_failed_ || r.outcome() == v1::CheckResult::FAIL;
  }
  return results;
}

v1::PreflightReport PreflightRunner::RunNow(uint64_t round, bool recheck) {
  const absl::Time wall = absl::Now();
  const absl::Time start = clock_->Now();
  std::vector<v1::CheckResult> results = checker_->Run(Inputs());
  if (GpuDue(recheck)) {
    for (v1::CheckResult& r : RunGpu()) results.push_back(std::move(r));
  }
  last_run_ = clock_->Now();
  ever_run_ = true;
  return preflight::MakeReport(options_.node_id, options_.incarnation, round, std::move(results),
                               {}, wall, last_run_ - start);
}

void PreflightRunner::Log(const v1::PreflightReport& report) const {
  TLOG_AT(!PreflightPassed(report) ? LogLevel::kWarning : LogLevel::kInfo)
      << preflight::SummaryLine(report);
}

std::optional<v1::PreflightReport> PreflightRunner::BeforeJoin(uint64_t last_round,
                                                               bool after_local_failure,
                                                               bool recheck) {
  // warn: the GPU loopback now, before the workers take the GPUs; its
  // results go with the check beside them.
  if (options_.policy == v1::PREFLIGHT_WARN && GpuDue(recheck)) {
    JoinBeside();
    pending_gpu_ = RunGpu();
  }
  {
    absl::MutexLock lock(&mu_);
    network_recheck_ = recheck;
  }
  // A node whose last gated check failed checks at every join until it
  // passes: the coordinator holds its failure until a report says better.
  if (!Gates(options_.policy) || !Due(after_local_failure || recheck || last_failed_)) {
    return std::nullopt;
  }
  JoinBeside();  // a warn check of the policy before
  v1::PreflightReport report = RunNow(last_round + 1, recheck);
  last_failed_ = !PreflightPassed(report);
  Log(report);
  return report;
}

bool PreflightRunner::NetworkDue() {
  if (options_.policy == v1::PREFLIGHT_OFF || !options_.measure_links) return false;
  absl::MutexLock lock(&mu_);
  network_offered_ = network_recheck_ || last_network_ == absl::InfinitePast() ||
                     clock_->Now() - last_network_ >= options_.interval;
  return network_offered_;
}

void PreflightRunner::NetworkMeasured() {
  absl::MutexLock lock(&mu_);
  network_measured_ = true;
}

void PreflightRunner::OnAssignment(const v1::Assignment& assignment) {
  {
    absl::MutexLock lock(&mu_);
    // Measured before the round closed, or planned beside its workers: else
    // the links stay due (the coordinator had no measurement for them).
    if (network_offered_ && (network_measured_ || assignment.has_network_plan())) {
      last_network_ = clock_->Now();
      network_recheck_ = false;
    }
    network_offered_ = false;
    network_measured_ = false;
    assigned_round_ = assignment.round();
  }
  plan_round_ = assignment.round();
  plan_.reset();
  if (assignment.has_network_plan()) plan_ = assignment.network_plan();
}

void PreflightRunner::NoteClock(const preflight::ClockSample& sample) {
  absl::MutexLock lock(&mu_);
  clock_sample_ = sample;
}

void PreflightRunner::RefreshClock(v1::PreflightReport* report) {
  std::optional<preflight::ClockSample> sample;
  {
    absl::MutexLock lock(&mu_);
    sample = clock_sample_;
  }
  v1::CheckResult fresh = preflight::CheckClockOffset(sample, options_.max_clock_offset);
  for (v1::CheckResult& r : *report->mutable_results()) {
    if (r.check() == preflight::kCheckClockOffset) {
      fresh.set_micros(r.micros());
      r = std::move(fresh);
      return;
    }
  }
}

preflight::NodeCheckInputs PreflightRunner::Inputs() {
  preflight::NodeCheckInputs in = inputs_();
  absl::MutexLock lock(&mu_);
  if (!in.clock.has_value()) in.clock = clock_sample_;
  return in;
}

void PreflightRunner::AfterStart(uint64_t round) {
  std::optional<v1::NetworkPlan> plan;
  if (plan_round_ == round) plan.swap(plan_);
  if (!options_.measure_links) plan.reset();
  if (options_.policy != v1::PREFLIGHT_WARN) return;
  bool checks_due = Due(false) || !pending_gpu_.empty();
  if (!checks_due && !plan.has_value()) return;
  {
    absl::MutexLock lock(&mu_);
    if (running_ && !in_delay_) return;  // the previous round's is still at it
    // One still waiting out its delay ends at once (its round is over: a
    // restart) and leaves its checks to this round's thread.
    superseded_ = true;
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    running_ = true;
    superseded_ = false;
    in_delay_ = options_.beside_delay > absl::ZeroDuration();  // from now, not the thread's start
    checks_due = checks_due || carried_checks_;
    carried_checks_ = false;
    for (v1::CheckResult& r : carried_gpu_) pending_gpu_.push_back(std::move(r));
    carried_gpu_.clear();
  }
  std::optional<preflight::NodeCheckInputs> inputs;
  if (checks_due) {
    // Counted from the start: a round that restarts soon does not run it again.
    last_run_ = clock_->Now();
    ever_run_ = true;
    inputs = Inputs();
  }
  std::vector<v1::CheckResult> gpu = std::move(pending_gpu_);
  pending_gpu_.clear();
  thread_ = std::thread([this, round, inputs = std::move(inputs), gpu = std::move(gpu),
                         plan = std::move(plan)]() mutable {
    if (options_.beside_delay > absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &PreflightRunner::DelayCut),
                           options_.beside_delay);
      in_delay_ = false;
      if (stopping_) {
        running_ = false;
        return;
      }
      if (superseded_) {
        carried_checks_ = inputs.has_value();
        carried_gpu_ = std::move(gpu);
        running_ = false;
        return;
      }
      // A join cut it short: the round is over too.
      if (joining_ || assigned_round_ != round) plan.reset();
    }
    const absl::Time wall = absl::Now();
    std::vector<v1::CheckResult> results;
    if (inputs.has_value()) results = checker_->Run(*inputs);
    results.insert(results.end(), gpu.begin(), gpu.end());
    std::vector<v1::LinkResult> links;
    if (plan.has_value()) links = options_.measure_links(*plan);
    v1::PreflightReport report =
        preflight::MakeReport(options_.node_id, options_.incarnation, round, std::move(results),
                              std::move(links), wall, absl::Now() - wall);
    absl::MutexLock lock(&mu_);
    finished_ = std::move(report);
    running_ = false;
  });
}

void PreflightRunner::JoinBeside() {
  if (!thread_.joinable()) return;
  {
    // The workers are gone (a join follows): no start to keep clear of.
    absl::MutexLock lock(&mu_);
    joining_ = true;
  }
  thread_.join();  // bounded: the checks' and the measurement's own bounds
  absl::MutexLock lock(&mu_);
  joining_ = false;  // the next round's thread waits out its own delay
}

std::optional<v1::PreflightReport> PreflightRunner::Poll() {
  std::optional<v1::PreflightReport> report;
  {
    absl::MutexLock lock(&mu_);
    report.swap(finished_);
  }
  if (!report.has_value()) return std::nullopt;
  if (thread_.joinable()) thread_.join();
  Log(*report);
  return report;
}

}  // namespace trainlet::agent

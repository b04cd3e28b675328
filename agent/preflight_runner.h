// PreflightRunner: when this node's --preflight checks run (docs/preflight.md,
// "The policy") and where their report goes. The checks themselves are
// preflight::NodeChecker's.
//
//   policy exclude|fail (they gate rounds):
//     StartJoin -> due? (never checked, a local failure, back from a
//     quarantine, or the last check older than --preflight-interval)
//       yes: run now (bounded), the report rides on the JoinRequest
//       no:  nothing (the coordinator keeps the last result)
//   policy warn (never delays a round):
//     workers started -> due? yes: run on a thread, after
//       Options.beside_delay (the workers' start first: an MPI launch, an
//       import, do not share the CPU with the link measurement) -> Poll()
//       hands the finished report to the next Report; the round's network
//       plan (Assignment.network_plan), if any, is measured on that thread
//   the network (any policy but off): a Join's links are due (NetworkDue)
//     at the first join, back from a quarantine, and --preflight-interval
//     after the last measurement; MeasuringClient measures exclude/fail's
//     plan before the round closes
//   off: nothing.
//   --preflight-gpu (Options.gpu_check), any policy but off: the GPU
//     loopback runs before a join (never beside the workers: they use the
//     GPUs) when due: the first join, --preflight-interval after the last,
//     a re-check, or after it failed. Gated: its results join the report;
//     warn: they wait for the next check beside the workers.
//
// The policy is the coordinator's once an assignment says it
// (Assignment.preflight_policy), this node's --preflight before that.
// Each report's summary is logged once (one INFO line, WARNING if a check
// failed).
//
// Threading: the agent's thread, but the warn check's own thread, which
// Poll() and the destructor join.
#ifndef TRAINLET_AGENT_PREFLIGHT_RUNNER_H_
#define TRAINLET_AGENT_PREFLIGHT_RUNNER_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "preflight/node_checks.h"
#include "trainlet/v1/preflight.pb.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

// No check of `report` failed (SKIPPED is not failed).
bool PreflightPassed(const v1::PreflightReport& report);

// The coordinator's warning lines (Assignment and ReportResponse
// preflight_warnings; Directive.slow_nodes), each logged once, as
// "<what> (the coordinator): <line>". Thread-safe.
class PreflightLines {
 public:
  explicit PreflightLines(std::string what = "preflight") : what_(std::move(what)) {}
  void Log(const google::protobuf::RepeatedPtrField<std::string>& lines);

 private:
  const std::string what_;
  absl::Mutex mu_;
  std::set<std::string> logged_ ABSL_GUARDED_BY(mu_);
};

class PreflightRunner {
 public:
  struct Options {
    v1::PreflightPolicy policy = v1::PREFLIGHT_WARN;  // --preflight
    absl::Duration interval = absl::Minutes(10);      // --preflight-interval
    std::string node_id;
    uint64_t incarnation = 0;
    // --preflight-gpu: the GPU loopback (preflight::RunGpuLoopback); null: off.
    std::function<std::vector<v1::CheckResult>()> gpu_check;
    // The network measurement of a plan (MeasuringClient::Measure); null:
    // this node has no measurer (its links are never due).
    std::function<std::vector<v1::LinkResult>(const v1::NetworkPlan&)> measure_links;
    absl::Duration max_clock_offset = absl::Seconds(1);
    // warn: how long after the workers started the checks beside them
    // begin (real time; the destructor, a join and the next round's start
    // cut it short). A round that ended meanwhile still gets its node
    // checks, not its links' measurement.
    absl::Duration beside_delay = absl::ZeroDuration();
  };
  // What `trainlet run` and the MPI pods use for beside_delay: the MPI
  // launch (about 0.5 s to the first rank) is over, and the link
  // measurement (tens of ms of CPU moving 64 MiB) stays out of it.
  static constexpr absl::Duration kBesideDelay = absl::Seconds(2);
  // What the checks look at, at the time they run (the probe, the names to
  // resolve).
  using InputsFn = std::function<preflight::NodeCheckInputs()>;

  PreflightRunner(Options options, std::unique_ptr<preflight::NodeChecker> checker, InputsFn inputs,
                  Clock* clock);
  ~PreflightRunner();
  PreflightRunner(const PreflightRunner&) = delete;
  PreflightRunner& operator=(const PreflightRunner&) = delete;

  // The coordinator's policy, from an assignment (UNSPECIFIED: kept).
  void SetPolicy(v1::PreflightPolicy policy);
  v1::PreflightPolicy policy() const { return options_.policy; }

  // Before a Join for the round after `last_round`: the report to send,
  // when the policy gates rounds and a check is due (see the top).
  std::optional<v1::PreflightReport> BeforeJoin(uint64_t last_round, bool after_local_failure,
                                                bool recheck);
  // After the round's workers started: warn runs the checks on a thread
  // when due.
  void AfterStart(uint64_t round);
  // warn: the finished report, once.
  std::optional<v1::PreflightReport> Poll();

  // The network (docs/preflight.md, "The network"). Whether the Join about
  // to go has its links due: never measured, back from a quarantine (the
  // last BeforeJoin's recheck), or --preflight-interval since the last
  // measurement. Any thread.
  bool NetworkDue();
  // The round's assignment: a due measurement was made before it closed
  // (exclude, fail) or is planned beside its workers (warn,
  // Assignment.network_plan, measured by AfterStart).
  void OnAssignment(const v1::Assignment& assignment);
  // The links of the Join in flight were measured (Assignment.measure_first).
  // Any thread.
  void NetworkMeasured();
  // Each Join's timestamps, for the clock-offset check. Any thread.
  void NoteClock(const preflight::ClockSample& sample);
  // Replaces `report`'s clock-offset result with the latest sample's. Any
  // thread.
  void RefreshClock(v1::PreflightReport* report);

 private:
  bool Due(bool forced) const;
  // inputs_(), with the latest clock sample when it has none.
  preflight::NodeCheckInputs Inputs();
  bool GpuDue(bool forced) const;
  // The GPU loopback, each result stamped with its micros.
  std::vector<v1::CheckResult> RunGpu();
  v1::PreflightReport RunNow(uint64_t round, bool recheck);
  void Log(const v1::PreflightReport& report) const;
  // Joins the thread of the checks beside the workers (a join follows: the
  // workers are gone), cutting their delay short.
  void JoinBeside();
  bool DelayCut() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || joining_ || superseded_;
  }

  Options options_;
  std::unique_ptr<preflight::NodeChecker> checker_;
  InputsFn inputs_;
  Clock* clock_;
  absl::Time last_run_ = absl::InfinitePast();
  bool ever_run_ = false;
  bool last_failed_ = false;  // the last check before a join failed
  absl::Time last_gpu_ = absl::InfinitePast();
  bool gpu_ever_run_ = false;
  bool gpu_failed_ = false;                   // the last GPU loopback failed
  std::vector<v1::CheckResult> pending_gpu_;  // warn: for the next check beside the workers
  std::thread thread_;  // warn's check; joined by Poll() once done, or at destruction.
  absl::Mutex mu_;
  std::optional<v1::PreflightReport> finished_ ABSL_GUARDED_BY(mu_);
  // The network: when last measured (or planned), the last BeforeJoin's
  // recheck, whether NetworkDue said yes for the Join in flight.
  absl::Time last_network_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool network_recheck_ ABSL_GUARDED_BY(mu_) = false;
  bool network_offered_ ABSL_GUARDED_BY(mu_) = false;
  bool network_measured_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<preflight::ClockSample> clock_sample_ ABSL_GUARDED_BY(mu_);
  // warn: the plan of the round about to start (round, plan).
  uint64_t plan_round_ = 0;
  std::optional<v1::NetworkPlan> plan_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the destructor: no delay left
  // A join waits for the checks beside the workers: they start at once.
  bool joining_ ABSL_GUARDED_BY(mu_) = false;
  bool in_delay_ ABSL_GUARDED_BY(mu_) = false;  // the thread waits out beside_delay
  // The next round started within the delay: the thread ends without
  // running anything and leaves what it had to that round's thread.
  bool superseded_ ABSL_GUARDED_BY(mu_) = false;
  bool carried_checks_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::CheckResult> carried_gpu_ ABSL_GUARDED_BY(mu_);
  // The round of the latest assignment: a plan whose round has passed by
  // the end of the delay is not measured (its peers are at another round).
  uint64_t assigned_round_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_PREFLIGHT_RUNNER_H_

// Kubeflow Trainer's TrainJob progress (KEP-2779), filled in for any
// framework: where the pod has Trainer's status endpoint
// (KUBEFLOW_TRAINER_SERVER_URL, KUBEFLOW_TRAINER_SERVER_CA_CERT,
// KUBEFLOW_TRAINER_SERVER_TOKEN), the agent of node rank 0 POSTs the job's
// progress there, at most once per kMinSendGap: the percentage from the
// progress line's step and total steps, the estimated remaining seconds
// from the step rate, and the line's numeric fields as metrics. Trainer
// copies it into the TrainJob's status.trainerStatus. What is sent, and
// the Trainer source it was taken from: docs/kubernetes.md.
//
// The pieces: EndpointFromEnv (the pod's variables, checked), ProgressEstimate
// (a progress line's fields and their times -> a TrainerStatus; pure),
// TrainerStatusJson (the request body) and TrainerStatusSender, the agent's
// StatusReporter that does it: Update (from the agent's loop) keeps only
// the latest progress line of the lowest global rank while this node has
// rank 0, under a lock, and never blocks; a sender thread of its own posts
// through an HttpsPoster (https_post.h) with a bounded timeout. A failing
// endpoint (refused, slow, TLS, 4xx/5xx) gets one warning, then retries of
// the latest progress with exponential backoff from kMinSendGap up to
// kMaxBackoff; a success resets both (and a later failure warns again).
//
// Threading: Update/AddEvent from any thread; Start and Stop from the
// owner's. Step is the sender thread's body, public for tests that drive it
// with a SimulatedClock and no thread.
#ifndef TRAINLET_KUBEFLOW_TRAINER_STATUS_H_
#define TRAINLET_KUBEFLOW_TRAINER_STATUS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/reporter.h"
#include "common/clock.h"
#include "kubeflow/https_post.h"

namespace trainlet::kubeflow {

// The variables Trainer's TrainJobStatus plugin injects into every trainer
// container (pkg/runtime/framework/plugins/trainjobstatus).
inline constexpr char kServerUrlEnv[] = "KUBEFLOW_TRAINER_SERVER_URL";
inline constexpr char kCaCertEnv[] = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
inline constexpr char kTokenEnv[] = "KUBEFLOW_TRAINER_SERVER_TOKEN";

// At most one request per this gap: what Trainer's clients (its SDK's
// update_trainjob_status, transformers' callback) and its user guide keep to.
inline constexpr absl::Duration kMinSendGap = absl::Seconds(5);
inline constexpr absl::Duration kMaxBackoff = absl::Minutes(5);
// One request's deadline (connect, TLS, request and answer together).
inline constexpr absl::Duration kSendTimeout = absl::Seconds(5);
// Trainer's bounds (trainjob_types.go): at most 256 metrics, names and
// values 1-64 bytes.
inline constexpr size_t kMaxMetrics = 256;
inline constexpr size_t kMaxMetricBytes = 64;
// The token file is a projected service account JWT; larger is not one.
inline constexpr size_t kMaxTokenBytes = 16 * 1024;

struct TrainerEndpoint {
  std::string url;         // as given, for messages.
  HttpsTarget target;      // host, port, path, CA file.
  std::string token_file;  // re-read before every request (the token rotates).
};

// The endpoint the pod's environment names: nullopt without
// KUBEFLOW_TRAINER_SERVER_URL (or with it empty); an error naming the
// variable when it is not an https:// URL with a host and a path, or when
// KUBEFLOW_TRAINER_SERVER_TOKEN is missing.
absl::StatusOr<std::optional<TrainerEndpoint>> EndpointFromEnv(
    const std::map<std::string, std::string>& env);

// One request's trainerStatus (Trainer's TrainerStatus, v1alpha1).
struct TrainerStatus {
  std::optional<int32_t> progress_percentage;          // 0..100.
  std::optional<int32_t> estimated_remaining_seconds;  // >= 0.
  std::vector<std::pair<std::string, std::string>> metrics;
  absl::Time last_updated;  // wall clock: when the progress was written.
};

// {"trainerStatus":{...}}, the body Trainer's server decodes into its
// UpdateTrainJobStatusRequest; absent fields are left out; lastUpdatedTime
// in RFC 3339 to the second, UTC (as metav1.Time writes it).
std::string TrainerStatusJson(const TrainerStatus& status);

// The progress of one worker (the job's lowest rank) over time -> the
// status. Keys read: `step` (steps done), the total from `total_steps`,
// else `max_steps`, else `total`, from a line with a step; every field
// with a numeric value but `pid` becomes a metric, as written. Fields carry
// over from earlier lines until given again (at most kMaxMetrics names,
// the first seen). The rate is the steps over the
// samples of the last kRateWindow (at most kMaxRateSamples, kept at least
// kRateWindow / kMaxRateSamples apart, however often lines come); a step
// that goes back (a restart from a checkpoint) starts the rate over.
class ProgressEstimate {
 public:
  static constexpr absl::Duration kRateWindow = absl::Minutes(5);
  static constexpr size_t kMaxRateSamples = 64;

  // A progress line's fields, written at `at` (the agent's monotonic clock).
  void Observe(const std::vector<std::pair<std::string, std::string>>& fields, absl::Time at);
  // Forgets everything (another node reports now).
  void Clear();
  // The status from the latest line; null before one with a step or a
  // metric. `mono_now` and `wall_now` turn the line's time into wall time.
  // `finished`: the job ended successfully, so 100% and 0 s remaining.
  std::optional<TrainerStatus> Status(absl::Time mono_now, absl::Time wall_now,
                                      bool finished) const;
  // Steps per second; -1 while unknown.
  double rate() const;

 private:
  struct Sample {
    absl::Time at;
    int64_t step;
  };
  std::deque<Sample> samples_;
  std::optional<int64_t> step_;
  std::optional<int64_t> total_;
  std::vector<std::pair<std::string, std::string>> metrics_;
  absl::Time at_ = absl::InfinitePast();
  bool seen_ = false;
};

struct SenderOptions {
  TrainerEndpoint endpoint;
  absl::Duration min_gap = kMinSendGap;
  absl::Duration max_backoff = kMaxBackoff;
  absl::Duration timeout = kSendTimeout;
  // How Stop waits out the rest of the gap before the final 100% of a job
  // that succeeded (tests advance a simulated clock); at most min_gap.
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
};

class TrainerStatusSender : public agent::StatusReporter {
 public:
  // `poster`, `clock` (the agent's: its progress times are on it) and
  // `wall` must outlive the sender.
  TrainerStatusSender(SenderOptions options, HttpsPoster* poster, Clock* clock,
                      Clock* wall = Clock::Real());
  ~TrainerStatusSender() override;
  TrainerStatusSender(const TrainerStatusSender&) = delete;
  TrainerStatusSender& operator=(const TrainerStatusSender&) = delete;

  void Update(const agent::AgentStatus& status) override;
  void AddEvent(v1::ReportEvent::Kind, std::string, std::string) override {}

  void Start();
  // Stops the thread (a request in flight is cancelled) and then, when the
  // job's final progress is unsent and the last request worked, sends it
  // within `flush`: at once when the gap allows; for a job that succeeded
  // (its 100%) after waiting out the rest of the gap, at most min_gap, so
  // that the TrainJob does not stay at the last percentage sent. Idempotent.
  void Stop(absl::Duration flush = absl::Seconds(1));

  // Sends when something is due; returns when to call again
  // (InfiniteFuture: nothing to send until the next Update).
  absl::Time Step();

  struct Stats {
    int64_t sent = 0;      // answered 200.
    int64_t failed = 0;    // any other outcome.
    int64_t warnings = 0;  // WARNING lines logged.
    absl::Duration backoff;
  };
  Stats stats() const;

 private:
  // Posts `status` (`timeout` at most); true on 200.
  bool Send(const TrainerStatus& status, absl::Duration timeout);
  void Loop();
  bool StopOrWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || wake_; }

  const SenderOptions options_;
  HttpsPoster* const poster_;
  Clock* const clock_;
  Clock* const wall_;

  mutable absl::Mutex mu_;
  ProgressEstimate estimate_ ABSL_GUARDED_BY(mu_);
  // The line last observed: (global rank, when written, text).
  int seen_rank_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time seen_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string seen_line_ ABSL_GUARDED_BY(mu_);
  bool leader_ ABSL_GUARDED_BY(mu_) = false;    // this node has rank 0.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the job ended with exit 0.
  bool pending_ ABSL_GUARDED_BY(mu_) = false;   // something new to send.
  absl::Time next_allowed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int failures_ ABSL_GUARDED_BY(mu_) = 0;  // in a row.
  bool last_ok_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace trainlet::kubeflow

#endif  // TRAINLET_KUBEFLOW_TRAINER_STATUS_H_

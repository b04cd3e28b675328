#include "kubeflow/trainer_status.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "controller/views.h"
#include "progress/progress.h"

namespace trainlet::kubeflow {
namespace {

constexpr size_t kMaxPathBytes = 2048;

absl::Status BadUrl(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(kServerUrlEnv, "=", SafeForLog(url, 200), ": ",
                                                 why, "; Kubeflow Trainer's progress is not sent"));
}

bool IsNumber(absl::string_view v) {
  double d = 0;
  return absl::SimpleAtod(v, &d) && std::isfinite(d);
}

int32_t ClampToInt32(double v) {
  if (!(v > 0)) return 0;
  if (v >= static_cast<double>(std::numeric_limits<int32_t>::max())) {
    return std::numeric_limits<int32_t>::max();
  }
  return static_cast<int32_t>(v);
}

}  // namespace

absl::StatusOr<std::optional<TrainerEndpoint>> EndpointFromEnv(
    const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  const std::string url = get(kServerUrlEnv);
  if (url.empty()) return std::nullopt;
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "https://")) {
    return BadUrl(url, "not an https:// URL (Trainer's status server speaks only TLS)");
  }
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return BadUrl(url, "no path");
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view path = rest.substr(slash);
  if (path.size() > kMaxPathBytes) return BadUrl(url, "the path is over 2048 bytes");
  for (char c : path) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) {
      return BadUrl(url, "the path has a space or a byte that is not printable ASCII");
    }
  }
  TrainerEndpoint e;
  e.url = url;
  e.target.path = std::string(path);
  absl::string_view host = authority;
  absl::string_view port;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return BadUrl(url, "an IPv6 host without ']'");
    port = host.substr(close + 1);
    host = host.substr(0, close);
    if (!port.empty() && !absl::ConsumePrefix(&port, ":")) return BadUrl(url, "junk after ']'");
  } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty() || !IsValidHost(host)) return BadUrl(url, "no valid host name");
  e.target.host = std::string(host);
  if (!port.empty()) {
    int p = 0;
    if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
      return BadUrl(url, "the port is not 1-65535");
    }
    e.target.port = p;
  }
  e.target.ca_file = get(kCaCertEnv);
  e.token_file = get(kTokenEnv);
  if (e.token_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kServerUrlEnv, " is set but ", kTokenEnv,
                     " (the projected token's path) is not; Kubeflow Trainer's progress is not "
                     "sent"));
  }
  return e;
}

std::string TrainerStatusJson(const TrainerStatus& status) {
  std::string out = "{\"trainerStatus\":{";
  if (status.progress_percentage.has_value()) {
    absl::StrAppend(&out, "\"progressPercentage\":", *status.progress_percentage, ",");
  }
  if (status.estimated_remaining_seconds.has_value()) {
    absl::StrAppend(&out, "\"estimatedRemainingSeconds\":", *status.estimated_remaining_seconds,
                    ",");
  }
  if (!status.metrics.empty()) {
    absl::StrAppend(&out, "\"metrics\":[");
    for (size_t i = 0; i < status.metrics.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "" : ",",
                      "{\"name\":", controller::JsonQuote(status.metrics[i].first),
                      ",\"value\":", controller::JsonQuote(status.metrics[i].second), "}");
    }
    absl::StrAppend(&out, "],");
  }
  absl::StrAppend(&out, "\"lastUpdatedTime\":\"",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", status.last_updated, absl::UTCTimeZone()),
                  "\"}}");
  return out;
}

void ProgressEstimate::Observe(const std::vector<std::pair<std::string, std::string>>& fields,
                               absl::Time at) {
  std::optional<int64_t> step;
  std::optional<int64_t> total;
  int total_rank = 3;  // total_steps (0) beats max_steps (1) beats total (2).
  std::vector<std::pair<std::string, std::string>> metrics;
  for (const auto& [key, value] : fields) {
    if (key == "step") {
      int64_t s = 0;
      if (absl::SimpleAtoi(value, &s) && s >= 0) step = s;
    }
    const int rank = key == "total_steps" ? 0 : key == "max_steps" ? 1 : key == "total" ? 2 : 3;
    if (rank < total_rank) {
      int64_t t = 0;
      if (absl::SimpleAtoi(value, &t) && t > 0) {
        total = t;
        total_rank = rank;
      }
    }
    if (key != "pid" && metrics.size() < kMaxMetrics && !key.empty() &&
        key.size() <= kMaxMetricBytes && !value.empty() && value.size() <= kMaxMetricBytes &&
        IsNumber(value)) {
      metrics.emplace_back(key, value);
    }
  }
  if (!step.has_value() && metrics.empty()) return;  // nothing Trainer can show.
  seen_ = true;
  at_ = at;
  // Every field carries over until a later line gives it again: a script
  // may write an evaluation's line between its training lines, and each
  // request replaces Trainer's whole trainerStatus.
  for (auto& [key, value] : metrics) {
    auto it = std::find_if(metrics_.begin(), metrics_.end(),
                           [&](const auto& m) { return m.first == key; });
    if (it != metrics_.end()) {
      it->second = std::move(value);
    } else if (metrics_.size() < kMaxMetrics) {
      metrics_.emplace_back(key, std::move(value));
    }
  }
  // The step and the total only from a line with a step (an evaluation's
  // bar has a total of its own).
  if (!step.has_value()) return;
  if (total.has_value()) total_ = total;
  if (!samples_.empty() && *step < samples_.back().step) samples_.clear();  // a restart.
  // Samples at least kRateWindow / kMaxRateSamples apart (a line every
  // 100 ms would otherwise fill them in 6 s): one closer to the one before
  // the last replaces the last.
  const absl::Duration spacing = kRateWindow / kMaxRateSamples;
  if (samples_.size() >= 2 && at - samples_[samples_.size() - 2].at < spacing) {
    samples_.back() = {at, *step};
  } else if (samples_.empty() || at > samples_.back().at) {
    samples_.push_back({at, *step});
  }
  while (samples_.size() > kMaxRateSamples ||
         (samples_.size() > 2 && at - samples_[1].at >= kRateWindow)) {
    samples_.pop_front();
  }
  step_ = step;
}

void ProgressEstimate::Clear() { *this = ProgressEstimate(); }

double ProgressEstimate::rate() const {
  if (samples_.size() < 2) return -1;
  const Sample& first = samples_.front();
  const Sample& last = samples_.back();
  const double seconds = absl::ToDoubleSeconds(last.at - first.at);
  if (seconds <= 0 || last.step <= first.step) return -1;
  return static_cast<double>(last.step - first.step) / seconds;
}

std::optional<TrainerStatus> ProgressEstimate::Status(absl::Time mono_now, absl::Time wall_now,
                                                      bool finished) const {
  if (!seen_) return std::nullopt;
  TrainerStatus s;
  s.metrics = metrics_;
  const absl::Duration age = std::max(absl::ZeroDuration(), mono_now - at_);
  s.last_updated = wall_now - age;
  if (finished) {
    s.progress_percentage = 100;
    s.estimated_remaining_seconds = 0;
    s.last_updated = wall_now;
    return s;
  }
  if (step_.has_value() && total_.has_value()) {
    const int64_t done = std::min(*step_, *total_);
    // 128 bits: a step near 2^63 times 100 must not overflow.
    s.progress_percentage =
        static_cast<int32_t>(static_cast<__int128>(done) * 100 / static_cast<__int128>(*total_));
    const double r = rate();
    if (done >= *total_) {
      s.estimated_remaining_seconds = 0;
    } else if (r > 0) {
      s.estimated_remaining_seconds =
          ClampToInt32(std::ceil(static_cast<double>(*total_ - done) / r));
    }
  }
  return s;
}

TrainerStatusSender::TrainerStatusSender(SenderOptions options, HttpsPoster* poster, Clock* clock,
                                         Clock* wall)
    : options_(std::move(options)), poster_(poster), clock_(clock), wall_(wall) {}

TrainerStatusSender::~TrainerStatusSender() { Stop(absl::ZeroDuration()); }

void TrainerStatusSender::Update(const agent::AgentStatus& status) {
  absl::MutexLock lock(&mu_);
  const bool leader = status.node_rank == 0;
  if (leader != leader_) {
    leader_ = leader;
    estimate_.Clear();
    seen_rank_ = -1;
    seen_at_ = absl::InfinitePast();
    seen_line_.clear();
    pending_ = false;
  }
  if (!leader_) return;
  const agent::WorkerProgress* lowest = nullptr;
  for (const agent::WorkerProgress& p : status.progress) {
    if (p.line.empty()) continue;
    if (lowest == nullptr || p.global_rank < lowest->global_rank) lowest = &p;
  }
  if (lowest != nullptr && (lowest->global_rank != seen_rank_ || lowest->updated != seen_at_ ||
                            lowest->line != seen_line_)) {
    seen_rank_ = lowest->global_rank;
    seen_at_ = lowest->updated;
    seen_line_ = lowest->line;
    if (std::optional<agent::ProgressLine> line =
            agent::ParseProgressTail(lowest->line, /*from_start=*/true)) {
      estimate_.Observe(line->fields, lowest->updated);
      pending_ = true;
      wake_ = true;
    }
  }
  if (status.state == agent::RoundState::kDone && status.exit_code == 0 && !finished_) {
    finished_ = true;
    pending_ = true;
    wake_ = true;
  }
}

absl::Time TrainerStatusSender::Step() {
  TrainerStatus status;
  {
    absl::MutexLock lock(&mu_);
    if (!pending_ || !leader_ || stop_) return absl::InfiniteFuture();
    const absl::Time now = clock_->Now();
    if (now < next_allowed_) return next_allowed_;
    std::optional<TrainerStatus> s = estimate_.Status(now, wall_->Now(), finished_);
    pending_ = false;
    if (!s.has_value()) return absl::InfiniteFuture();  // no progress line yet.
    status = std::move(*s);
    // The gap counts from the attempt's start: two requests never start
    // closer than min_gap, however long one takes.
    next_allowed_ = now + options_.min_gap;
  }
  Send(status, options_.timeout);
  absl::MutexLock lock(&mu_);
  return pending_ ? next_allowed_ : absl::InfiniteFuture();
}

bool TrainerStatusSender::Send(const TrainerStatus& status, absl::Duration timeout) {
  const absl::Time started = clock_->Now();
  absl::Status failure;
  int code = 0;
  // Never blocks (a FIFO or a device is refused): Stop joins this thread.
  const absl::StatusOr<std::string> read =
      ReadMountedFile(options_.endpoint.token_file, kMaxTokenBytes);
  const std::string token =
      read.ok() ? std::string(absl::StripAsciiWhitespace(*read)) : std::string();
  if (token.empty() || !std::all_of(token.begin(), token.end(), [](char c) {
        return absl::ascii_isgraph(static_cast<unsigned char>(c));
      })) {
    failure = absl::FailedPreconditionError(absl::StrCat(
        "the token file ", SafeForLog(options_.endpoint.token_file), " (", kTokenEnv, ") ",
        read.ok() ? "is empty or not one printable word" : read.status().message()));
  } else {
    absl::StatusOr<HttpAnswer> answer =
        poster_->Post(options_.endpoint.target, {{"Authorization", absl::StrCat("Bearer ", token)}},
                      TrainerStatusJson(status), timeout);
    if (!answer.ok()) {
      failure = answer.status();
    } else if (answer->status != 200) {
      code = answer->status;
      // Trainer answers errors with a metav1.Status: its message says why.
      failure = absl::UnavailableError(
          absl::StrCat("answered HTTP ", answer->status, ": ",
                       SafeForLog(absl::StripAsciiWhitespace(answer->body), 300)));
    }
  }
  absl::MutexLock lock(&mu_);
  if (failure.ok()) {
    ++stats_.sent;
    if (!last_ok_) {
      TLOG(kInfo) << "Kubeflow Trainer's status server at "
                  << SafeForLog(options_.endpoint.url, 200) << " takes the job's progress again";
    }
    last_ok_ = true;
    failures_ = 0;
    stats_.backoff = absl::ZeroDuration();
    return true;
  }
  ++stats_.failed;
  ++failures_;
  // Exponential backoff from the gap, capped; the latest progress is sent
  // once it passes (a newer line replaces it meanwhile).
  absl::Duration backoff = options_.min_gap;
  for (int i = 0; i < failures_ && backoff < options_.max_backoff; ++i) backoff *= 2;
  backoff = std::min(backoff, options_.max_backoff);
  stats_.backoff = backoff;
  next_allowed_ = std::max(next_allowed_, started + backoff);
  pending_ = true;
  if (stop_ && absl::IsCancelled(failure)) {
    TLOG(kDebug) << "Kubeflow Trainer progress: the request in flight was cancelled (exiting)";
  } else if (last_ok_) {
    ++stats_.warnings;
    TLOG(kWarning) << "cannot send the job's progress to Kubeflow Trainer at "
                   << SafeForLog(options_.endpoint.url, 200) << ": " << failure.message()
                   << (code == 403 ? " (403: the token is not one Trainer issued to this TrainJob)"
                                   : "")
                   << "; retrying with backoff up to " << absl::FormatDuration(options_.max_backoff)
                   << ", quietly (the job is not affected)";
  } else {
    TLOG(kDebug) << "Kubeflow Trainer progress: " << failure.message() << "; next try in "
                 << absl::FormatDuration(backoff);
  }
  last_ok_ = false;
  return false;
}

void TrainerStatusSender::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void TrainerStatusSender::Loop() {
  while (true) {
    const absl::Time next = Step();
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    if (wake_) {
      wake_ = false;
      continue;
    }
    // The agent's clock is monotonic: wait that long in real time.
    const absl::Duration wait =
        next == absl::InfiniteFuture() ? absl::InfiniteDuration() : next - clock_->Now();
    if (wait > absl::ZeroDuration()) {
      mu_.AwaitWithTimeout(absl::Condition(this, &TrainerStatusSender::StopOrWake), wait);
    }
    if (stop_) return;
    wake_ = false;
  }
}

void TrainerStatusSender::Stop(absl::Duration flush) {
  if (stopped_) return;
  stopped_ = true;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  poster_->Cancel();
  if (thread_.joinable()) thread_.join();
  poster_->Reset();
  // A job that succeeded: its 100% is worth the rest of the gap (at most
  // min_gap of the exit), the rate rule still holds.
  absl::Duration wait;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (flush > absl::ZeroDuration() && finished_ && pending_ && leader_ && last_ok_ &&
        now < next_allowed_) {
      wait = std::min(next_allowed_ - now, options_.min_gap);
    }
  }
  if (wait > absl::ZeroDuration()) options_.sleep(wait);
  std::optional<TrainerStatus> last;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (flush > absl::ZeroDuration() && pending_ && leader_ && last_ok_ && now >= next_allowed_) {
      last = estimate_.Status(now, wall_->Now(), finished_);
      pending_ = false;
      next_allowed_ = now + options_.min_gap;
    }
  }
  if (last.has_value()) Send(*last, std::min(flush, options_.timeout));
}

TrainerStatusSender::Stats TrainerStatusSender::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace trainlet::kubeflow

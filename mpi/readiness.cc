#include "mpi/readiness.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

constexpr int kMaxNamedWorkers = 10;
constexpr size_t kMaxIdInMessage = 64;
constexpr size_t kMaxDetailInMessage = 200;

// How long to block for real before looking at the clock again. Every probe
// result and Cancel wake the waiters at once; the timeout only matters while
// nothing happens (a backoff with the real clock), and its cap keeps a
// clock that moves by other means (a test's) from stalling anyone.
absl::Duration RealWait(absl::Duration until_due) {
  return std::clamp(until_due, absl::Milliseconds(1), absl::Seconds(1));
}

std::string ShownId(const ProbeTarget& target) {
  return SafeForLog(target.node_id.empty() ? target.name : target.node_id, kMaxIdInMessage);
}

// The prober escapes what it got from outside; a detail that is printable
// ASCII is only cut (escaping it again would double its backslashes).
std::string ShownDetail(const std::string& detail) {
  const bool printable = std::all_of(detail.begin(), detail.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (!printable) return SafeForLog(detail, kMaxDetailInMessage);
  if (detail.size() <= kMaxDetailInMessage) return detail;
  return absl::StrCat(detail.substr(0, kMaxDetailInMessage), "...(+",
                      detail.size() - kMaxDetailInMessage, " bytes)");
}

// What to check, for each reason a worker may still be pending.
absl::string_view Advice(ProbeStage stage) {
  switch (stage) {
    case ProbeStage::kOk:
      return "";
    case ProbeStage::kDns:
      return "DNS: check that the worker pods are running and that their names resolve from the "
             "launcher (the headless Service and the pods' subdomain)";
    case ProbeStage::kConnect:
      return "connect: check that `trainlet mpi-worker` runs on the worker and that its sshd "
             "listens on the port (its log says), and that no NetworkPolicy blocks the port";
    case ProbeStage::kHandshake:
      return "SSH handshake: something answers on the port but the SSH handshake failed; check "
             "that the port is the workers' sshd port";
    case ProbeStage::kHostKey:
      return "host key mismatch: the worker presents a host key other than the one it pinned "
             "through the rendezvous; a pod was replaced without rejoining, or something else "
             "answers at that address. Do not disable host key checking; restart the job";
    case ProbeStage::kAuth:
      return "auth: the worker's sshd refused the job key; check that the worker uses this "
             "job's keys (the same Secret or rendezvous) and runs as the same user";
    case ProbeStage::kCommand:
      return "command: logging in works but `true` did not run, or not in time; check the "
             "login shell and its start-up files (bash runs ~/.bashrc for ssh commands: a slow "
             "conda or pyenv init there delays every probe and every mpirun launch), a "
             "ForceCommand, and the worker's sshd log";
  }
  return "";
}

}  // namespace

ReadinessWaiter::ReadinessWaiter(SshProber* prober, Clock* clock, ReadinessOptions options)
    : prober_(prober), clock_(clock), options_(options) {}

ReadinessWaiter::~ReadinessWaiter() {
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    ++events_;
  }
  JoinThreads();
}

void ReadinessWaiter::JoinThreads() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void ReadinessWaiter::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  ++events_;
}

ReadinessWaiter::Stats ReadinessWaiter::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.attempts = attempts_;
  return stats;
}

bool ReadinessWaiter::ShouldWake(WakeArgs* args) {
  return args->self->events_ != args->seen || args->self->cancelled_ || args->self->finished_;
}

int ReadinessWaiter::PendingCountLocked() const {
  return static_cast<int>(
      std::count_if(targets_.begin(), targets_.end(), [](const Target& t) { return !t.ok; }));
}

std::string ReadinessWaiter::PendingListLocked() const {
  std::vector<std::string> named;
  int more = 0;
  for (const Target& t : targets_) {
    if (t.ok) continue;
    if (static_cast<int>(named.size()) >= kMaxNamedWorkers) {
      ++more;
      continue;
    }
    if (t.attempts == 0 || (t.attempts == 1 && t.in_flight)) {
      named.push_back(absl::StrCat(ShownId(t.target), " (not probed yet)"));
    } else {
      named.push_back(absl::StrCat(ShownId(t.target), " (", ProbeStageName(t.last.stage), ": ",
                                   ShownDetail(t.last.detail), ")"));
    }
  }
  std::string out = absl::StrJoin(named, ", ");
  if (more > 0) absl::StrAppend(&out, " and ", more, " more");
  return out;
}

std::string ReadinessWaiter::DeadlineMessageLocked() const {
  std::set<ProbeStage> stages;
  bool unprobed = false;
  for (const Target& t : targets_) {
    if (t.ok) continue;
    if (t.attempts == 0 || (t.attempts == 1 && t.in_flight)) {
      unprobed = true;
    } else {
      stages.insert(t.last.stage);
    }
  }
  std::string message = absl::StrCat(PendingCountLocked(), " of ", targets_.size(),
                                     " MPI workers were not reachable over SSH within ",
                                     absl::FormatDuration(options_.timeout),
                                     " (--ready-timeout): ", PendingListLocked(), ".");
  for (ProbeStage stage : stages) absl::StrAppend(&message, " ", Advice(stage), ".");
  if (unprobed)
    absl::StrAppend(&message, " Some workers were never probed: raise --ready-timeout.");
  return message;
}

void ReadinessWaiter::MaybeLogProgressLocked(absl::Time now) {
  if (now < next_log_ || now >= deadline_ || PendingCountLocked() == 0) return;
  TLOG(kInfo) << "waiting for " << PendingCountLocked() << "/" << targets_.size()
              << " workers: " << PendingListLocked() << "; "
              << absl::FormatDuration(absl::Seconds(absl::ToInt64Seconds(deadline_ - now)))
              << " left";
  next_log_ = now + options_.log_interval;
}

void ReadinessWaiter::RecordLocked(size_t index, absl::Time started, bool cut, ProbeResult result) {
  Target& t = targets_[index];
  t.in_flight = false;
  ++events_;
  // An attempt the bound cut short and ran into says only that time ran
  // out ("Timeout connecting"): the failure before it (a host key
  // mismatch, say) is what the final message names.
  const bool says_less = cut && result.stage != ProbeStage::kOk && t.attempts > 1 &&
                         t.last.stage != ProbeStage::kOk && clock_->Now() >= deadline_;
  if (!says_less) t.last = std::move(result);
  if (t.last.stage == ProbeStage::kOk) {
    t.ok = true;
    return;
  }
  t.next_attempt = started + t.backoff;
  t.backoff = std::min(t.backoff * 2, options_.max_backoff);
  if (t.last.stage == ProbeStage::kHostKey && t.last.detail != t.warned_host_key) {
    t.warned_host_key = t.last.detail;
    TLOG(kWarning) << "MPI worker " << ShownId(t.target)
                   << " presents a host key other than the one it pinned: "
                   << ShownDetail(t.last.detail)
                   << "; retrying in case the pod is being replaced, but mpirun will not start "
                      "with this key";
  }
}

void ReadinessWaiter::ProbeLoop() {
  absl::MutexLock lock(&mu_);
  while (!finished_ && !cancelled_) {
    const absl::Time now = clock_->Now();
    // The due target that has waited longest.
    int due = -1;
    absl::Time earliest = absl::InfiniteFuture();
    for (size_t i = 0; i < targets_.size(); ++i) {
      const Target& t = targets_[i];
      if (t.ok || t.in_flight) continue;
      if (t.next_attempt < earliest) {
        earliest = t.next_attempt;
        if (t.next_attempt <= now) due = static_cast<int>(i);
      }
    }
    const absl::Duration left = deadline_ - now;
    if (due >= 0 && left > absl::ZeroDuration()) {
      Target& t = targets_[due];
      t.in_flight = true;
      ++t.attempts;
      ++attempts_;
      const ProbeTarget target = t.target;
      const absl::Duration timeout = std::min(options_.attempt_timeout, left);
      mu_.Unlock();
      ProbeResult result = prober_->Probe(target, timeout);
      mu_.Lock();
      RecordLocked(due, now, timeout < options_.attempt_timeout, std::move(result));
      // Here too, not only in Wait's loop: whoever sees the clock move logs.
      MaybeLogProgressLocked(clock_->Now());
      continue;
    }
    WakeArgs args{this, events_};
    mu_.AwaitWithTimeout(absl::Condition(&ShouldWake, &args),
                         RealWait(std::min(earliest, deadline_) - now));
  }
}

absl::Status ReadinessWaiter::Wait(const std::vector<ProbeTarget>& targets) {
  if (options_.timeout <= absl::ZeroDuration() ||
      options_.attempt_timeout <= absl::ZeroDuration() ||
      options_.log_interval <= absl::ZeroDuration() ||
      options_.min_backoff < absl::ZeroDuration() || options_.max_backoff < options_.min_backoff)
    return absl::InvalidArgumentError(
        absl::StrCat("readiness options: the timeout (", absl::FormatDuration(options_.timeout),
                     "), attempt timeout (", absl::FormatDuration(options_.attempt_timeout),
                     ") and log interval (", absl::FormatDuration(options_.log_interval),
                     ") must be positive, and 0 <= min backoff <= max backoff"));
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("the wait for the MPI workers was cancelled");
  }
  JoinThreads();  // a cancelled earlier Wait's probes

  const absl::Time start = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    targets_.clear();
    for (const ProbeTarget& target : targets) {
      Target t;
      t.target = target;
      t.backoff = options_.min_backoff;
      targets_.push_back(std::move(t));
    }
    deadline_ = start + options_.timeout;
    next_log_ = start + options_.log_interval;
    finished_ = false;
  }
  const size_t pool =
      std::min(targets.size(), static_cast<size_t>(std::max(options_.parallelism, 1)));
  for (size_t i = 0; i < pool; ++i) threads_.emplace_back([this] { ProbeLoop(); });

  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      const absl::Time now = clock_->Now();
      if (cancelled_) {
        status = absl::CancelledError("the wait for the MPI workers was cancelled");
        break;
      }
      if (PendingCountLocked() == 0) {
        TLOG(kInfo) << "all " << targets_.size() << " MPI workers accept SSH after "
                    << absl::FormatDuration(now - start);
        break;
      }
      if (now >= deadline_) {
        // Probes still in flight end by the bound (their timeout was cut to
        // it); their answers count.
        const bool in_flight = std::any_of(targets_.begin(), targets_.end(),
                                           [](const Target& t) { return t.in_flight; });
        if (!in_flight) {
          status = absl::DeadlineExceededError(DeadlineMessageLocked());
          break;
        }
      }
      MaybeLogProgressLocked(now);
      WakeArgs args{this, events_};
      mu_.AwaitWithTimeout(absl::Condition(&ShouldWake, &args),
                           RealWait(std::min(next_log_, deadline_) - now));
    }
    finished_ = true;
    ++events_;
  }
  // A cancelled wait returns at once; its probes in flight are joined later.
  if (!absl::IsCancelled(status)) JoinThreads();
  return status;
}

}  // namespace trainlet::mpi

#include "launcher/testing/fake_worker_group.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainlet::launcher::testing {

absl::Status FakeWorkerGroup::Start(const std::vector<ProcessSpec>& workers) {
  if (running_workers() > 0) {
    return absl::FailedPreconditionError("Start() while workers are running");
  }
  if (!start_error.ok()) {
    absl::Status error = start_error;
    start_error = absl::OkStatus();
    return error;
  }
  starts.push_back(workers);
  workers_.clear();
  for (const ProcessSpec& spec : workers) workers_.push_back({spec, true});
  if (on_start) on_start(workers);
  return absl::OkStatus();
}

absl::Status FakeWorkerGroup::StartHelper(const ProcessSpec& helper) {
  return absl::UnimplementedError("FakeWorkerGroup has no helpers");
}

WorkerGroup::Event FakeWorkerGroup::Wait(absl::Duration timeout) {
  ++wait_calls;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!events_.empty()) {
      Event e = events_.front();
      events_.pop_front();
      idle_waits_ = 0;
      return e;
    }
    if (!signals_.empty()) {
      Event e;
      e.type = EventType::kSignal;
      e.signal = signals_.front();
      signals_.pop_front();
      idle_waits_ = 0;
      return e;
    }
    if (wake_.exchange(false)) {
      idle_waits_ = 0;
      return Event{EventType::kWakeup};
    }
    if (attempt == 0 && on_idle) on_idle();
  }
  if (++idle_waits_ > kMaxIdleWaits) {
    ADD_FAILURE() << "the agent waited " << kMaxIdleWaits << " times with nothing to do";
    // Break the loop: a signal makes any agent finish.
    Event e;
    e.type = EventType::kSignal;
    e.signal = SIGKILL;
    return e;
  }
  if (timeout == absl::InfiniteDuration()) timeout = absl::Seconds(1);
  clock_->Advance(std::max(timeout, absl::Milliseconds(1)));
  return Event{EventType::kTimeout};
}

void FakeWorkerGroup::QueueExit(Worker& w, int code) {
  if (!w.running) return;
  w.running = false;
  Event e;
  e.type = EventType::kWorkerExited;
  e.exit.role = ProcessRole::kWorker;
  e.exit.name = w.spec.name;
  e.exit.local_rank = w.spec.local_rank;
  e.exit.global_rank = w.spec.global_rank;
  e.exit.pid = next_pid_++;
  e.exit.exit_code = code;
  events_.push_back(e);
  if (running_workers() == 0) events_.push_back(Event{EventType::kWorkersGone});
}

void FakeWorkerGroup::SignalWorkers(int sig) {
  signals_sent.push_back(sig);
  const bool terminate = sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
  if (sig == SIGKILL || (terminate && !ignore_terminate)) {
    for (Worker& w : workers_) QueueExit(w, 128 + sig);
  }
}

int FakeWorkerGroup::running_workers() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }));
}

pid_t FakeWorkerGroup::worker_pid(int local_rank) const {
  for (const Worker& w : workers_) {
    if (w.spec.local_rank == local_rank && w.running) return 4000 + local_rank;
  }
  return -1;
}

void FakeWorkerGroup::Exit(int local_rank, int code) {
  for (Worker& w : workers_) {
    if (w.spec.local_rank == local_rank) QueueExit(w, code);
  }
}

void FakeWorkerGroup::ExitAll(int code) {
  for (Worker& w : workers_) QueueExit(w, code);
}

void FakeWorkerGroup::Signal(int sig) { signals_.push_back(sig); }

}  // namespace trainlet::launcher::testing

// A scripted launcher::WorkerGroup for unit tests of the agent's round: no
// processes, a simulated clock, and hooks that let a test decide how the
// "workers" behave.
//
// Wait() returns queued events first (exits, kWorkersGone, signals, then a
// pending wakeup); with nothing queued it runs the `on_idle` hook once, and
// if that queued nothing either, it advances the clock by the timeout and
// returns kTimeout. So a test's whole scenario runs on the test thread,
// deterministically, without sleeping. After kMaxIdleWaits consecutive idle
// waits it fails the test (the agent would wait forever).
//
// Worker behaviour on signals (the defaults are those of a plain worker):
// SIGTERM/SIGINT/SIGHUP/SIGQUIT make every running worker exit 128+N unless
// `ignore_terminate`; SIGKILL always kills them (137). Exits caused by a
// signal are queued at once.
//
// Threading: Wake() may be called from any thread; everything else from the
// agent's thread (the test thread).
#ifndef TRAINLET_LAUNCHER_TESTING_FAKE_WORKER_GROUP_H_
#define TRAINLET_LAUNCHER_TESTING_FAKE_WORKER_GROUP_H_

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "launcher/worker_group.h"

namespace trainlet::launcher::testing {

class FakeWorkerGroup : public WorkerGroup {
 public:
  static constexpr int kMaxIdleWaits = 100000;

  explicit FakeWorkerGroup(SimulatedClock* clock) : clock_(clock) {}

  // WorkerGroup.
  absl::Status Start(const std::vector<ProcessSpec>& workers) override;
  absl::Status StartHelper(const ProcessSpec& helper) override;
  Event Wait(absl::Duration timeout) override;
  void Wake() override { wake_.store(true); }
  void WatchFd(int fd, int slot) override { watched_fds.emplace_back(slot, fd); }
  void SignalWorkers(int sig) override;
  int running_workers() const override;
  // A made-up pid (4000 + local_rank) while the worker runs.
  pid_t worker_pid(int local_rank) const override;
  std::vector<std::string> OutputTail(int local_rank) const override { return output_tail; }
  // Standbys: recorded; StartStandby fails with `standby_error` when set.
  absl::Status StartStandby(const ProcessSpec& spec, const std::string& boot) override {
    (void)boot;
    if (!standby_error.ok()) return standby_error;
    standbys_started.push_back(spec);
    return absl::OkStatus();
  }
  void DropStandbys(const std::string& why) override { standbys_dropped.push_back(why); }

  // ---- Test controls.
  // The worker with `local_rank` of the latest Start() exits with `code`.
  void Exit(int local_rank, int code);
  // Every running worker exits with `code`.
  void ExitAll(int code);
  // The agent receives `sig`.
  void Signal(int sig);

  // Called by Wait() when nothing is queued, before time advances.
  std::function<void()> on_idle;
  // Called after every Start() (e.g. to make a worker fail at once).
  std::function<void(const std::vector<ProcessSpec>&)> on_start;
  // The next Start() fails with this (then it is cleared).
  absl::Status start_error;
  // Workers do not exit on SIGTERM/SIGINT/... (only SIGKILL kills them).
  bool ignore_terminate = false;
  // What OutputTail() answers for every worker.
  std::vector<std::string> output_tail;

  // What the agent did.
  std::vector<std::vector<ProcessSpec>> starts;
  absl::Status standby_error = absl::OkStatus();
  std::vector<ProcessSpec> standbys_started;
  std::vector<std::string> standbys_dropped;
  std::vector<int> signals_sent;
  int wait_calls = 0;
  std::vector<std::pair<int, int>> watched_fds;  // (slot, fd) of each WatchFd call

 private:
  struct Worker {
    ProcessSpec spec;
    bool running = true;
  };
  void QueueExit(Worker& w, int code);

  SimulatedClock* const clock_;
  std::vector<Worker> workers_;
  std::deque<Event> events_;
  std::deque<int> signals_;
  std::atomic<bool> wake_{false};
  int idle_waits_ = 0;
  int next_pid_ = 1000;
};

}  // namespace trainlet::launcher::testing

#endif  // TRAINLET_LAUNCHER_TESTING_FAKE_WORKER_GROUP_H_

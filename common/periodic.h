// Runs a function every `interval` on one owned thread until destroyed
// (the destructor stops and joins it).
#ifndef TRAINLET_COMMON_PERIODIC_H_
#define TRAINLET_COMMON_PERIODIC_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace trainlet {

class PeriodicThread {
 public:
  PeriodicThread(absl::Duration interval, std::function<void()> fn)
      : thread_([this, interval, fn = std::move(fn)] {
          while (!stop_.WaitForNotificationWithTimeout(interval)) fn();
        }) {}
  ~PeriodicThread() {
    stop_.Notify();
    thread_.join();
  }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace trainlet

#endif  // TRAINLET_COMMON_PERIODIC_H_

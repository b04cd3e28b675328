// A DatagramSender for tests of the coordinator core: records every
// datagram it is handed, in order, and sends nothing.
#ifndef TRAINLET_RENDEZVOUS_TESTING_RECORDING_DATAGRAM_SENDER_H_
#define TRAINLET_RENDEZVOUS_TESTING_RECORDING_DATAGRAM_SENDER_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/coordinator.h"

namespace trainlet::rendezvous {

class RecordingDatagramSender : public DatagramSender {
 public:
  void Send(std::vector<OutgoingDatagram> datagrams) override {
    absl::MutexLock lock(&mu_);
    for (OutgoingDatagram& d : datagrams) sent_.push_back(d);
  }
  std::vector<OutgoingDatagram> sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<OutgoingDatagram> sent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TESTING_RECORDING_DATAGRAM_SENDER_H_

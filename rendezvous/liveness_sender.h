// LivenessSender: the agent's end of the UDP liveness plane. A UDP socket,
// non-blocking and connected to the coordinator's liveness port (the host
// the agent dials, resolved once), that sends one datagram per call and
// never waits: a datagram the kernel cannot take at once is dropped (the
// next one follows an interval later).
//
// Threading: Connect from any thread (it may block on DNS); Send is
// thread-safe and never blocks.
#ifndef TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_
#define TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rendezvous/liveness_datagram.h"

namespace trainlet::rendezvous {

class LivenessSender {
 public:
  // `target` is the coordinator's gRPC "host:port" / "[v6]:port" (its host
  // part is used); `udp_port` is Assignment.liveness_udp_port.
  static absl::StatusOr<std::unique_ptr<LivenessSender>> Connect(absl::string_view target,
                                                                 int udp_port);
  ~LivenessSender();
  LivenessSender(const LivenessSender&) = delete;
  LivenessSender& operator=(const LivenessSender&) = delete;

  int udp_port() const { return udp_port_; }
  // The connected socket (for a poll: readable when Receive has something).
  int fd() const { return fd_; }
  // False when the kernel refused it (buffer full, no route, ICMP refused).
  bool Send(const LivenessBytes& datagram);
  // Appends up to `max` datagrams queued on the socket (from the
  // coordinator's address only: the socket is connected): those exactly
  // kLivenessDatagramBytes long to `out`, longer ones up to
  // kMaxDirectiveDatagramBytes to `directives` (may be null: dropped), any
  // other dropped; never blocks.
  void Receive(std::vector<LivenessBytes>* out, int max,
               std::vector<std::string>* directives = nullptr);
  int64_t sent() const { return sent_.load(); }

 private:
  LivenessSender(int fd, int udp_port) : fd_(fd), udp_port_(udp_port) {}
  const int fd_;
  const int udp_port_;
  std::atomic<int64_t> sent_{0};
};

// The host part of "host:port" or "[v6]:port" (the whole text without a
// port).
std::string HostOfTarget(absl::string_view target);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_

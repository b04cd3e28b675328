// LivenessSender: the agent's end of the UDP liveness plane. A UDP socket,
// non-blocking and connected to the coordinator's liveness port (the host
// the agent dials, resolved once), that sends one datagram per call and
// never waits: a datagram the kernel cannot take at once is dropped (the
// next one follows an interval later).
//
// One thread of its own ("liveness answer") is the socket's only reader: it
// answers the coordinator's stream-loss PROBEs at once, under the identity
// of the agent's latest assignment (SetIdentity), whatever the agent's main
// loop is doing (stopping or starting workers, a slow turn on a loaded
// host), and queues everything else (acks, REJOINs, DIRECTIVE datagrams)
// for Receive, signalling fd(). docs/protocol.md, "Stream loss".
//
// Threading: Connect from any thread (it may block on DNS); every other
// method is thread-safe, and none blocks.
#ifndef TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_
#define TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/liveness_datagram.h"

namespace trainlet::rendezvous {

// The coordinator's datagrams the answering thread holds for Receive at
// most; beyond it (a flood from a spoofed address), new ones are dropped.
inline constexpr size_t kMaxQueuedLivenessDatagrams = 256;

class LivenessSender {
 public:
  // `target` is the coordinator's gRPC "host:port" / "[v6]:port" (its host
  // part is used); `udp_port` is Assignment.liveness_udp_port. Starts the
  // answering thread.
  static absl::StatusOr<std::unique_ptr<LivenessSender>> Connect(absl::string_view target,
                                                                 int udp_port);
  // Stops and joins the answering thread.
  ~LivenessSender();
  LivenessSender(const LivenessSender&) = delete;
  LivenessSender& operator=(const LivenessSender&) = delete;

  int udp_port() const { return udp_port_; }
  // For a poll: readable while Receive has something.
  int fd() const { return ready_fd_; }
  // False when the kernel refused it (buffer full, no route, ICMP refused).
  bool Send(const LivenessBytes& datagram);
  // Appends up to `max` of the coordinator's datagrams received so far (the
  // socket is connected: from its address only), in order: those exactly
  // kLivenessDatagramBytes long to `out`, longer ones up to
  // kMaxDirectiveDatagramBytes to `directives` (may be null: dropped); any
  // other was dropped on arrival, and so are PROBEs (answered). Never blocks.
  void Receive(std::vector<LivenessBytes>* out, int max,
               std::vector<std::string>* directives = nullptr);
  // This agent as the coordinator knows it (the slot and key of its latest
  // Assignment, its incarnation): PROBEs for it, under that key, are
  // answered from now on; any other PROBE is dropped.
  void SetIdentity(uint32_t slot, uint64_t incarnation, const LivenessKey& key);
  int64_t sent() const { return sent_.load(); }
  int64_t probes_answered() const { return probes_answered_.load(); }

 private:
  struct Identity {
    uint32_t slot = 0;
    uint64_t incarnation = 0;
    LivenessKey key{};
  };
  LivenessSender(int fd, int udp_port) : fd_(fd), udp_port_(udp_port) {}
  // The answering thread: reads the socket until the stop pipe is written.
  void Loop();
  // Answers the datagram in `data` when it is a probe for this agent.
  void Answer(const uint8_t* data, size_t size);

  const int fd_;
  const int udp_port_;
  int ready_fd_ = -1;       // eventfd: Receive has something.
  int stop_[2] = {-1, -1};  // pipe: the thread ends.
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> probes_answered_{0};
  absl::Mutex mu_;
  std::optional<Identity> identity_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The host part of "host:port" or "[v6]:port" (the whole text without a
// port).
std::string HostOfTarget(absl::string_view target);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_LIVENESS_SENDER_H_

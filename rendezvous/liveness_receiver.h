// LivenessReceiver: the coordinator's UDP liveness plane (docs/protocol.md,
// "Liveness", with its acks). It binds a UDP socket on the coordinator's address
// and the same port number as its gRPC listener, and one "liveness" thread
// hands the members' datagrams (liveness_datagram.h) to the core in batches:
//
//   poll -> wait kLivenessCoalesce (protocol.h; one wake-up carries many
//           datagrams; not while a stream-loss probe is out)
//     -> read the ICMP errors (IP_RECVERR): a PROBE that a port unreachable
//        quotes back goes to Coordinator::NoteProbesRefused
//     -> drain with recvmmsg (non-blocking, up to kLivenessBatch at a time)
//     -> parse each (size, magic, version), drop the malformed
//     -> Coordinator::NoteLivenessBatch (one lock per batch), which also
//        makes the acks due
//     -> sendmmsg the acks to where their datagrams came from (non-blocking:
//        an ack the kernel cannot take is dropped; the agent falls back to
//        Reports when acks stop)
//     -> while a probe is out: Coordinator::CheckProbes with the time the
//        drain began, and poll no longer than until its next deadline
//
// It is also the core's DatagramSender: REJOIN and DIRECTIVE datagrams go out
// from the socket each member's datagrams came in on, on the thread that made
// them (sendmmsg; a full buffer is waited on at most 200 ms in all, then the
// rest is dropped: the core sends again what is not confirmed); a PROBE
// among them wakes the liveness thread to keep the probe's time. Everything
// received is bounded; rejected datagrams are counted and logged at most a
// few times per 10 s, never acted on.
//
// Threading: Start and the destructor from the owner's thread; stats() from
// any thread. The core must outlive the receiver.
#ifndef TRAINLET_RENDEZVOUS_LIVENESS_RECEIVER_H_
#define TRAINLET_RENDEZVOUS_LIVENESS_RECEIVER_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "rendezvous/coordinator.h"

namespace trainlet::rendezvous {

// Datagrams received per recvmmsg call (and at most 16 calls per batch).
inline constexpr int kLivenessBatch = 64;

struct LivenessReceiverStats {
  int64_t received = 0;
  int64_t accepted = 0;
  int64_t malformed = 0;  // wrong size, magic or version.
  int64_t rejected = 0;   // well-formed, but the core refused it (slot, MAC, incarnation, seq).
  int64_t batches = 0;    // core lock acquisitions.
  int64_t acks_sent = 0;  // acks the kernel took (and REJOINs repeated for an alive datagram).
  int64_t sent = 0;       // REJOINs sent unasked (DatagramSender) the kernel took.
  int64_t probes_answered = 0;  // answers to a stream-loss probe out (among the accepted).
  int64_t icmp_errors = 0;      // ICMP errors read from the sockets' error queues.
  int64_t probes_refused = 0;   // ... that quoted a probe out, whose member was then lost.
};

class LivenessReceiver : public DatagramSender {
 public:
  // Binds UDP `host`:`port` (host as for ListenAddress: "", "0.0.0.0",
  // "::" and "*" mean every address, dual stack where IPv6 exists) and
  // starts the thread. The error names the address and the reason.
  static absl::StatusOr<std::unique_ptr<LivenessReceiver>> Start(const std::string& host, int port,
                                                                 Coordinator* core);
  ~LivenessReceiver() override;
  LivenessReceiver(const LivenessReceiver&) = delete;
  LivenessReceiver& operator=(const LivenessReceiver&) = delete;

  int port() const { return port_; }
  // The smallest receive buffer the kernel gave its sockets (bytes, as
  // SO_RCVBUF reports it: net.core.rmem_max caps what was asked).
  int receive_buffer_bytes() const { return receive_buffer_bytes_; }
  LivenessReceiverStats stats() const;
  // DatagramSender.
  void Send(std::vector<OutgoingDatagram> datagrams) override;

 private:
  LivenessReceiver(Coordinator* core) : core_(core) {}
  void Loop();
  // Reads `fd`'s error queue (bounded); the PROBEs that ICMP port
  // unreachable messages quoted go to `refused`.
  void DrainErrors(int fd, std::vector<LivenessDatagram>* refused);
  // Receives what is queued on `fd` (bounded); false when nothing was.
  // `from` gets each datagram's source address, index for index.
  void Drain(int fd, std::vector<LivenessDatagram>* batch, std::vector<sockaddr_storage>* from,
             int64_t* received, int64_t* malformed);
  // Sends `acks` on `fd`, each to from[ack.index]; returns how many went.
  static int SendAcks(int fd, const std::vector<LivenessAck>& acks,
                      const std::vector<sockaddr_storage>& from);

  Coordinator* const core_;
  std::vector<int> fds_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  // Send() sent a probe: the loop keeps its time (CheckProbes) from now on.
  std::atomic<bool> probe_sent_{false};
  int port_ = 0;
  int receive_buffer_bytes_ = 0;
  std::atomic<int64_t> received_{0}, accepted_{0}, malformed_{0}, rejected_{0}, batches_{0},
      acks_sent_{0}, sent_{0}, probes_answered_{0}, icmp_errors_{0}, probes_refused_{0};
  LogLimiter log_{5, absl::Seconds(10)};
  std::thread thread_;
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_LIVENESS_RECEIVER_H_

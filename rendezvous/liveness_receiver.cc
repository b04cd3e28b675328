#include "rendezvous/liveness_receiver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/net_interfaces.h"
#include "rendezvous/tcp_listener.h"

namespace trainlet::rendezvous {
namespace {

// At most this many datagrams go to the core under one lock.
constexpr int kMaxCallsPerBatch = 16;
// Receive buffer asked for (the kernel caps it at net.core.rmem_max): a
// 10,000-node job sends ~200 datagrams per coalescing wait.
constexpr int kReceiveBufferBytes = 4 << 20;
// Send buffer asked for (capped at net.core.wmem_max): a restart of a
// 10,000-node job sends 10,000 REJOINs at once.
constexpr int kSendBufferBytes = 4 << 20;
// How long Send waits for room in a full send buffer, each time and in all,
// before it drops the rest (the coordinator sends them again unless
// confirmed, kRejoinConfirmWithin later).
constexpr int kSendWaitMs = 50;
// A wake-up that finds this many datagrams is a burst: no coalescing wait
// before the next one.
constexpr int64_t kBusyBatch = 4 * kLivenessBatch;
constexpr absl::Duration kSendBudget = absl::Milliseconds(200);

}  // namespace

absl::StatusOr<std::unique_ptr<LivenessReceiver>> LivenessReceiver::Start(const std::string& host,
                                                                          int port,
                                                                          Coordinator* core) {
  std::unique_ptr<LivenessReceiver> r(new LivenessReceiver(core));
  const std::string where = absl::StrCat("UDP ", FormatHostPort(SafeForLog(host, 64), port));
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("cannot bind ", where, ": bad port"));
  }
  absl::StatusOr<std::vector<BindAddress>> resolved =
      ResolveBindAddresses(host, SOCK_DGRAM, absl::StrCat("cannot bind ", where));
  if (!resolved.ok()) return resolved.status();
  const bool wildcard = IsWildcardHost(host);
  std::string error;
  for (const BindAddress& a : *resolved) {
    const int fd = BindSocket(a, port, SOCK_DGRAM, wildcard, [](int fd) {
      const int rcvbuf = kReceiveBufferBytes;
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
      const int sndbuf = kSendBufferBytes;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    });
    if (fd < 0) {
      error = strerror(-fd);
      continue;
    }
    r->fds_.push_back(fd);
  }
  if (r->fds_.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", where, ": ", error));
  }
  r->port_ = BoundPort(r->fds_[0]);
  for (int fd : r->fds_) {
    int got = 0;
    socklen_t len = sizeof(got);
    if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 &&
        (r->receive_buffer_bytes_ == 0 || got < r->receive_buffer_bytes_)) {
      r->receive_buffer_bytes_ = got;
    }
  }
  if (pipe2(r->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("liveness receiver: pipe: ", strerror(errno)));
  }
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

LivenessReceiver::~LivenessReceiver() {
  if (thread_.joinable()) {
    const ssize_t n = write(wake_[1], "x", 1);
    (void)n;
    thread_.join();
  }
  for (int fd : fds_) close(fd);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

LivenessReceiverStats LivenessReceiver::stats() const {
  LivenessReceiverStats s;
  s.received = received_.load();
  s.accepted = accepted_.load();
  s.malformed = malformed_.load();
  s.rejected = rejected_.load();
  s.batches = batches_.load();
  s.acks_sent = acks_sent_.load();
  s.sent = sent_.load();
  return s;
}

void LivenessReceiver::Send(std::vector<OutgoingDatagram> datagrams) {
  mmsghdr msgs[kLivenessBatch];
  iovec iov[kLivenessBatch];
  int64_t sent = 0;
  size_t start = 0;
  const absl::Time give_up = absl::Now() + kSendBudget;
  while (start < datagrams.size()) {
    // A run of datagrams for the same socket, at most kLivenessBatch long.
    const int socket = datagrams[start].socket;
    size_t n = 0;
    while (start + n < datagrams.size() && n < static_cast<size_t>(kLivenessBatch) &&
           datagrams[start + n].socket == socket) {
      OutgoingDatagram& d = datagrams[start + n];
      iov[n] = {d.bytes.data(), d.bytes.size()};
      msgs[n] = {};
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
      msgs[n].msg_hdr.msg_name = &d.to;
      msgs[n].msg_hdr.msg_namelen =
          d.to.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
      ++n;
    }
    start += n;
    if (socket < 0 || socket >= static_cast<int>(fds_.size())) continue;
    const int fd = fds_[static_cast<size_t>(socket)];
    size_t done = 0;
    while (done < n) {
      const int rc = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), MSG_DONTWAIT);
      if (rc > 0) {
        sent += rc;
        done += static_cast<size_t>(rc);
        continue;
      }
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
        pollfd p = {fd, POLLOUT, 0};
        if (absl::Now() < give_up && poll(&p, 1, kSendWaitMs) > 0) continue;
        sent_.fetch_add(sent, std::memory_order_relaxed);
        return;  // still full: the rest come with the members' next datagrams.
      }
      ++done;  // this destination's error (unreachable): skip it.
    }
  }
  sent_.fetch_add(sent, std::memory_order_relaxed);
}

void LivenessReceiver::Drain(int fd, std::vector<LivenessDatagram>* batch,
                             std::vector<sockaddr_storage>* from, int64_t* received,
                             int64_t* malformed) {
  // One byte more than a datagram, so that a longer one is seen as such
  // (MSG_TRUNC in msg_flags) and rejected.
  static thread_local uint8_t bufs[kLivenessBatch][kLivenessDatagramBytes + 1];
  static thread_local sockaddr_storage addrs[kLivenessBatch];
  mmsghdr msgs[kLivenessBatch];
  iovec iov[kLivenessBatch];
  for (int calls = 0; calls < kMaxCallsPerBatch; ++calls) {
    for (int i = 0; i < kLivenessBatch; ++i) {
      iov[i] = {bufs[i], sizeof(bufs[i])};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &addrs[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
    }
    const int n = recvmmsg(fd, msgs, kLivenessBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;  // EAGAIN: drained; anything else: try at the next wake-up.
    *received += n;
    for (int i = 0; i < n; ++i) {
      const bool truncated = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
      std::optional<LivenessDatagram> d =
          truncated ? std::nullopt : ParseAgentDatagram(bufs[i], msgs[i].msg_len);
      if (d.has_value()) {
        batch->push_back(*d);
        from->push_back(addrs[i]);
      } else {
        ++*malformed;
      }
    }
    if (n < kLivenessBatch) return;
  }
}

int LivenessReceiver::SendAcks(int fd, const std::vector<LivenessAck>& acks,
                               const std::vector<sockaddr_storage>& from) {
  int sent = 0;
  mmsghdr msgs[kLivenessBatch];
  iovec iov[kLivenessBatch];
  for (size_t start = 0; start < acks.size(); start += kLivenessBatch) {
    const size_t n = std::min(acks.size() - start, static_cast<size_t>(kLivenessBatch));
    for (size_t i = 0; i < n; ++i) {
      const LivenessAck& a = acks[start + i];
      const sockaddr_storage& to = from[a.index];
      iov[i] = {const_cast<uint8_t*>(a.bytes.data()), a.bytes.size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = const_cast<sockaddr_storage*>(&to);
      msgs[i].msg_hdr.msg_namelen =
          to.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    }
    size_t done = 0;
    while (done < n) {
      const int rc = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), MSG_DONTWAIT);
      if (rc > 0) {
        sent += rc;
        done += static_cast<size_t>(rc);
        continue;
      }
      // The buffer is full: the rest wait for their members' next
      // datagrams. Any other error is this destination's (unreachable,
      // refused by a firewall): skip it, not the members after it.
      if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) return sent;
      ++done;
    }
  }
  return sent;
}

void LivenessReceiver::Loop() {
  std::vector<pollfd> polls;
  for (int fd : fds_) polls.push_back({fd, POLLIN, 0});
  polls.push_back({wake_[0], POLLIN, 0});
  std::vector<LivenessDatagram> batch;
  std::vector<sockaddr_storage> from;
  std::vector<LivenessAck> acks;
  std::vector<std::function<void()>> deferred;
  batch.reserve(kLivenessBatch * kMaxCallsPerBatch);
  bool busy = false;  // the last wake-up found a burst
  from.reserve(kLivenessBatch * kMaxCallsPerBatch);
  while (true) {
    for (pollfd& p : polls) p.revents = 0;
    const int rc = poll(polls.data(), polls.size(), -1);
    if (rc < 0 && errno != EINTR) {
      TLOG(kError) << "liveness receiver: poll: " << strerror(errno) << "; UDP liveness stops";
      return;
    }
    if (polls.back().revents != 0) return;
    // Let the datagrams of this moment gather: one wake-up, one lock, many
    // members (the delay is in the +-5% budget, protocol.h). Not while
    // a burst comes in (a restart's READYs and confirmations, thousands at
    // once): then the socket's buffer, which the kernel may cap at a few
    // hundred datagrams, is drained without a pause.
    if (!busy) absl::SleepFor(kLivenessCoalesce);
    int64_t received = 0, malformed = 0;
    for (size_t i = 0; i + 1 < polls.size(); ++i) {
      batch.clear();
      from.clear();
      acks.clear();
      Drain(polls[i].fd, &batch, &from, &received, &malformed);
      LivenessBatchStats s;
      if (!batch.empty()) {
        const LivenessOrigin origin{static_cast<int>(i), from};
        s = core_->NoteLivenessBatch(batch, &acks, &deferred, &origin);
        batches_.fetch_add(1, std::memory_order_relaxed);
      }
      if (!acks.empty()) {
        acks_sent_.fetch_add(SendAcks(polls[i].fd, acks, from), std::memory_order_relaxed);
      }
      // A round a READY closed: its answers, after this batch's acks.
      RunActions(&deferred);
      accepted_.fetch_add(s.accepted, std::memory_order_relaxed);
      rejected_.fetch_add(s.rejected(), std::memory_order_relaxed);
      if (s.rejected() > 0 || malformed > 0) {
        int64_t suppressed = 0;
        if (log_.Allow(&suppressed)) {
          TLOG(kWarning) << "liveness: ignored " << malformed << " malformed datagram(s), "
                         << s.unknown_slot << " for an unknown slot, " << s.bad_mac
                         << " with a bad MAC, " << s.wrong_incarnation
                         << " of another incarnation, " << s.stale_seq << " replayed or reordered"
                         << SuppressedNote(suppressed);
        }
      }
      malformed_.fetch_add(malformed, std::memory_order_relaxed);
      malformed = 0;
    }
    received_.fetch_add(received, std::memory_order_relaxed);
    busy = received >= kBusyBatch;
  }
}

}  // namespace trainlet::rendezvous

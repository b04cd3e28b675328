#include "rendezvous/liveness_receiver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/errqueue.h>
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

// After a send that failed with an error other than a full buffer: whether
// to skip the datagram (true), or to try it once more (false). With
// IP_RECVERR an ICMP error of an earlier datagram stays pending on the
// socket, and the next call returns it instead of sending: the first
// failure may be another destination's; a second one is this one's own.
bool SkipAfterError(bool* retried) {
  if (errno == EINTR) return false;
  if (!*retried) {
    *retried = true;
    return false;
  }
  *retried = false;
  return true;
}

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
      // ICMP errors onto the error queue, where a probe's port unreachable
      // names its member (DrainErrors). An unconnected socket gets none
      // otherwise. (IPV6_RECVERR fails on an IPv4 socket: harmless.)
      const int on = 1;
      setsockopt(fd, SOL_IP, IP_RECVERR, &on, sizeof(on));
      setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &on, sizeof(on));
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
    stopping_.store(true);
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
  s.probes_answered = probes_answered_.load();
  s.icmp_errors = icmp_errors_.load();
  s.probes_refused = probes_refused_.load();
  return s;
}

void LivenessReceiver::Send(std::vector<OutgoingDatagram> datagrams) {
  // A probe: the liveness thread keeps its time from now on (it may be
  // sleeping in poll with no deadline).
  if (std::any_of(datagrams.begin(), datagrams.end(),
                  [](const OutgoingDatagram& d) { return d.probe; })) {
    probe_sent_.store(true);
    const ssize_t n = write(wake_[1], "p", 1);
    (void)n;  // a full pipe already wakes it
  }
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
    bool retried = false;
    while (done < n) {
      const int rc = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), MSG_DONTWAIT);
      if (rc > 0) {
        sent += rc;
        done += static_cast<size_t>(rc);
        retried = false;
        continue;
      }
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
        pollfd p = {fd, POLLOUT, 0};
        if (absl::Now() < give_up && poll(&p, 1, kSendWaitMs) > 0) continue;
        sent_.fetch_add(sent, std::memory_order_relaxed);
        return;  // still full: the rest come with the members' next datagrams.
      }
      if (SkipAfterError(&retried)) ++done;  // this destination's error (unreachable)
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
  bool error_seen = false;
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
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && !error_seen) {
      // An ICMP error pending on the socket (IP_RECVERR) is returned once,
      // instead of the datagrams: read on.
      error_seen = true;
      continue;
    }
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
    bool retried = false;
    while (done < n) {
      const int rc = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), MSG_DONTWAIT);
      if (rc > 0) {
        sent += rc;
        done += static_cast<size_t>(rc);
        retried = false;
        continue;
      }
      // The buffer is full: the rest wait for their members' next
      // datagrams. Any other error is this destination's (unreachable,
      // refused by a firewall): skip it, not the members after it.
      if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) return sent;
      if (SkipAfterError(&retried)) ++done;
    }
  }
  return sent;
}

void LivenessReceiver::DrainErrors(int fd, std::vector<LivenessDatagram>* refused) {
  // An ICMP message quotes the start of the datagram it answers, which the
  // kernel gives back as the data; one byte more than a datagram shows a
  // longer one (not a probe) as truncated.
  uint8_t buf[kLivenessDatagramBytes + 1];
  alignas(cmsghdr) char control[256];
  int64_t errors = 0;
  for (int i = 0; i < kLivenessBatch; ++i) {
    sockaddr_storage to;
    iovec iov = {buf, sizeof(buf)};
    msghdr msg = {};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof(to);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: the queue is empty.
    ++errors;
    bool port_unreachable = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      const bool recverr = (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                           (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
      if (!recverr || c->cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) continue;
      sock_extended_err e;
      std::memcpy(&e, CMSG_DATA(c), sizeof(e));
      port_unreachable = e.ee_errno == ECONNREFUSED &&
                         (e.ee_origin == SO_EE_ORIGIN_ICMP || e.ee_origin == SO_EE_ORIGIN_ICMP6);
    }
    if (!port_unreachable || (msg.msg_flags & MSG_TRUNC) != 0) continue;
    // Only a PROBE counts (the core checks that it is one out now, by its
    // nonce and MAC); an ack or a REJOIN to a gone agent is nothing new.
    std::optional<LivenessDatagram> d = ParseProbe(buf, static_cast<size_t>(n));
    if (d.has_value()) refused->push_back(*d);
  }
  icmp_errors_.fetch_add(errors, std::memory_order_relaxed);
}

void LivenessReceiver::Loop() {
  Clock* const clock = core_->clock();
  std::vector<pollfd> polls;
  for (int fd : fds_) polls.push_back({fd, POLLIN, 0});
  polls.push_back({wake_[0], POLLIN, 0});
  std::vector<LivenessDatagram> batch;
  std::vector<sockaddr_storage> from;
  std::vector<LivenessAck> acks;
  std::vector<LivenessDatagram> refused;
  std::vector<std::function<void()>> deferred;
  batch.reserve(kLivenessBatch * kMaxCallsPerBatch);
  bool busy = false;  // the last wake-up found a burst
  from.reserve(kLivenessBatch * kMaxCallsPerBatch);
  // While a stream-loss probe is out: when the core wants CheckProbes next
  // (on its clock).
  absl::Time probe_due = absl::InfiniteFuture();
  while (true) {
    int timeout_ms = -1;
    if (probe_due != absl::InfiniteFuture()) {
      // Until then, and at most a probe interval (a test's simulated clock
      // moves without waking this thread).
      const absl::Duration wait =
          std::clamp(probe_due - clock->Now(), absl::ZeroDuration(), kStreamProbeEvery);
      timeout_ms =
          static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))));
    }
    for (pollfd& p : polls) p.revents = 0;
    const int rc = poll(polls.data(), polls.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      TLOG(kError) << "liveness receiver: poll: " << strerror(errno) << "; UDP liveness stops";
      return;
    }
    if (polls.back().revents != 0) {
      char buf[64];
      while (read(wake_[0], buf, sizeof(buf)) > 0) {
      }
      if (stopping_.load()) return;
    }
    // A probe sent since the last turn, or one still out.
    const bool probing = probe_sent_.exchange(false) || probe_due != absl::InfiniteFuture();
    // Let the datagrams of this moment gather: one wake-up, one lock, many
    // members (the delay is in the +-5% budget, protocol.h). Not while
    // a burst comes in (a restart's READYs and confirmations, thousands at
    // once): then the socket's buffer, which the kernel may cap at a few
    // hundred datagrams, is drained without a pause; nor while a probe is
    // out (its answer, or its refusal, decides a member's fate at once).
    if (!busy && !probing) absl::SleepFor(kLivenessCoalesce);
    // Whatever arrived before this moment is applied below, before
    // CheckProbes judges a window that ended by then.
    const absl::Time drained_at = clock->Now();
    refused.clear();
    int64_t received = 0, malformed = 0;
    for (size_t i = 0; i + 1 < polls.size(); ++i) {
      DrainErrors(polls[i].fd, &refused);
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
      probes_answered_.fetch_add(s.probe_answers, std::memory_order_relaxed);
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
    if (!refused.empty()) {
      probes_refused_.fetch_add(core_->NoteProbesRefused(refused), std::memory_order_relaxed);
    }
    probe_due =
        probing || !refused.empty() ? core_->CheckProbes(drained_at) : absl::InfiniteFuture();
  }
}

}  // namespace trainlet::rendezvous

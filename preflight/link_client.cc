#include "preflight/link_client.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"
#include "preflight/link_wire.h"

namespace trainlet::preflight {

namespace {

constexpr size_t kChunkBytes = 256 * 1024;
constexpr absl::Duration kRetryPause = absl::Milliseconds(20);

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string text;  // "10.1.2.3:29510", "[fd00::1]:29510"
};

std::optional<Address> Numeric(absl::string_view host, int port) {
  Address a;
  std::string h(host);
  if (absl::ConsumePrefix(&host, "[") && absl::ConsumeSuffix(&host, "]")) h = std::string(host);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    a.length = sizeof(*v4);
    a.text = absl::StrCat(h, ":", port);
    return a;
  }
  if (inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    a.length = sizeof(*v6);
    a.text = absl::StrCat("[", h, "]:", port);
    return a;
  }
  return std::nullopt;
}

// The socket of one measurement, closed on every way out; Reset() closes
// it with an RST, dropping what is still queued instead of draining it.
class Socket {
 public:
  Socket() = default;
  ~Socket() { Close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  void Adopt(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  void Reset() {
    if (fd_ < 0) return;
    const linger hard{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    Close();
  }

 private:
  int fd_ = -1;
};

// Waits until `fd` is ready for `events`; false at the deadline.
bool WaitFor(int fd, short events, absl::Time deadline, Clock* clock) {
  while (true) {
    const absl::Duration left = deadline - clock->Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(
        std::clamp<int64_t>(absl::ToInt64Milliseconds(left + absl::Microseconds(999)), 1, 60000));
    const int rc = poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

bool WriteAll(int fd, absl::string_view data, absl::Time deadline, Clock* clock,
              std::string* error) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      *error = std::strerror(errno);
      return false;
    }
    if (!WaitFor(fd, POLLOUT, deadline, clock)) {
      *error = "timed out sending";
      return false;
    }
  }
  return true;
}

bool ReadExact(int fd, char* buf, size_t size, absl::Time deadline, Clock* clock,
               std::string* error) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = recv(fd, buf + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      *error = "the peer closed the connection";
      return false;
    }
    if (errno != EAGAIN && errno != EINTR) {
      *error = std::strerror(errno);
      return false;
    }
    if (!WaitFor(fd, POLLIN, deadline, clock)) {
      *error = "timed out waiting for the peer";
      return false;
    }
  }
  return true;
}

// Connects and is accepted, retrying a refused connection, a BUSY peer or
// one still at an earlier round until `deadline`. The socket in *sock;
// "" or why not.
std::string Open(const LinkIdentity& me, const std::string& to_node, const Address& addr,
                 absl::Time deadline, Clock* clock, Socket* sock, Reply* reply) {
  Hello hello;
  hello.round = me.round;
  hello.nonce = me.nonce;
  hello.job_id = me.job_id;
  hello.from_node = me.node_id;
  hello.to_node = to_node;
  const std::string hello_bytes = EncodeHello(hello);
  std::string last = "timed out";
  for (bool retry = false; clock->Now() < deadline; retry = true) {
    if (retry) {
      absl::SleepFor(
          std::min(kRetryPause, std::max(deadline - clock->Now(), absl::ZeroDuration())));
    }
    const int fd = socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::StrCat("socket: ", std::strerror(errno));
    sock->Adopt(fd);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
      if (errno != EINPROGRESS) {
        last = absl::StrCat("connect to ", addr.text, ": ", std::strerror(errno));
        continue;
      }
      if (!WaitFor(fd, POLLOUT, deadline, clock)) {
        // The deadline cut this try short: an earlier try's answer says more.
        if (!retry) last = absl::StrCat("connect to ", addr.text, ": timed out");
        break;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = absl::StrCat("connect to ", addr.text, ": ", std::strerror(err));
        continue;
      }
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string error;
    char buf[kReplyBytes];
    if (!WriteAll(fd, hello_bytes, deadline, clock, &error) ||
        !ReadExact(fd, buf, sizeof(buf), deadline, clock, &error)) {
      if (!retry || clock->Now() < deadline) last = absl::StrCat(addr.text, ": ", error);
      continue;
    }
    if (ParseReply(absl::string_view(buf, sizeof(buf)), reply, &error) != Parsed::kOk) {
      return absl::StrCat(addr.text, ": ", error);
    }
    if (reply->status == ReplyStatus::kOk) return "";
    const std::string refused =
        absl::StrCat(addr.text, " refused: ", ReplyStatusText(reply->status));
    if (reply->status == ReplyStatus::kBusy) {
      last = refused;
      continue;
    }
    if (reply->status == ReplyStatus::kWrongRound) {
      const std::string rounds =
          absl::StrCat(" (peer at round ", reply->round, ", this node at ", me.round, ")");
      if (reply->round < me.round) {  // the peer has not heard of this round yet.
        last = absl::StrCat(refused, rounds);
        continue;
      }
      return absl::StrCat(refused, rounds);
    }
    return refused;
  }
  return last;
}

// One bulk sample on an open connection: up to `declared` bytes within
// `max_time`. All of them answered by the peer's DONE, or, at the time
// limit, what the peer's kernel acknowledged (sent minus what is still
// queued here), after which the connection is reset so that nothing drains.
struct Sample {
  uint64_t bytes = 0;
  absl::Duration time;
  std::string error;
};
Sample Transfer(Socket& sock, uint64_t declared, absl::Duration max_time, Clock* clock) {
  Sample out;
  const int fd = sock.fd();
  const absl::Time start = clock->Now();
  const absl::Time stop = start + max_time;
  if (!WriteAll(fd, EncodeFrame({FrameType::kBulk, declared}), stop, clock, &out.error)) {
    return out;
  }
  const std::string chunk(static_cast<size_t>(std::min<uint64_t>(kChunkBytes, declared)), '\0');
  uint64_t sent = 0;
  std::string done_bytes;
  while (true) {
    const absl::Time now = clock->Now();
    if (now >= stop) break;
    pollfd p{fd, static_cast<short>(POLLIN | (sent < declared ? POLLOUT : 0)), 0};
    const int ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(stop - now + absl::Microseconds(999)), 1, 60000));
    const int rc = poll(&p, 1, ms);
    if (rc < 0 && errno != EINTR) {
      out.error = absl::StrCat("poll: ", std::strerror(errno));
      return out;
    }
    if (rc <= 0) continue;
    if ((p.revents & POLLOUT) != 0 && sent < declared) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), declared - sent));
      const ssize_t w = send(fd, chunk.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        out.error = std::strerror(errno);
        return out;
      }
      if (w > 0) sent += static_cast<uint64_t>(w);
    }
    if ((p.revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      char buf[kFrameBytes];
      const ssize_t r = recv(fd, buf, kFrameBytes - done_bytes.size(), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        out.error = r == 0 ? "the peer closed the connection" : std::strerror(errno);
        return out;
      }
      if (r > 0) done_bytes.append(buf, static_cast<size_t>(r));
      if (done_bytes.size() == kFrameBytes) {
        out.time = clock->Now() - start;
        Frame f;
        std::string error;
        if (ParseFrame(done_bytes, &f, &error) != Parsed::kOk || f.type != FrameType::kDone ||
            sent != declared) {
          out.error = "not a DONE frame after the data";
          return out;
        }
        out.bytes = declared;
        sock.Close();
        return out;
      }
    }
  }
  // Time is up: what the peer acknowledged is what went through.
  int queued = 0;
  if (ioctl(fd, SIOCOUTQ, &queued) != 0) queued = 0;
  out.time = clock->Now() - start;
  out.bytes = sent - std::min<uint64_t>(sent, static_cast<uint64_t>(std::max(queued, 0)));
  sock.Reset();
  return out;
}

}  // namespace

v1::LinkResult MeasureLink(const LinkIdentity& me, const v1::LinkTarget& target,
                           const MeasureOptions& options, Resolver* resolver) {
  Clock* clock = Clock::Monotonic();
  v1::LinkResult result;
  result.set_from_node(me.node_id);
  result.set_to_node(target.node_id());
  auto fail = [&result](absl::string_view error) {
    result.set_error(Truncated(error, kMaxErrorBytes));
    return result;
  };
  const absl::Time connect_deadline = clock->Now() + options.connect_timeout;
  if (target.port() <= 0 || target.port() > 65535) {
    return fail(absl::StrCat("port ", target.port(), " outside 1-65535"));
  }
  std::optional<Address> addr = Numeric(target.host(), target.port());
  if (!addr.has_value()) {
    if (resolver == nullptr) {
      return fail(absl::StrCat("\"", SafeForLog(target.host(), 64), "\" is not an address"));
    }
    std::vector<NameAnswer> answers = resolver->Resolve(
        {target.host()}, std::max(connect_deadline - clock->Now(), absl::Milliseconds(1)));
    if (answers.empty() || answers[0].addrs.empty()) {
      return fail(absl::StrCat("resolve ", SafeForLog(target.host(), 64), ": ",
                               answers.empty() ? "no answer" : SafeForLog(answers[0].error, 80)));
    }
    addr = Numeric(answers[0].addrs[0], target.port());
    if (!addr.has_value()) return fail("the resolver gave no usable address");
  }

  Socket sock;
  Reply reply;
  if (std::string error = Open(me, target.node_id(), *addr, connect_deadline, clock, &sock, &reply);
      !error.empty()) {
    return fail(error);
  }
  const int fd = sock.fd();
  std::string error;

  // Round trips: the smallest is the network's, the others carry wake-ups.
  const absl::Time ping_deadline = clock->Now() + options.ping_timeout;
  absl::Duration best = absl::InfiniteDuration();
  const int pings = std::clamp(options.pings, 0, kMaxPings);
  for (int i = 1; i <= pings; ++i) {
    const std::string ping = EncodeFrame({FrameType::kPing, static_cast<uint64_t>(i)});
    const absl::Time sent = clock->Now();
    char buf[kFrameBytes];
    Frame echo;
    if (!WriteAll(fd, ping, ping_deadline, clock, &error) ||
        !ReadExact(fd, buf, sizeof(buf), ping_deadline, clock, &error)) {
      return fail(absl::StrCat(addr->text, ": ping ", i, ": ", error));
    }
    if (ParseFrame(absl::string_view(buf, sizeof(buf)), &echo, &error) != Parsed::kOk ||
        echo.type != FrameType::kPing || echo.value != static_cast<uint64_t>(i)) {
      return fail(absl::StrCat(addr->text, ": ping ", i, ": a wrong echo"));
    }
    best = std::min(best, clock->Now() - sent);
  }
  if (pings > 0) result.set_rtt_seconds(absl::ToDoubleSeconds(best));

  // The transfer, in samples that share the budget, each on a connection of
  // its own: the best is the link's (as the smallest round trip is), since
  // a wake-up late on a busy host slows one sample, a slow link every one.
  const uint64_t budget = std::min(options.max_bytes, reply.max_bulk_bytes);
  const int samples = std::clamp(options.samples, 1, kMaxSamples);
  const uint64_t per_sample = budget / static_cast<uint64_t>(samples);
  const absl::Duration per_time = options.max_time / samples;
  if (per_sample == 0 || per_time <= absl::ZeroDuration()) return result;
  uint64_t total = 0;
  int taken = 0;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) {
      Reply again;
      const std::string error = Open(me, target.node_id(), *addr,
                                     clock->Now() + options.connect_timeout, clock, &sock, &again);
      if (!error.empty()) break;  // the samples taken stand; a refusal now is no verdict.
    }
    const Sample sample = Transfer(sock, per_sample, per_time, clock);
    if (!sample.error.empty()) {
      if (taken == 0) return fail(absl::StrCat(addr->text, ": bulk: ", sample.error));
      break;
    }
    ++taken;
    total += sample.bytes;
    const double seconds = absl::ToDoubleSeconds(sample.time);
    const double rate = seconds > 0 ? static_cast<double>(sample.bytes) / seconds : 0;
    if (taken == 1 || rate > result.bandwidth_bytes_per_second()) {
      result.set_bytes(sample.bytes);
      result.set_seconds(seconds);
      result.set_bandwidth_bytes_per_second(rate);
    }
  }
  result.set_samples(taken);
  result.set_total_bytes(total);
  return result;
}

absl::StatusOr<std::vector<v1::LinkResult>> MeasurePlan(LinkIdentity me,
                                                        const v1::NetworkPlan& plan,
                                                        const MeasureOptions& options,
                                                        Resolver* resolver) {
  if (absl::Status s = ValidatePlan(plan); !s.ok()) return s;
  me.round = plan.round();
  me.nonce = plan.nonce();
  MeasureOptions o = options;
  if (plan.max_bytes_per_link() > 0) o.max_bytes = plan.max_bytes_per_link();
  if (plan.max_millis_per_link() > 0) o.max_time = absl::Milliseconds(plan.max_millis_per_link());
  std::vector<v1::LinkResult> out;
  for (const v1::LinkTarget& t : plan.targets()) out.push_back(MeasureLink(me, t, o, resolver));
  return out;
}

}  // namespace trainlet::preflight

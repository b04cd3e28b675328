// A TCP listener that owns its listening sockets and its accept loop, for a
// gRPC server that is handed accepted connections
// (ServerBuilder::experimental().AddExternalConnectionAcceptor, FROM_FD), and
// for the controller's HTTP gate. gRPC 1.51's own accept loop stops for good
// after one EMFILE and has no connection limit; this one survives running
// out of descriptors and caps connections (TcpListener below; what a client
// sees: docs/protocol.md, "Connections").
//
//   ACCEPTING --accept4: EMFILE/ENFILE/ENOMEM--> EXHAUSTED (refuse waiting ones, back off)
//       ^  ^                                         |
//       |  +-------- reserve held, one more fd free -+
//       |
//       +-- a handed-over connection closed -- FULL <-- live connections == cap
//
// Threading: Bind, Start and Stop on the owner's thread; the accept loop runs
// on the listener's own thread, and so do the callbacks (on_connection must
// not block). accepting() and stats() are thread-safe. Stop (also run by the
// destructor) joins the thread, then closes the listening sockets.
#ifndef TRAINLET_RENDEZVOUS_TCP_LISTENER_H_
#define TRAINLET_RENDEZVOUS_TCP_LISTENER_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"

namespace trainlet::rendezvous {

// Where to listen. host: an IP literal or a name (every address it resolves
// to is bound, on the same port); "", "0.0.0.0", "::" and "*" mean every
// address, IPv4 and IPv6 (one dual-stack socket where IPv6 exists). port 0:
// any free port.
struct ListenAddress {
  std::string host;
  int port = 0;
};

// "host:port", "[v6]:port".
std::string FormatHostPort(absl::string_view host, int port);

// Where a socket of the coordinator binds; shared by the TCP listener and the
// UDP liveness receiver (liveness_receiver.h), so that both read a host the
// same way.
struct BindAddress {
  sockaddr_storage addr = {};
  socklen_t len = 0;
  int family() const { return addr.ss_family; }
  void SetPort(int port);
};
// "", "0.0.0.0", "::" and "*": every address.
bool IsWildcardHost(absl::string_view host);
// The IPv6 or IPv4 "any" address, port 0.
BindAddress WildcardAddress(int family);
// What `host` binds as, for sockets of `socktype` (SOCK_STREAM, SOCK_DGRAM):
// a wildcard host gives the IPv6 any address alone (bind it dual stack, and
// WildcardAddress(AF_INET) where IPv6 is missing: EAFNOSUPPORT); any other
// host gives every IPv4 and IPv6 address it resolves to, once each. Ports are
// 0. The error (InvalidArgument) starts with `action` ("cannot listen on
// 10.0.0.1:29400") and says why: the name does not resolve, or to no IPv4 or
// IPv6 address.
absl::StatusOr<std::vector<BindAddress>> ResolveBindAddresses(const std::string& host, int socktype,
                                                              absl::string_view action);
// A non-blocking, close-on-exec socket of `socktype` bound to `a` at `port`,
// after `configure(fd)` has set its options; -errno on failure. The address
// of a `wildcard` host is bound dual stack, and where IPv6 is missing
// (EAFNOSUPPORT) IPv4's any address is bound instead.
int BindSocket(BindAddress a, int port, int socktype, bool wildcard,
               const std::function<void(int fd)>& configure);

// True when `status` (from TcpListener::Bind, or anything built on it) failed
// because the port is taken: the agent then joins the agent that holds it, as
// torchrun's c10d rendezvous does.
bool IsAddressInUse(const absl::Status& status);

// The listener:
//  - accepts with accept4(SOCK_CLOEXEC | SOCK_NONBLOCK) on its own thread;
//  - survives running out of descriptors (EMFILE/ENFILE): it holds one
//    reserve descriptor; when accept4 fails for lack of descriptors it closes
//    the reserve, accepts the waiting connections and closes them at once (the
//    peer sees the connection end instead of hanging in the backlog, and the
//    loop does not spin on a readable socket it cannot accept), reopens the
//    reserve, and backs off (10 ms, doubling to 500 ms) before accepting again;
//  - refuses (accepts and closes at once) connections beyond
//    `max_connections`, counting the connections it handed over that are
//    still open (each remembered by descriptor number and socket inode, so a
//    closed one is noticed even when its number was reused), and connections
//    that would leave the process fewer than kDescriptorHeadroom descriptors;
//  - says whether it can accept: accepting() is false while it is out of
//    descriptors or at its connection cap, and true again once a descriptor
//    is free (probed after each backoff) and it is below the cap (rechecked
//    every 100 ms while full).
class TcpListener {
 public:
  using OnConnection = std::function<void(int fd, int listener_fd)>;  // takes the fd.
  using OnAcceptingChange = std::function<void(bool accepting)>;

  // Descriptors a connection may never take from the rest of the process.
  static constexpr int kDescriptorHeadroom = 8;

  struct Options {
    int max_connections = 1024;
    OnConnection on_connection;             // required.
    OnAcceptingChange on_accepting_change;  // optional.
    // Names the listener in log lines ("coordinator", "health").
    std::string name = "listener";
  };

  struct Stats {
    int64_t accepted = 0;           // handed to on_connection.
    int64_t refused_full = 0;       // closed at once: at the cap or the headroom.
    int64_t refused_exhausted = 0;  // closed at once: out of descriptors.
    int live = 0;                   // handed over and (as last checked) still open.
  };

  // Binds and listens on every address (backlog 4096, SO_REUSEADDR, never
  // SO_REUSEPORT: a second process on the same port must fail). Errors name
  // the address and what is wrong: Unavailable for a port in use
  // (IsAddressInUse), InvalidArgument for an address that is not local or
  // does not resolve, ResourceExhausted when out of descriptors,
  // PermissionDenied for a privileged port.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Bind(
      const std::vector<ListenAddress>& addresses);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // The port bound for addresses[i].
  int port(size_t i) const { return ports_.at(i); }

  // Starts the accept loop. Call once.
  void Start(Options options);
  // Stops accepting: joins the loop's thread, closes the listening sockets
  // (new connections are refused by the kernel). Idempotent.
  void Stop();

  bool accepting() const { return accepting_.load(); }
  Stats stats() const;

 private:
  struct Socket {
    int fd = -1;
    std::string address;  // for log lines.
  };
  enum class State { kAccepting, kFull, kExhausted };

  TcpListener() = default;
  void Loop();
  // Accepts what is waiting on `s`; false when out of descriptors.
  bool AcceptAll(const Socket& s);
  // Refuses what waits on `s` using the reserve descriptor.
  void RefuseWaiting(const Socket& s);
  // Drops handed-over connections that are closed; `force` skips the rate limit.
  void Purge(bool force);
  // True when the reserve is held and one more descriptor can be had.
  bool DescriptorFree();
  void SetState(State state, absl::string_view why);

  std::vector<Socket> sockets_;
  std::vector<int> ports_;
  Options options_;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the loop.
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> accepting_{true};
  bool started_ = false;
  bool stopped_ = false;

  // Loop-thread state.
  int reserve_fd_ = -1;
  int descriptor_limit_ = 0;
  State state_ = State::kAccepting;
  absl::Duration backoff_ = absl::ZeroDuration();
  absl::Time last_purge_ = absl::InfinitePast();
  std::unordered_map<int, std::pair<dev_t, ino_t>> live_;
  LogLimiter log_limiter_{4, absl::Seconds(10)};

  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TCP_LISTENER_H_

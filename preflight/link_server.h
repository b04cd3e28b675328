// The server side of the link measurer: every agent runs one, and its ring
// neighbours connect to it to time a few ping-pongs and a bounded bulk
// transfer (link_wire.h has the exchange, link_client.h the other side).
//
// One thread serves every connection from one poll(2) loop, each
// connection a small state machine:
//
//   accept --> HELLO --valid, key, round--> REPLY(ok) --> FRAMES <--PING/echo--+
//                |                                         |   -------------+
//                +--anything else--> REPLY(why) --> close   +--BULK n--> BULK --n bytes--> DONE
//                --> close
//
// and every connection is bounded: a whole hello within hello_timeout, the
// whole exchange within connection_timeout, at most max_pings pings, a BULK
// of at most max_bulk_bytes, at most max_connections at once (more are
// answered BUSY and closed). Whatever a peer sends is validated; a peer
// that breaks a rule is closed, never waited for. Refusals are counted and
// logged rate-limited at DEBUG.
//
// Thread-safe: SetRound and stats from any thread; the destructor stops
// the loop, joins it and closes every socket.
#ifndef TRAINLET_PREFLIGHT_LINK_SERVER_H_
#define TRAINLET_PREFLIGHT_LINK_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainlet::preflight {

struct LinkServerOptions {
  std::string job_id;   // a hello naming another job is refused.
  std::string node_id;  // a hello naming another node is refused.
  // Where to listen: a numeric address ("0.0.0.0", "::", "10.1.2.3") and a
  // port (0: any free one, see port()); or, with listen_fd >= 0, that
  // socket, already bound (listening or not), which the server then owns.
  std::string host = "0.0.0.0";
  int port = 0;
  int listen_fd = -1;
  uint64_t max_bulk_bytes = uint64_t{64} << 20;
  int max_connections = 32;
  int max_pings = 64;
  absl::Duration hello_timeout = absl::Seconds(1);
  absl::Duration connection_timeout = absl::Seconds(5);
};

class LinkServer {
 public:
  static absl::StatusOr<std::unique_ptr<LinkServer>> Start(LinkServerOptions options);
  ~LinkServer();
  LinkServer(const LinkServer&) = delete;
  LinkServer& operator=(const LinkServer&) = delete;

  int port() const { return port_; }

  // Peers are accepted with this nonce (the job's link key, from an
  // Assignment or a NetworkPlan) for this round or a later one (a member
  // that has not heard of a newer round yet still serves the peers that
  // have: the nonce proves they are members); a hello of an earlier round
  // is stale. Before the first call, for none.
  void SetRound(uint64_t round, uint64_t nonce);

  struct Stats {
    uint64_t accepted = 0;        // connections accepted (busy ones too).
    uint64_t refused = 0;         // hellos refused (job, node, round, nonce, malformed) and BUSY.
    uint64_t completed = 0;       // bulk transfers received whole.
    uint64_t closed_early = 0;    // peers that broke a rule, timed out or hung up mid-way.
    uint64_t bytes_received = 0;  // bulk bytes.
  };
  Stats stats() const;

 private:
  struct Connection;
  LinkServer(LinkServerOptions options, int listen_fd, int wake_fd, int port);
  void Loop();
  // Reads/writes what `c` is ready for; false when it is to be closed.
  bool Serve(Connection& c, short revents, std::string& scratch);
  bool OnHello(Connection& c);
  bool OnFrame(Connection& c);

  const LinkServerOptions options_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd: the destructor's stop.
  const int port_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t nonce_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_LINK_SERVER_H_

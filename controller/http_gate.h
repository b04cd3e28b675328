// The front of the controller's HTTP server (http_server.h): it takes the
// connections the listener accepted, completes their TLS handshakes, reads
// each request's head (and its small body), and writes each answer, all on
// ONE thread with epoll, so that a slow client costs a descriptor and a
// buffer, never a worker thread. Only a request whose bytes have all arrived
// is handed on; the worker reads it from memory, draws its answer into
// memory and hands it back to be written.
//
//   Add(fd) --(TLS: handshake)--> READING --head (+ body) complete--> OnRequest
//     |                             |                                   |
//     +-- a peer over               +-- head_timeout, head over         | (a worker)
//         max_pending_per_peer:         max_head_bytes, body over       v
//         closed at once; over          max_body_bytes, chunked, EOF:  Send(conn)
//         max_pending: the oldest       answered 4xx where it can be,   |
//         READING one is closed         closed                          v
//         to make room                                    SENDING --all written--> closed
//                                                           |
//                                     answer_timeout, error, or pushed out (over
//                                     max_sending / max_sending_bytes: the oldest
//                                     SENDING goes first): closed, the answer cut
//
// Threading: Add(), Send() and Stop() from any thread; everything else on
// the gate's own thread, which calls OnRequest (that must not block). A
// GateConnection belongs to one thread at a time.
#ifndef TRAINLET_CONTROLLER_HTTP_GATE_H_
#define TRAINLET_CONTROLLER_HTTP_GATE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/tls_files.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace trainlet::controller {

// The server side of TLS for the views: this side's certificate and key
// from `tls`, and with `require_client_certificate` a client certificate
// that chains to tls.ca_pem (checked in the handshake). TLS 1.2 or later,
// no renegotiation. FailedPrecondition naming what OpenSSL refused.
class TlsContext {
 public:
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(const rendezvous::TlsConfig& tls,
                                                            bool require_client_certificate);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* const ctx_;
};

// One request whose bytes the gate has read, with the connection it came
// on: a worker reads those bytes (never the socket) and writes its answer
// into memory; HttpGate::Send then writes it out. Closes the connection when
// destroyed before that (the server stopping, a 503).
class GateConnection {
 public:
  GateConnection(int fd, SSL* ssl, std::string request);
  ~GateConnection();
  GateConnection(const GateConnection&) = delete;
  GateConnection& operator=(const GateConnection&) = delete;

  // The request's bytes the gate read; 0 past their end (never the socket).
  ssize_t Read(char* data, size_t size);
  // Appends to the answer; the socket is not touched.
  void Write(const char* data, size_t size) { answer_.append(data, size); }

  int fd() const { return fd_; }
  void PeerAddress(std::string* ip, int* port) const;
  void LocalAddress(std::string* ip, int* port) const;

 private:
  friend class HttpGate;
  int fd_;
  SSL* ssl_;
  const std::string request_;
  size_t consumed_ = 0;
  std::string answer_;
};

class HttpGate {
 public:
  struct Options {
    // From accept to a whole request (the TLS handshake included).
    absl::Duration head_timeout = absl::Seconds(10);
    // The request line and headers together; over it: 431.
    size_t max_head_bytes = 32 * 1024;
    // A request body (the views take none); over it: 413. Chunked: 411.
    size_t max_body_bytes = 1024;
    // Connections still sending their request, from one address (beyond,
    // a new one is closed at once) and in all (beyond, the one sending
    // longest is closed to make room: a client that sends its request at
    // once gets in beside any number of slow ones).
    int max_pending = 256;
    int max_pending_per_peer = 32;
    // From Send() to the answer's last byte written.
    absl::Duration answer_timeout = absl::Seconds(30);
    // Answers still being written, and their bytes not yet written; beyond
    // either, the oldest is cut to make room.
    int max_sending = 128;
    size_t max_sending_bytes = 64 << 20;
    // Not owned; null: plaintext.
    SSL_CTX* tls = nullptr;
  };
  // Takes a complete request; returns it back when there is no room for it
  // (the gate then answers 503 and closes it). Called on the gate's thread.
  using OnRequest = std::function<std::unique_ptr<GateConnection>(std::unique_ptr<GateConnection>)>;

  struct Stats {
    int64_t handed = 0;     // complete requests handed on.
    int64_t refused = 0;    // closed at once (over a pending cap).
    int64_t timed_out = 0;  // no whole request within head_timeout.
    int64_t bad = 0;        // answered 4xx (too large, chunked) or TLS failed.
    int64_t busy = 0;       // answered 503 (OnRequest had no room).
    int64_t evicted = 0;    // closed while reading, for a newer one (max_pending).
    int64_t sent = 0;       // answers written whole.
    int64_t dropped = 0;    // answers cut: answer_timeout, a cap, the peer gone.
    int pending = 0;        // reading now.
    int sending = 0;        // writing now.
  };

  // Starts the gate's thread. Internal when epoll or eventfd fail.
  static absl::StatusOr<std::unique_ptr<HttpGate>> Start(Options options, OnRequest on_request);
  ~HttpGate();
  HttpGate(const HttpGate&) = delete;
  HttpGate& operator=(const HttpGate&) = delete;

  // Takes an accepted, non-blocking socket (the listener's callback).
  void Add(int fd);
  // Writes the answer a worker drew into `conn`, then closes it.
  void Send(std::unique_ptr<GateConnection> conn);
  // Closes every connection still sending and joins the thread. Idempotent.
  void Stop();
  Stats stats() const;

 private:
  struct Conn;
  HttpGate(Options options, OnRequest on_request);
  void Loop();
  void Register(int fd);
  // Handshakes and reads what has arrived; hands on, answers or closes.
  void Advance(Conn* c);
  // Starts writing a worker's answer.
  void StartSending(std::unique_ptr<GateConnection> conn);
  // Writes what the socket takes; closes the connection once all is written.
  void Flush(Conn* c);
  void Want(Conn* c, uint32_t events);
  // Writes a short answer (best effort, one try) and closes.
  void Answer(Conn* c, absl::string_view status_line, int64_t Stats::*counter);
  void Close(Conn* c, int64_t Stats::*counter = nullptr);
  // The READING (or SENDING) connection with the earliest deadline.
  Conn* Oldest(bool sending) const;

  const Options options_;
  const OnRequest on_request_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<int> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<GateConnection>> answers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  // Gate-thread state.
  std::vector<std::unique_ptr<Conn>> conns_;
  int reading_ = 0;
  int sending_ = 0;
  size_t sending_bytes_ = 0;                           // not yet written.
  std::vector<std::pair<std::string, int>> per_peer_;  // address -> reading.
};

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HTTP_GATE_H_

// The controller's HTTP adapter (cpp-httplib): read-only views of a
// ControllerSnapshot (view_model.h), which it asks for on every request
// through the one seam, SnapshotFn.
//
//   GET /          the status page (one self-contained HTML page, inline JS
//                  and CSS; it polls /api/jobs every second)
//   GET /api/jobs  RenderJson (application/json)
//   GET /metrics   RenderPrometheus (text/plain; version=0.0.4)
//   GET /healthz   "ok"
// Anything else: 404; other methods: 405 (HEAD works where GET does). No
// files are served.
//
// Bounded: a request line of at most 2 KiB and headers of at most 4 KiB
// each (views.cmake), no request body over 1 KiB, read and write timeouts,
// a fixed pool of worker threads behind a bounded queue of accepted
// connections (when it is full, the accept thread waits, and the kernel's
// backlog takes the rest).
//
// Threading: Start() binds and starts one accept thread plus the pool; the
// SnapshotFn is called on pool threads, concurrently, and must be
// thread-safe. Stop() (or the destructor) stops accepting, finishes the
// requests in flight and joins every thread.
#ifndef TRAINLET_CONTROLLER_HTTP_SERVER_H_
#define TRAINLET_CONTROLLER_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/view_model.h"

namespace httplib {
class Server;
}

namespace trainlet::controller {

// What the views show, now. Called once per /, /api/jobs or /metrics
// request (not for /healthz), from several threads at once.
using SnapshotFn = std::function<ControllerSnapshot()>;

inline constexpr int kDefaultHttpPort = 29680;

struct HttpServerOptions {
  std::string address = "0.0.0.0";  // an IPv4 or IPv6 literal, or a host name.
  int port = kDefaultHttpPort;      // 0: any free port (tests).
  int threads = 4;
  int max_queued_connections = 64;
  absl::Duration read_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
  absl::Duration keep_alive_timeout = absl::Seconds(5);
};

class HttpServer {
 public:
  // Binds and starts serving. Unavailable naming the address when it
  // cannot listen there (in use, not an address of this host).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           SnapshotFn snapshot);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Idempotent.
  void Stop();

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// The page served at `/` (also for the tests).
const std::string& StatusPageHtml();

}  // namespace trainlet::controller

#endif  // TRAINLET_CONTROLLER_HTTP_SERVER_H_

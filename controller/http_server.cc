#include "controller/http_server.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "controller/views.h"
#include "httplib.h"

namespace trainlet::controller {
namespace {

constexpr size_t kMaxRequestBody = 1024;

// httplib's ThreadPool queues accepted connections without a limit; this
// one makes the accept thread wait while `max_queued` are waiting.
// (std::mutex, not absl::Mutex: httplib's TaskQueue contract is std-based
// and the accept thread blocks here.)
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(int threads, int max_queued) : max_queued_(static_cast<size_t>(max_queued)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~BoundedPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [&] { return jobs_.size() < max_queued_ || shutdown_; });
    jobs_.push_back(std::move(fn));
    work_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    work_.notify_all();
    space_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;  // shut down, queue drained.
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      space_.notify_one();
      fn();  // handles one connection, then closes it.
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable space_;
  std::deque<std::function<void()>> jobs_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
};

void CommonHeaders(httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              SnapshotFn snapshot) {
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  const int threads = std::max(1, options.threads);
  const int queued = std::max(1, options.max_queued_connections);
  server.new_task_queue = [threads, queued] { return new BoundedPool(threads, queued); };
  const auto micros = [](absl::Duration d) {
    return std::chrono::microseconds(absl::ToInt64Microseconds(d));
  };
  server.set_read_timeout(micros(options.read_timeout));
  server.set_write_timeout(micros(options.write_timeout));
  server.set_keep_alive_timeout(
      std::max<time_t>(1, absl::ToInt64Seconds(options.keep_alive_timeout)));
  server.set_payload_max_length(kMaxRequestBody);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a
  // second controller on the same port would bind silently and take half
  // the connections.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    // The page's own script and style only; it fetches /api/jobs, nothing else.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                   "form-action 'none'; frame-ancestors 'none'");
    res.set_content(StatusPageHtml(), "text/html; charset=utf-8");
  });
  server.Get("/api/jobs", [snapshot](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_content(RenderJson(snapshot()), "application/json");
  });
  server.Get("/metrics", [snapshot](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_content(RenderPrometheus(snapshot()), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  // Read-only: every other method on a known path is 405.
  const auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    CommonHeaders(res);
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("method not allowed: the controller's views are read-only\n", "text/plain");
  };
  for (const char* path : {"/", "/api/jobs", "/metrics", "/healthz"}) {
    server.Post(path, not_allowed);
    server.Put(path, not_allowed);
    server.Delete(path, not_allowed);
    server.Patch(path, not_allowed);
  }
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    CommonHeaders(res);
    if (res.body.empty()) {
      res.set_content(absl::StrCat(res.status, "\n"), "text/plain");
    }
  });
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        static LogLimiter limiter(5, absl::Minutes(1));
        int64_t suppressed = 0;
        if (limiter.Allow(&suppressed)) {
          TLOG(kWarning) << "controller http: " << SafeForLog(req.path, 64)
                         << " failed with an exception" << SuppressedNote(suppressed);
        }
        res.status = 500;
        res.set_content("internal error\n", "text/plain");
      });

  if (options.port == 0) {
    self->port_ = server.bind_to_any_port(options.address);
    if (self->port_ <= 0) self->port_ = 0;
  } else if (server.bind_to_port(options.address, options.port)) {
    self->port_ = options.port;
  }
  if (self->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "controller: cannot listen for HTTP on ", SafeForLog(options.address, 64), ":",
        options.port, " (--http): the port is in use or the address is not this host's"));
  }
  self->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // Stop() before the accept loop runs would be lost (httplib's stop only
  // acts on a running server): wait until it does.
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return self;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace trainlet::controller

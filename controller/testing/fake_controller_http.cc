// A test-only controller HTTP server for the browser and Prometheus tests
// (e2e/e2e_controller_views.py): the real HttpServer serving
// SampleSnapshot(tick), where tick is the number of whole seconds since it
// started, so that the page sees the steps and ages change.
//
//   fake_controller_http [--port=N]   prints "port N" once listening;
//                                     runs until SIGTERM or SIGINT.
//
// Single-threaded main; the server's threads call the snapshot.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "controller/http_server.h"
#include "controller/testing/sample_snapshot.h"

int main(int argc, char** argv) {
  int port = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--port=", 7) == 0) {
      port = std::atoi(argv[i] + 7);
    } else {
      std::fprintf(stderr, "usage: fake_controller_http [--port=N]\n");
      return 64;
    }
  }
  // Before any thread exists, so that sigwait() below gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const auto start = std::chrono::steady_clock::now();
  trainlet::controller::HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = port;
  auto server = trainlet::controller::HttpServer::Start(options, [start] {
    const auto tick =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
            .count();
    return trainlet::controller::testing::SampleSnapshot(tick);
  });
  if (!server.ok()) {
    std::fprintf(stderr, "fake_controller_http: %s\n",
                 std::string(server.status().message()).c_str());
    return 71;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  (*server)->Stop();
  return 0;
}

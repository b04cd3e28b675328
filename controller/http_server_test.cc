#include "controller/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/testing/sample_snapshot.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "rendezvous/testing/test_pki.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

HttpServerOptions Loopback() {
  HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  return options;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the peer sends until it closes, or `wait` passes.
std::string ReadUntilClosed(int fd, absl::Duration wait, bool* closed = nullptr) {
  std::string out;
  const absl::Time end = absl::Now() + wait;
  if (closed != nullptr) *closed = false;
  while (absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now())) + 1;
    if (poll(&p, 1, ms) <= 0) break;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = Loopback()) {
    auto server = HttpServer::Start(options, [this] {
      ++calls_;
      return testing::SampleSnapshot();
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void SetUp() override { Start(); }

  std::atomic<int> calls_{0};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, ApiJobs_IsTheSummaryWithoutNodes) {
  auto res = client_->Get("/api/jobs");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-store");
  SnapshotViewSource source([] { return testing::SampleSnapshot(); });
  EXPECT_EQ(res->body, RenderJobsJson(source.Summary()));
  EXPECT_THAT(res->body, Not(HasSubstr("\"nodes\":[")));
  EXPECT_THAT(res->body, Not(HasSubstr("demo-node-0")));
  EXPECT_THAT(res->body, HasSubstr("\"nodes_up\":2"));
}

TEST_F(HttpServerTest, OneJob_IsItsDetailPageByPage) {
  auto all = client_->Get("/api/jobs/demo");
  ASSERT_TRUE(all);
  ASSERT_EQ(all->status, 200);
  ControllerSnapshot figures;
  JobView job;
  int64_t next = 0;
  ASSERT_TRUE(ParseJobJson(all->body, &figures, &job, &next).ok());
  EXPECT_EQ(job.nodes.size(), 4u);
  EXPECT_EQ(next, -1);
  EXPECT_EQ(job.restarts.size(), 2u);
  EXPECT_EQ(job.rounds_timeline.size(), 3u);

  // Two nodes a page: pages 0-1 and 2-3, each saying where the next starts.
  std::vector<std::string> seen;
  int64_t from = 0;
  int pages = 0;
  while (from >= 0 && pages < 10) {
    auto res = client_->Get(absl::StrCat("/api/jobs/demo?from=", from, "&limit=2").c_str());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    ASSERT_TRUE(ParseJobJson(res->body, &figures, &job, &from).ok());
    EXPECT_EQ(job.nodes_total, 4);
    EXPECT_EQ(job.totals.nodes_up, 2) << "totals are over all nodes";
    for (const NodeView& n : job.nodes) seen.push_back(n.node_id);
    ++pages;
  }
  EXPECT_EQ(pages, 2);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"demo-node-0", "demo-node-1", "demo-node-2", "demo-node-3"}));
}

TEST_F(HttpServerTest, OneJob_UnknownOrBadPage_Is404Or400) {
  auto unknown = client_->Get("/api/jobs/nope");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_THAT(unknown->body, HasSubstr("no job nope"));
  for (const char* bad : {"/api/jobs/demo?limit=0", "/api/jobs/demo?limit=x",
                          "/api/jobs/demo?limit=100000", "/api/jobs/demo?from=-1"}) {
    auto res = client_->Get(bad);
    ASSERT_TRUE(res) << bad;
    EXPECT_EQ(res->status, 400) << bad;
  }
}

TEST_F(HttpServerTest, Evidence_IsEveryHangOfTheJob) {
  auto res = client_->Get("/api/jobs/demo/evidence");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  auto hangs = ParseEvidenceJson(res->body);
  ASSERT_TRUE(hangs.ok()) << hangs.status();
  ASSERT_EQ(hangs->size(), 1u);
  EXPECT_EQ((*hangs)[0].node_id, "demo-node-1");
  EXPECT_THAT((*hangs)[0].evidence, HasSubstr("thread 5201 state D"));
  auto none = client_->Get("/api/jobs/nope/evidence");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST_F(HttpServerTest, Metrics_IsPrometheusText004) {
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, RenderPrometheus(testing::SampleSnapshot()));
}

TEST_F(HttpServerTest, Page_IsSelfContainedHtmlWithAStrictPolicy) {
  auto res = client_->Get("/");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_THAT(res->get_header_value("Content-Security-Policy"), HasSubstr("default-src 'none'"));
  EXPECT_EQ(res->body, StatusPageHtml());
  EXPECT_THAT(res->body, HasSubstr("\"/api/jobs\""));
  // No external assets: nothing is loaded from another origin (the SVG
  // namespace is a name, not a fetch).
  std::string page = res->body;
  const std::string svg_namespace = "http://www.w3.org/2000/svg";
  for (size_t at; (at = page.find(svg_namespace)) != std::string::npos;) {
    page.erase(at, svg_namespace.size());
  }
  EXPECT_THAT(page, Not(HasSubstr("http://")));
  EXPECT_THAT(page, Not(HasSubstr("https://")));
  EXPECT_THAT(page, Not(HasSubstr("src=")));
  EXPECT_THAT(res->body, Not(HasSubstr("innerHTML")));
}

TEST_F(HttpServerTest, Healthz_IsOkWithoutASnapshot) {
  auto res = client_->Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpServerTest, UnknownPathOrFile_Is404) {
  for (const char* path : {"/nope", "/api/jobs/a/b", "/../etc/passwd", "/index.html"}) {
    auto res = client_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
  }
}

TEST_F(HttpServerTest, Writes_Are405) {
  for (const char* path : {"/api/jobs", "/api/jobs/demo", "/api/jobs/demo/evidence"}) {
    auto res = client_->Post(path, "x", "text/plain");
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 405) << path;
    EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
  }
}

TEST_F(HttpServerTest, HeadOfThePage_HasNoBody) {
  auto res = client_->Head("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
}

// httplib answers a Range of N parts with N copies of the answer, built in
// memory (1,000 parts of a 2 MB /metrics: 2 GB from one request). The views
// ignore Range, as RFC 9110 lets a server do: the whole answer, once.
TEST_F(HttpServerTest, Range_IsIgnoredTheWholeAnswerComesOnce) {
  std::string parts = "bytes=0-";
  for (int i = 0; i < 50; ++i) parts += ",0-";
  for (const char* path : {"/", "/metrics", "/healthz"}) {
    auto res = client_->Get(path, {{"Range", parts}});
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_FALSE(res->has_header("Content-Range")) << path;
    EXPECT_THAT(res->get_header_value("Content-Type"), Not(HasSubstr("multipart"))) << path;
    auto plain = client_->Get(path);
    ASSERT_TRUE(plain);
    EXPECT_EQ(res->body.size(), plain->body.size()) << path;
  }
  auto one = client_->Get("/", {{"Range", "bytes=0-9"}});
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(one->body, StatusPageHtml());
}

TEST_F(HttpServerTest, OverlongRequestLineOrHeaderOrBody_IsRefused) {
  auto uri = client_->Get(("/" + std::string(4096, 'a')).c_str());
  ASSERT_TRUE(uri);
  EXPECT_EQ(uri->status, 414);

  httplib::Headers big = {{"X-Big", std::string(8192, 'b')}};
  auto header = client_->Get("/healthz", big);
  // The server drops a request whose header line is over the limit.
  EXPECT_TRUE(!header || header->status == 400);

  httplib::Headers many;
  for (int i = 0; i < 80; ++i) many.emplace("X-H" + std::to_string(i), "v");
  auto count = client_->Get("/healthz", many);
  EXPECT_TRUE(!count || count->status == 400);
  httplib::Headers some;
  for (int i = 0; i < 40; ++i) some.emplace("X-H" + std::to_string(i), "v");
  auto fine = client_->Get("/healthz", some);
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);

  auto body = client_->Post("/api/jobs", std::string(4096, 'c'), "text/plain");
  EXPECT_TRUE(!body || body->status == 413);

  // A head that never ends: 431 once it is over 32 KiB.
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  std::string head = "GET /healthz HTTP/1.1\r\n";
  while (head.size() < 40 * 1024) head += "X-Pad: " + std::string(1000, 'p') + "\r\n";
  (void)!send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  EXPECT_THAT(ReadUntilClosed(fd, absl::Seconds(10)), HasSubstr("431"));
  close(fd);
}

TEST_F(HttpServerTest, Stop_IsIdempotentAndClosesThePort) {
  const int port = server_->port();
  server_->Stop();
  server_->Stop();
  httplib::Client late("127.0.0.1", port);
  late.set_connection_timeout(1, 0);
  EXPECT_FALSE(late.Get("/healthz"));
}

TEST(HttpServer, PortInUse_IsUnavailableNamingTheAddress) {
  auto first = HttpServer::Start(Loopback(), [] { return ControllerSnapshot{}; });
  ASSERT_TRUE(first.ok());
  HttpServerOptions options = Loopback();
  options.port = (*first)->port();
  auto second = HttpServer::Start(options, [] { return ControllerSnapshot{}; });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("127.0.0.1:"));
}

// ---- Bounded answers.

// One job of 200 nodes with 1,024 workers each (the red team's C3).
ControllerSnapshot BigJob() {
  ControllerSnapshot s;
  s.now_unix_ms = 1795435200000;
  JobView job;
  job.job_id = "big";
  job.state = JobState::kActive;
  for (int n = 0; n < 200; ++n) {
    NodeView node;
    node.node_id = absl::StrCat("big-node-", n);
    node.node_rank = n;
    node.up = true;
    for (int w = 0; w < 1024; ++w) {
      node.workers.push_back({w, n * 1024 + w, 100000 + w, WorkerState::kRunning, 0, 0, 0});
    }
    job.nodes.push_back(std::move(node));
  }
  s.jobs = {std::move(job)};
  return s;
}

TEST(HttpServerBounds, BigJob_SummaryIsSmallAndPagesStayUnderTheCap) {
  const ControllerSnapshot big = BigJob();
  HttpServerOptions options = Loopback();
  options.max_answer_bytes = 1 << 20;
  auto server = HttpServer::Start(options, [&big] { return big; });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(30, 0);

  auto summary = client.Get("/api/jobs");
  ASSERT_TRUE(summary);
  EXPECT_LT(summary->body.size(), 4096u);
  EXPECT_THAT(summary->body, HasSubstr("\"workers\":204800"));

  // The whole job would be about 20 MB of JSON; each page is at most the
  // cap plus one node (~100 KB), and the pages cover every node once.
  int64_t from = 0;
  size_t nodes = 0, pages = 0, largest = 0;
  while (from >= 0 && pages < 1000) {
    auto res = client.Get(absl::StrCat("/api/jobs/big?from=", from).c_str());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    largest = std::max(largest, res->body.size());
    ControllerSnapshot figures;
    JobView job;
    ASSERT_TRUE(ParseJobJson(res->body, &figures, &job, &from).ok());
    EXPECT_EQ(job.nodes_from + static_cast<int64_t>(job.nodes.size()), from < 0 ? 200 : from);
    nodes += job.nodes.size();
    ++pages;
  }
  EXPECT_EQ(nodes, 200u);
  EXPECT_GT(pages, 10u);
  EXPECT_LT(largest, (1u << 20) + 200'000u);
}

// ---- Slow clients.

// Clients that send one header line every `every` and never finish their
// request (slowloris) cost the gate a descriptor each, not a worker: the
// views answer beside them, and each is cut at head_timeout.
TEST(HttpServerSlowClients, DripFedHeaders_DoNotTakeTheViewsDown) {
  HttpServerOptions options = Loopback();
  options.head_timeout = absl::Seconds(3);
  auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  // 4 threads serve; 16 slow clients (4 would do: the red team's C5).
  constexpr int kSlow = 16;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    (void)!send(fd, "GET /api/jobs HTTP/1.1\r\n", 24, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : slow) (void)!send(fd, "X-Drip: 1\r\n", 11, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  const absl::Time opened = absl::Now();

  httplib::Client client("127.0.0.1", port);
  // A loaded machine answers in well under a second; 5 s is the bound.
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  for (const char* path : {"/healthz", "/", "/api/jobs", "/api/jobs/demo", "/metrics"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
  }
  // Each slow client is cut at its head timeout (3 s), though it keeps
  // sending: answered 408 and closed (5 s of room for a loaded machine).
  for (int fd : slow) {
    bool closed = false;
    const std::string got = ReadUntilClosed(fd, absl::Seconds(3) + absl::Seconds(5), &closed);
    EXPECT_TRUE(closed);
    EXPECT_THAT(got, HasSubstr("408"));
  }
  const absl::Duration took = absl::Now() - opened;
  EXPECT_GE(took, absl::Seconds(3) - absl::Milliseconds(50));
  stop = true;
  drip.join();
  for (int fd : slow) close(fd);
  EXPECT_EQ((*server)->stats().timed_out, kSlow);
}

// Requests whose length the gate and httplib read apart (two Content-Length
// headers, a bare CR before one): the gate hands on what it read as whole,
// and the worker never waits on the socket for the rest. Each is answered
// (4xx) at once, and the views answer beside them.
TEST(HttpServerSlowClients, LengthTheGateAndTheParserReadApart_HoldsNoWorker) {
  HttpServerOptions options = Loopback();
  options.answer_timeout = absl::Seconds(60);
  auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string kTricks[] = {
      "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nContent-Length: 0\r\n\r\n",
      "POST /healthz HTTP/1.1\r\nHost: x\r\rContent-Length: 1000\r\n\r\n",
  };
  std::vector<int> tricky;
  for (int i = 0; i < 8; ++i) {  // twice the workers.
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    const std::string& request = kTricks[i % 2];
    (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    tricky.push_back(fd);
  }
  httplib::Client client("127.0.0.1", port);
  // The workers answered them at once; 10 s is room for a loaded machine
  // (a worker that waited for the rest of a body held it 60 s).
  client.set_read_timeout(10, 0);
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  for (int fd : tricky) {
    bool closed = false;
    EXPECT_THAT(ReadUntilClosed(fd, absl::Seconds(10), &closed), HasSubstr("HTTP/1.1 4"));
    EXPECT_TRUE(closed);
    close(fd);
  }
}

// A connection whose receive buffer is a few KiB: the kernel holds little
// of what the server sends it.
int ConnectSmallWindow(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Clients that ask for a big answer and never read it (the answer is far
// over what the kernel's buffers hold) cost memory the gate bounds, never a
// worker: the views answer beside them, and their answers are dropped when
// the bytes held for them pass the cap.
TEST(HttpServerSlowClients, ClientsThatNeverReadTheirAnswer_HoldNoWorker) {
  const ControllerSnapshot big = BigJob();
  HttpServerOptions options = Loopback();
  options.answer_timeout = absl::Seconds(120);
  options.max_answer_bytes = 12 << 20;   // a page of ~12 MiB each,
  options.max_bytes_sending = 32 << 20;  // of which the gate holds 32 MiB.
  auto server = HttpServer::Start(options, [&big] { return big; });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  constexpr int kStalled = 8;  // twice the workers.
  std::vector<int> stalled;
  for (int i = 0; i < kStalled; ++i) {
    const int fd = ConnectSmallWindow(port);
    ASSERT_GE(fd, 0);
    const std::string get = "GET /api/jobs/big?limit=4096 HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!send(fd, get.data(), get.size(), MSG_NOSIGNAL);
    stalled.push_back(fd);
  }
  httplib::Client client("127.0.0.1", port);
  // Each stalled answer takes a worker a fraction of a second to draw; 30 s
  // is room for a loaded machine (a worker that wrote it waited 120 s).
  client.set_read_timeout(30, 0);
  for (const char* path : {"/healthz", "/api/jobs", "/"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path;
  }
  // 8 answers of ~12 MiB, at most 32 MiB held: most were dropped.
  for (int i = 0; i < 300 && (*server)->stats().dropped < kStalled - 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE((*server)->stats().dropped, kStalled - 3);
  for (int fd : stalled) close(fd);
}

// An answer not read whole within answer_timeout is dropped: the
// connection is closed.
TEST(HttpServerSlowClients, AnswerNotReadInTime_IsDropped) {
  const ControllerSnapshot big = BigJob();
  HttpServerOptions options = Loopback();
  options.answer_timeout = absl::Seconds(2);
  options.max_answer_bytes = 12 << 20;
  auto server = HttpServer::Start(options, [&big] { return big; });
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = ConnectSmallWindow((*server)->port());
  ASSERT_GE(fd, 0);
  const std::string get = "GET /api/jobs/big?limit=4096 HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)!send(fd, get.data(), get.size(), MSG_NOSIGNAL);
  for (int i = 0; i < 300 && (*server)->stats().dropped < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ((*server)->stats().dropped, 1);
  // What reached the socket, then its end: the answer was cut.
  bool closed = false;
  const std::string got = ReadUntilClosed(fd, absl::Seconds(30), &closed);
  EXPECT_TRUE(closed);
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200"));
  EXPECT_LT(got.size(), 12u << 20);
  close(fd);
}

TEST(HttpServerSlowClients, TooManyFromOneAddress_AreClosedAtOnce) {
  HttpServerOptions options = Loopback();
  options.max_pending_per_peer = 4;
  auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(Connect((*server)->port()));
  // Accepted and handed to the gate in the order they connected: the fifth
  // finds four pending from its address.
  const int fifth = Connect((*server)->port());
  bool closed = false;
  ReadUntilClosed(fifth, absl::Seconds(5), &closed);
  EXPECT_TRUE(closed);
  close(fifth);
  for (int fd : fds) close(fd);
  EXPECT_GE((*server)->stats().refused, 1);
}

// Slow clients from many addresses fill the gate (256 sending their
// request); a new client then takes the place of the one that has been
// sending longest, instead of being refused: the views stay up beside them.
TEST(HttpServerSlowClients, GateFull_TheOldestWaitingMakesRoomForANewOne) {
  HttpServerOptions options = Loopback();
  options.max_pending = 8;  // all from 127.0.0.1, under its 32 a peer.
  auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) {
    const int fd = Connect((*server)->port());
    ASSERT_GE(fd, 0);
    (void)!send(fd, "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    silent.push_back(fd);
  }
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(10, 0);
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  // The oldest made room, closed.
  EXPECT_EQ((*server)->stats().evicted, 1);
  EXPECT_EQ((*server)->stats().refused, 0);
  bool closed = false;
  ReadUntilClosed(silent[0], absl::Seconds(5), &closed);
  EXPECT_TRUE(closed);
  for (int fd : silent) close(fd);
}

// ---- Token.

TEST(HttpServerToken, DataWantsTheBearerTokenThePageAndHealthDoNot) {
  HttpServerOptions options = Loopback();
  options.token = "s3cret-token";
  auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  for (const char* path : {"/api/jobs", "/api/jobs/demo", "/api/jobs/demo/evidence", "/metrics"}) {
    auto none = client.Get(path);
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_THAT(none->get_header_value("WWW-Authenticate"), HasSubstr("Bearer"));
    EXPECT_THAT(none->body, Not(HasSubstr("demo-node")));
    auto wrong = client.Get(path, {{"Authorization", "Bearer s3cret-tokeN"}});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    auto right = client.Get(path, {{"Authorization", "bearer s3cret-token"}});
    ASSERT_TRUE(right);
    EXPECT_EQ(right->status, 200) << path;
  }
  for (const char* path : {"/", "/healthz"}) {
    auto open = client.Get(path);
    ASSERT_TRUE(open);
    EXPECT_EQ(open->status, 200) << path;
  }
}

// ---- TLS.

// One GET over TLS with OpenSSL; the answer, or "" when the handshake fails.
std::string TlsGet(int port, const std::string& path, const rendezvous::TlsConfig* client_cert,
                   const std::string& ca_pem) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
  }
  BIO_free(bio);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (client_cert != nullptr) {
    BIO* c = BIO_new_mem_buf(client_cert->cert_pem.data(), -1);
    X509* cert = PEM_read_bio_X509(c, nullptr, nullptr, nullptr);
    SSL_CTX_use_certificate(ctx, cert);
    X509_free(cert);
    BIO_free(c);
    BIO* k = BIO_new_mem_buf(client_cert->key_pem.data(), -1);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(k, nullptr, nullptr, nullptr);
    SSL_CTX_use_PrivateKey(ctx, key);
    EVP_PKEY_free(key);
    BIO_free(k);
  }
  const int fd = Connect(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set1_host(ssl, "localhost");
  std::string out;
  if (SSL_connect(ssl) == 1) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
    SSL_write(ssl, req.data(), static_cast<int>(req.size()));
    char buf[4096];
    int n;
    while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) out.append(buf, n);
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return out;
}

class HttpServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = rendezvous::testing::TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki);
    auto server = pki_->IssueConfig("controller", "ca", {"DNS:localhost"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_tls_ = *server;
    auto client = pki_->IssueConfig("viewer", "ca", {"DNS:viewer"});
    ASSERT_TRUE(client.ok());
    client_tls_ = *client;
    auto stranger = pki_->IssueConfig("stranger", "other-ca", {"DNS:stranger"});
    ASSERT_TRUE(stranger.ok());
    stranger_tls_ = *stranger;
  }
  std::unique_ptr<HttpServer> Serve(HttpTls mode) {
    HttpServerOptions options = Loopback();
    options.tls_mode = mode;
    options.tls = server_tls_;
    auto server = HttpServer::Start(options, [] { return testing::SampleSnapshot(); });
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  std::unique_ptr<rendezvous::testing::TestPki> pki_;
  rendezvous::TlsConfig server_tls_, client_tls_, stranger_tls_;
};

TEST_F(HttpServerTlsTest, ServerTls_AnswersOverTlsOnly) {
  auto server = Serve(HttpTls::kServer);
  ASSERT_NE(server, nullptr);
  const std::string got = TlsGet(server->port(), "/api/jobs", nullptr, server_tls_.ca_pem);
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(got, HasSubstr("\"job_id\":\"demo\""));
  // Plain HTTP to the TLS port: no answer (the handshake fails).
  httplib::Client plain("127.0.0.1", server->port());
  plain.set_read_timeout(5, 0);
  auto res = plain.Get("/api/jobs");
  EXPECT_TRUE(!res || res->status != 200);
}

TEST_F(HttpServerTlsTest, MutualTls_WantsAClientCertificateOfTheCa) {
  auto server = Serve(HttpTls::kMutual);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(TlsGet(server->port(), "/healthz", &client_tls_, server_tls_.ca_pem),
              HasSubstr("HTTP/1.1 200"));
  EXPECT_EQ(TlsGet(server->port(), "/healthz", nullptr, server_tls_.ca_pem), "");
  EXPECT_EQ(TlsGet(server->port(), "/healthz", &stranger_tls_, server_tls_.ca_pem), "");
}

// An answer far over what the socket's buffers hold is written in parts as
// the client reads, and arrives whole.
TEST_F(HttpServerTlsTest, BigAnswer_ArrivesWholeOverTls) {
  const ControllerSnapshot big = BigJob();
  HttpServerOptions options = Loopback();
  options.tls_mode = HttpTls::kServer;
  options.tls = server_tls_;
  options.max_answer_bytes = 12 << 20;
  auto server = HttpServer::Start(options, [&big] { return big; });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string got =
      TlsGet((*server)->port(), "/api/jobs/big?limit=4096", nullptr, server_tls_.ca_pem);
  const size_t head_end = got.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  const std::string head = got.substr(0, head_end);
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200"));
  const size_t at = head.find("Content-Length: ");
  ASSERT_NE(at, std::string::npos);
  const size_t length = std::stoul(head.substr(at + 16));
  EXPECT_GT(length, 8u << 20);
  EXPECT_EQ(got.size() - head_end - 4, length);
  EXPECT_EQ((*server)->stats().dropped, 0);
}

TEST_F(HttpServerTlsTest, StalledHandshake_DoesNotHoldAWorker) {
  auto server = Serve(HttpTls::kServer);
  ASSERT_NE(server, nullptr);
  // Connected, silent: each sits in the gate's handshake, not on a worker.
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(Connect(server->port()));
  EXPECT_THAT(TlsGet(server->port(), "/healthz", nullptr, server_tls_.ca_pem),
              HasSubstr("HTTP/1.1 200"));
  for (int fd : silent) close(fd);
}

}  // namespace
}  // namespace trainlet::controller

#include "controller/http_server.h"

#include <atomic>

#include "controller/testing/sample_snapshot.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = HttpServer::Start(options, [this] {
      ++calls_;
      return testing::SampleSnapshot();
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(5, 0);
  }

  std::atomic<int> calls_{0};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, ApiJobs_IsRenderJsonOfTheSnapshot) {
  auto res = client_->Get("/api/jobs");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(res->body, RenderJson(testing::SampleSnapshot()));
  EXPECT_EQ(calls_.load(), 1);
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
  EXPECT_THAT(res->body, HasSubstr("fetch(\"/api/jobs\""));
  // No external assets: nothing is loaded from another origin.
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("http://")));
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("https://")));
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("innerHTML")));
}

TEST_F(HttpServerTest, Healthz_IsOkWithoutASnapshot) {
  auto res = client_->Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpServerTest, UnknownPathOrFile_Is404) {
  for (const char* path : {"/nope", "/api/jobs/x", "/../etc/passwd", "/index.html"}) {
    auto res = client_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
  }
}

TEST_F(HttpServerTest, Writes_Are405) {
  auto res = client_->Post("/api/jobs", "x", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
}

TEST_F(HttpServerTest, HeadOfThePage_HasNoBody) {
  auto res = client_->Head("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
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
  ASSERT_TRUE(body);
  EXPECT_EQ(body->status, 413);
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
  HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  auto first = HttpServer::Start(options, [] { return ControllerSnapshot{}; });
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  auto second = HttpServer::Start(options, [] { return ControllerSnapshot{}; });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("127.0.0.1:"));
}

}  // namespace
}  // namespace trainlet::controller

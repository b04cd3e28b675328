#include "cmd/status_command.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/testing/temp_root.h"
#include "controller/controller_host.h"
#include "controller/http_server.h"
#include "controller/testing/core_reports.h"
#include "controller/testing/sample_snapshot.h"
#include "controller/views.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/testing/test_pki.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseHttpAddress, HostPortIpv6AndDefaults) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHttpAddress("ctl.example:8080", &host, &port).ok());
  EXPECT_EQ(host, "ctl.example");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseHttpAddress("10.0.0.1", &host, &port).ok());
  EXPECT_EQ(port, 29680);
  ASSERT_TRUE(ParseHttpAddress("[::1]:9", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9);
  EXPECT_FALSE(ParseHttpAddress("::1:9", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("host:0", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("host:", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("bad host:1", &host, &port).ok());
  EXPECT_FALSE(ParseHttpAddress("[::1", &host, &port).ok());
}

TEST(ParseStatusOptions, FlagBeatsEnvironmentBeatsDefault) {
  auto def = ParseStatusOptions({}, {});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->host, "127.0.0.1");
  EXPECT_EQ(def->port, 29680);
  auto env = ParseStatusOptions({"demo"}, {{"TRAINLET_CONTROLLER_HTTP", "ctl:1234"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->host, "ctl");
  EXPECT_EQ(env->job, "demo");
  auto flag = ParseStatusOptions({"--controller", "other:99", "--json", "--timeout=2s"},
                                 {{"TRAINLET_CONTROLLER_HTTP", "ctl:1234"}});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->host, "other");
  EXPECT_EQ(flag->port, 99);
  EXPECT_TRUE(flag->json);
  EXPECT_EQ(flag->timeout_seconds, 2);
}

// The option table's forms and precedence: --controller, then
// TRAINLET_CONTROLLER_HTTP, then TRAINLET_CONTROLLER (the agents'), named in
// errors; bool flags take =true|false; --timeout is bounded.
TEST(ParseStatusOptions, OptionTableFormsAndPrecedence) {
  auto both = ParseStatusOptions(
      {}, {{"TRAINLET_CONTROLLER", "grpc:29600"}, {"TRAINLET_CONTROLLER_HTTP", "views:29680"}});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->host, "views");
  EXPECT_EQ(both->address_source, "TRAINLET_CONTROLLER_HTTP");
  auto agents = ParseStatusOptions({}, {{"TRAINLET_CONTROLLER", "grpc:29600"}});
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_EQ(agents->port, 29600);
  EXPECT_EQ(agents->address_source, "TRAINLET_CONTROLLER");
  auto flag = ParseStatusOptions({"--controller=a:1", "--json=false", "--evidence", "demo"},
                                 {{"TRAINLET_CONTROLLER_HTTP", "views:29680"}});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->host, "a");
  EXPECT_FALSE(flag->json);
  EXPECT_TRUE(flag->evidence);
  EXPECT_EQ(flag->job, "demo");
  auto token = ParseStatusOptions({}, {{"TRAINLET_TOKEN_FILE", "/t"}});
  ASSERT_TRUE(token.ok() && token->token_file.has_value());
  EXPECT_EQ(token->token_file->origin, "TRAINLET_TOKEN_FILE");
  EXPECT_THAT(ParseStatusOptions({"--timeout=10m"}, {}).status().message(),
              HasSubstr("--timeout=10m: at most 5m"));
  EXPECT_THAT(ParseStatusOptions({"--jsn"}, {}).status().message(),
              HasSubstr("did you mean --json?"));
  EXPECT_THAT(ParseStatusOptions({"--", "x"}, {}).status().message(), HasSubstr("no COMMAND"));
  EXPECT_TRUE(ParseStatusOptions({"--bogus", "-h"}, {})->help);
}

TEST(ParseStatusOptions, BadInput_NamesIt) {
  EXPECT_THAT(ParseStatusOptions({"--nope"}, {}).status().message(), HasSubstr("--nope"));
  EXPECT_THAT(ParseStatusOptions({"a", "b"}, {}).status().message(), HasSubstr("one JOB"));
  EXPECT_THAT(ParseStatusOptions({"--timeout=x"}, {}).status().message(), HasSubstr("--timeout"));
  EXPECT_THAT(ParseStatusOptions({"--controller"}, {}).status().message(),
              HasSubstr("needs a value"));
  EXPECT_THAT(ParseStatusOptions({}, {{"TRAINLET_CONTROLLER_HTTP", "a b"}}).status().message(),
              HasSubstr("TRAINLET_CONTROLLER_HTTP"));
}

class StatusCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    controller::HttpServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = controller::HttpServer::Start(
        options, [] { return controller::testing::SampleSnapshot(); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = "--controller=127.0.0.1:" + std::to_string(server_->port());
  }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return RunStatusCommand(args, {}, out_, err_);
  }

  std::unique_ptr<controller::HttpServer> server_;
  std::string address_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(StatusCommandTest, Table_IsTheControllersSnapshot) {
  ASSERT_EQ(Run({address_}), kExitSuccess) << err_.str();
  // What the JSON carries (the sample's invalid UTF-8 arrives as U+FFFD).
  auto expected =
      controller::ParseSnapshotJson(controller::RenderJson(controller::testing::SampleSnapshot()));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(out_.str(), controller::RenderStatusTable(*expected));
  EXPECT_THAT(out_.str(), HasSubstr("demo-node-2  2     ffffffff     stale"));
  EXPECT_THAT(out_.str(), HasSubstr("demo-node-3  -     00000033     lost"));
}

TEST_F(StatusCommandTest, OneJob_InFull) {
  ASSERT_EQ(Run({address_, "demo"}), kExitSuccess) << err_.str();
  EXPECT_EQ(out_.str(),
            controller::RenderStatusTable(controller::testing::SampleSnapshot(), "demo"));
}

// Each node's failed preflight checks with their reasons; with the job
// named, every check that did not pass and the links.
TEST_F(StatusCommandTest, Preflight_FailedChecksPerNode) {
  ASSERT_EQ(Run({address_}), kExitSuccess) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("  preflight failed on: demo-node-1\n"));
  EXPECT_THAT(out_.str(), HasSubstr("  demo-node-1 preflight round 3: 2 failed\n"
                                    "    gpu_ecc: GPU 1 (GPU-2) has 1 uncorrectable ECC error\n"
                                    "    dns: 1 of 3 names do not resolve: demo-node-2 (Domain "
                                    "name not found)\n"));
  ASSERT_EQ(Run({address_, "demo"}), kExitSuccess) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("  preflight checks that did not pass (4 passed):\n"));
  EXPECT_THAT(out_.str(),
              ::testing::ContainsRegex("demo-node-0 +3 +path_round_trip +skipped +no --preflight"));
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("demo-node-1 +demo-node-2 +- +- +connect to"));
}

TEST_F(StatusCommandTest, Json_IsTheJobsJson) {
  ASSERT_EQ(Run({address_, "--json", "demo"}), kExitSuccess) << err_.str();
  controller::ControllerSnapshot expected = controller::testing::SampleSnapshot();
  expected.jobs.resize(1);
  EXPECT_EQ(out_.str(), controller::RenderJson(expected));
}

TEST_F(StatusCommandTest, UnknownJob_Exits1) {
  EXPECT_EQ(Run({address_, "nope"}), kExitStatusJobUnknown);
  EXPECT_THAT(err_.str(), HasSubstr("knows no job 'nope'"));
}

TEST_F(StatusCommandTest, Unreachable_Exits69NamingTheAddress) {
  const int port = server_->port();
  server_->Stop();
  EXPECT_EQ(Run({"--controller=127.0.0.1:" + std::to_string(port), "--timeout=1s"}),
            kExitUnavailable);
  EXPECT_THAT(err_.str(), HasSubstr("cannot reach the controller at 127.0.0.1:"));
}

TEST_F(StatusCommandTest, Evidence_IsEveryLineOfTheJobsHangs) {
  ASSERT_EQ(Run({address_, "--evidence", "demo"}), kExitSuccess) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("== job demo, hang 5: round 3"));
  EXPECT_THAT(out_.str(), HasSubstr("thread 5201 state D wchan futex_wait_queue"));
  ASSERT_EQ(Run({address_, "--evidence", "--json", "demo"}), kExitSuccess) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\"evidence\":\"thread 5201 state D"));
  EXPECT_EQ(Run({address_, "--evidence", "nope"}), kExitStatusJobUnknown);
  EXPECT_EQ(Run({address_, "--evidence"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--evidence needs a JOB"));
}

TEST(StatusCommandViews, TokenOfTheViews_IsSentAndARefusalExits77) {
  trainlet::testing::TempRoot root;
  controller::HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  options.token = "views-token";
  auto server =
      controller::HttpServer::Start(options, [] { return controller::testing::SampleSnapshot(); });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("--controller=127.0.0.1:", (*server)->port());
  std::ostringstream out, err;
  EXPECT_EQ(RunStatusCommand({address}, {}, out, err), kExitRejected);
  EXPECT_THAT(err.str(), HasSubstr("wants a token: give --token-file"));
  const std::string good = root.Write("token", "views-token\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(RunStatusCommand({address, "--token-file", good, "demo"}, {}, out2, err2), kExitSuccess)
      << err2.str();
  EXPECT_THAT(out2.str(), HasSubstr("JOB demo: active"));
  std::ostringstream out3, err3;
  EXPECT_EQ(
      RunStatusCommand({address}, {{"TRAINLET_TOKEN_FILE", root.Write("bad", "nope")}}, out3, err3),
      kExitRejected);
  EXPECT_THAT(err3.str(), HasSubstr("refused the token"));
}

// A job whose JSON is far over the 64 MiB one answer may have (D1): read a
// page at a time, all of it arrives.
TEST(StatusCommandViews, JobOverSixtyFourMebibytes_ArrivesWhole) {
  auto big = std::make_shared<controller::ControllerSnapshot>();
  big->now_unix_ms = 1795435200000;
  controller::JobView job;
  job.job_id = "big";
  job.state = controller::JobState::kActive;
  // 1,100 nodes of 64 KiB of JSON each (long GPU reasons: big strings parse
  // faster than as many small objects).
  for (int n = 0; n < 1100; ++n) {
    controller::NodeView node;
    node.node_id = absl::StrCat("big-node-", n);
    node.node_rank = n;
    node.up = true;
    for (int g = 0; g < 16; ++g) {
      node.gpus.push_back({g, "GPU", controller::GpuStatus::kDegraded, std::string(4000, 'r')});
    }
    job.nodes.push_back(std::move(node));
  }
  big->jobs.push_back(std::move(job));
  ASSERT_GT(controller::RenderJson(*big).size(), size_t{64} << 20);
  controller::HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  auto server = controller::HttpServer::Start(options, [big] { return *big; });
  ASSERT_TRUE(server.ok()) << server.status();
  std::ostringstream out, err;
  ASSERT_EQ(RunStatusCommand({absl::StrCat("--controller=127.0.0.1:", (*server)->port()),
                              "--timeout=60s", "big"},
                             {}, out, err),
            kExitSuccess)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("NODES UP"));
  EXPECT_THAT(out.str(), HasSubstr("1100/1100"));
  EXPECT_THAT(out.str(), HasSubstr("big-node-1099"));
}

// One address: the gRPC address the agents were given works as well as the
// views' (with the agents' token, which the gRPC port wants).
class StatusCommandOneAddress : public ::testing::Test {
 protected:
  void SetUp() override {
    controller::ControllerHostOptions o;
    o.tokens = controller::JobTokens::AnyJob("grpc-token");
    o.listen = {"127.0.0.1", 0};
    auto host = controller::ControllerHost::Start(o);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    ASSERT_TRUE(host_->core().Report(Pod0Report(1)).ok());
    token_file_ = root_.Write("token", "grpc-token\n");
  }
  // pod-0 of jobA running round 1, its one worker pid 4242.
  static v1::HealthReport Pod0Report(uint64_t sequence) {
    v1::HealthReport r;
    r.set_job_id("jobA");
    r.set_node_id("pod-0");
    r.set_incarnation(7);
    r.set_sequence(sequence);
    r.set_round(1);
    r.set_node_rank(0);
    r.set_nnodes(1);
    r.set_world_size(1);
    r.set_state(v1::HealthReport::RUNNING);
    r.set_report_interval_ms(5000);
    r.set_exit_code(-1);
    v1::WorkerHealth* w = r.add_workers();
    w->set_rank(0);
    w->set_pid(4242);
    w->set_state(v1::WorkerHealth::RUNNING);
    return r;
  }
  int Run(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    out_.str("");
    err_.str("");
    return RunStatusCommand(args, env, out_, err_);
  }

  trainlet::testing::TempRoot root_;
  std::unique_ptr<controller::ControllerHost> host_;
  std::string token_file_;
  std::ostringstream out_, err_;
};

TEST_F(StatusCommandOneAddress, TheGrpcAddressOfRunWorks) {
  const std::string grpc = absl::StrCat("127.0.0.1:", host_->port());
  ASSERT_EQ(Run({"--controller=" + grpc, "--token-file=" + token_file_, "jobA"}), kExitSuccess)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("controller (read over gRPC)"));
  EXPECT_THAT(out_.str(), HasSubstr("JOB jobA: active, round 1, 1 ranks on 1 nodes"));
  EXPECT_THAT(out_.str(), HasSubstr("pod-0"));
  // The agents' own variables are enough.
  ASSERT_EQ(Run({"--json"}, {{"TRAINLET_CONTROLLER", grpc}, {"TRAINLET_TOKEN_FILE", token_file_}}),
            kExitSuccess)
      << err_.str();
  auto doc = controller::ParseSnapshotJson(out_.str());
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->jobs.size(), 1u);
  EXPECT_EQ(doc->jobs[0].nodes.size(), 1u);
  EXPECT_EQ(doc->jobs[0].nodes[0].workers[0].pid, 4242);
  // The views' address gives the same job.
  ASSERT_EQ(Run({absl::StrCat("--controller=127.0.0.1:", host_->http_port()), "jobA"}),
            kExitSuccess)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("JOB jobA: active, round 1, 1 ranks on 1 nodes"));
  EXPECT_EQ(Run({"--controller=" + grpc, "--token-file=" + token_file_, "nope"}),
            kExitStatusJobUnknown);
}

// Over gRPC too: the core's answer, adapted as the views adapt it.
TEST_F(StatusCommandOneAddress, PreflightOverGrpc_NamesTheFailedChecks) {
  v1::HealthReport r = Pod0Report(2);
  controller::testing::SetPreflight(&r, 1, {"dns"});
  ASSERT_TRUE(host_->core().Report(r).ok());
  const std::string grpc = absl::StrCat("127.0.0.1:", host_->port());
  ASSERT_EQ(Run({"--controller=" + grpc, "--token-file=" + token_file_}), kExitSuccess)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("  preflight failed on: pod-0\n"));
  EXPECT_THAT(out_.str(), HasSubstr("  pod-0 preflight round 1: 1 failed\n"
                                    "    dns: dns failed here\n"));
  EXPECT_THAT(out_.str(), HasSubstr("1 node failed"));
  ASSERT_EQ(Run({"--controller=" + grpc, "--token-file=" + token_file_, "jobA"}), kExitSuccess)
      << err_.str();
  EXPECT_THAT(out_.str(),
              ::testing::ContainsRegex("pod-0 +1 +gpu_ecc +skipped +no NVML on this node\n"));
}

TEST_F(StatusCommandOneAddress, GrpcWithoutTheToken_Exits77NamingIt) {
  EXPECT_EQ(Run({absl::StrCat("--controller=127.0.0.1:", host_->port())}), kExitRejected);
  EXPECT_THAT(err_.str(), HasSubstr("--token-file"));
}

// The same address and files as the agents' mutual TLS.
TEST(StatusCommandTls, TheAgentsTlsFilesReadTheGrpcPort) {
  auto pki = rendezvous::testing::TestPki::Create();
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto server = (*pki)->IssueConfig("controller", "ca", {"DNS:localhost", "IP:127.0.0.1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*pki)->Issue("agent", "ca", {"DNS:agent"});
  ASSERT_TRUE(client.ok()) << client.status();
  controller::ControllerHostOptions o;
  o.listen = {"127.0.0.1", 0};
  o.tls = *server;
  auto host = controller::ControllerHost::Start(o);
  ASSERT_TRUE(host.ok()) << host.status();
  v1::HealthReport r;
  r.set_job_id("jobT");
  r.set_node_id("pod-0");
  r.set_incarnation(9);
  r.set_sequence(1);
  r.set_round(1);
  r.set_node_rank(0);
  r.set_nnodes(1);
  r.set_world_size(1);
  r.set_state(v1::HealthReport::RUNNING);
  r.set_report_interval_ms(5000);
  r.set_exit_code(-1);
  ASSERT_TRUE((*host)->core().Report(r).ok());
  const std::string address = absl::StrCat("--controller=127.0.0.1:", (*host)->port());
  std::ostringstream out, err;
  ASSERT_EQ(RunStatusCommand({address, "--tls-dir=" + client->dir, "jobT"}, {}, out, err),
            kExitSuccess)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("JOB jobT: active"));
  // Without them, the message says what a TLS port wants.
  std::ostringstream out2, err2;
  EXPECT_EQ(RunStatusCommand({address, "--timeout=1s"}, {}, out2, err2), kExitUnavailable);
  EXPECT_THAT(err2.str(), HasSubstr("wants --tls-ca, --tls-cert and --tls-key"));
}

// A TCP server on 127.0.0.1 that is no controller: each connection is given
// to `serve` on a thread of its own, until the server is destroyed.
class OddPeer {
 public:
  explicit OddPeer(std::function<void(int fd, const std::atomic<bool>& stop)> serve)
      : serve_(std::move(serve)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listen_fd_, 16);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (stop_) return;
        if (poll(&p, 1, 50) <= 0) continue;
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        threads_.emplace_back([this, fd] {
          serve_(fd, stop_);
          close(fd);
        });
      }
    });
  }
  ~OddPeer() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : threads_) t.join();
    close(listen_fd_);
  }
  std::string address() const { return absl::StrCat("--controller=127.0.0.1:", port_); }

 private:
  std::function<void(int, const std::atomic<bool>&)> serve_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> threads_;
};

// Reads what the client sent (its request), best effort.
void ReadRequest(int fd) {
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  if (poll(&p, 1, 2000) > 0) (void)!recv(fd, buf, sizeof(buf), 0);
}

// A server that answers at once and then drips its body a byte every 100 ms
// (each read well within --timeout) would keep a client whose timeout is per
// read for hours: --timeout bounds each whole answer.
TEST(StatusCommandOddPeers, AnswerDrippedPastTheTimeout_Exits69InTime) {
  OddPeer peer([](int fd, const std::atomic<bool>& stop) {
    ReadRequest(fd);
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
    if (send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
    // At most 30 s, so that a client without the bound still ends.
    for (int i = 0; i < 300 && !stop; ++i) {
      if (send(fd, "x", 1, MSG_NOSIGNAL) < 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::ostringstream out, err;
  const absl::Time start = absl::Now();
  EXPECT_EQ(RunStatusCommand({peer.address(), "--timeout=1s"}, {}, out, err), kExitUnavailable);
  // 1 s for the answer (and 1 s for the probe); 15 s is room for a loaded
  // machine, against 30 s of drip.
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_THAT(err.str(), HasSubstr("within --timeout"));
}

// A port that closes every connection at once without a word (a TLS port
// given plaintext, a port that resets): said as it is, at once, not as a
// silence of --timeout.
TEST(StatusCommandOddPeers, PortThatClosesAtOnce_IsSaidSo) {
  OddPeer peer([](int fd, const std::atomic<bool>&) { ReadRequest(fd); });
  std::ostringstream out, err;
  const absl::Time start = absl::Now();
  EXPECT_EQ(RunStatusCommand({peer.address(), "--timeout=20s"}, {}, out, err), kExitUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(err.str(), HasSubstr("closed the connection without answering"));
  EXPECT_THAT(err.str(), Not(HasSubstr("no answer within --timeout")));
}

TEST(StatusCommand, Usage_Exits64) {
  std::ostringstream out, err;
  EXPECT_EQ(RunStatusCommand({"--bogus"}, {}, out, err), kExitUsage);
  EXPECT_EQ(RunStatusCommand({"--help"}, {}, out, err), kExitSuccess);
  EXPECT_THAT(out.str(), HasSubstr("Usage: trainlet status"));
}

}  // namespace
}  // namespace trainlet::agent

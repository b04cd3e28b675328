// The real client (OpenSslPoster, and the sender over it) against the test
// server written from Trainer's status server (testing/fake_trainer_server.h),
// with a CA and server certificate made for the test.
#include "kubeflow/https_post.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/temp_root.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kubeflow/testing/fake_trainer_server.h"
#include "kubeflow/trainer_status.h"
#include "preflight/testing/fake_resolver.h"
#include "rendezvous/testing/test_pki.h"

namespace trainlet::kubeflow {
namespace {

using testing::FakeTrainerServer;
using ::testing::HasSubstr;

constexpr char kToken[] = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsidHJhaW5lciJdfQ.c2ln";
constexpr char kHost[] = "kubeflow-trainer-controller-manager.kubeflow-system.svc";

class HttpsPostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    signal(SIGPIPE, SIG_IGN);  // as the agent does.
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<rendezvous::testing::TestPki>> pki =
        rendezvous::testing::TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(*pki);
    // Trainer's webhook certificate names <service>.<namespace>.svc.
    absl::StatusOr<rendezvous::testing::CertFiles> cert =
        pki_->Issue("server", "ca", {absl::StrCat("DNS:", kHost)});
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
    resolver_ = std::make_shared<preflight::testing::FakeResolver>();
    resolver_->Add(kHost, {"127.0.0.1"});
    absl::StatusOr<std::unique_ptr<OpenSslPoster>> poster = OpenSslPoster::Create(resolver_);
    ASSERT_TRUE(poster.ok());
    poster_ = std::move(*poster);
  }

  std::unique_ptr<FakeTrainerServer> Serve(FakeTrainerServer::Mode mode, int fixed = 500) {
    FakeTrainerServer::Options o;
    o.cert_file = cert_.cert;
    o.key_file = cert_.key;
    o.token = kToken;
    o.mode = mode;
    o.fixed_status = fixed;
    absl::StatusOr<std::unique_ptr<FakeTrainerServer>> s = FakeTrainerServer::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  HttpsTarget Target(const FakeTrainerServer& server) const {
    HttpsTarget t;
    t.host = kHost;
    t.port = server.port();
    t.path = server.StatusPath();
    t.ca_file = cert_.ca;
    return t;
  }

  // The pod's variables, as Trainer's plugin injects them, for `server`.
  std::map<std::string, std::string> Env(const FakeTrainerServer& server) {
    return {
        {kServerUrlEnv, absl::StrCat("https://", kHost, ":", server.port(), server.StatusPath())},
        {kCaCertEnv, cert_.ca},
        {kTokenEnv, root_.Write("token", absl::StrCat(kToken, "\n"))}};
  }

  static std::vector<std::pair<std::string, std::string>> Bearer(const std::string& token) {
    return {{"Authorization", absl::StrCat("Bearer ", token)}};
  }

  trainlet::testing::TempRoot root_;
  std::unique_ptr<rendezvous::testing::TestPki> pki_;
  rendezvous::testing::CertFiles cert_;
  std::shared_ptr<preflight::testing::FakeResolver> resolver_;
  std::unique_ptr<OpenSslPoster> poster_;
};

constexpr char kBody[] =
    R"({"trainerStatus":{"progressPercentage":45,"estimatedRemainingSeconds":120,)"
    R"("metrics":[{"name":"loss","value":"0.15"}],"lastUpdatedTime":"2026-06-12T03:00:00Z"}})";

TEST_F(HttpsPostTest, Accepted_MethodPathHeadersTokenTlsAndBody) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<HttpAnswer> a =
      poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, absl::StrCat(kBody, "\n"));  // Trainer echoes what it took.
  std::vector<testing::RecordedRequest> got = server->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[0].path,
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama/status");
  EXPECT_EQ(got[0].headers["authorization"], absl::StrCat("Bearer ", kToken));
  EXPECT_EQ(got[0].headers["content-type"], "application/json");
  EXPECT_EQ(got[0].headers["host"], absl::StrCat(kHost, ":", server->port()));
  EXPECT_EQ(got[0].body, kBody);
  EXPECT_EQ(got[0].answered, 200);
}

TEST_F(HttpsPostTest, WrongTokenOrPath_TrainersRefusals) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<HttpAnswer> a =
      poster_->Post(Target(*server), Bearer("someone-else"), kBody, absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 403);
  EXPECT_THAT(a->body, HasSubstr(R"("reason":"Forbidden")"));
  HttpsTarget other = Target(*server);
  other.path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llama";
  a = poster_->Post(other, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 404);
  a = poster_->Post(Target(*server), Bearer(kToken),
                    R"({"trainerStatus":{"progressPercentage":1}})", absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 422);
}

TEST_F(HttpsPostTest, CertificateFromAnotherCa_IsRefused) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<rendezvous::testing::CertFiles> other = pki_->Issue("x", "other-ca", {"DNS:x"});
  ASSERT_TRUE(other.ok());
  HttpsTarget t = Target(*server);
  t.ca_file = other->ca;
  absl::StatusOr<HttpAnswer> a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("does not verify against"));
  EXPECT_TRUE(server->requests().empty());
}

TEST_F(HttpsPostTest, CertificateForAnotherName_IsRefused) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  resolver_->Add("impostor.kubeflow-system.svc", {"127.0.0.1"});
  HttpsTarget t = Target(*server);
  t.host = "impostor.kubeflow-system.svc";
  absl::StatusOr<HttpAnswer> a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("does not verify against"));
  EXPECT_TRUE(server->requests().empty());
}

TEST_F(HttpsPostTest, MissingCaFile_SaysSo) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  HttpsTarget t = Target(*server);
  t.ca_file = root_.path() + "/no-ca.crt";
  absl::StatusOr<HttpAnswer> a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("cannot load the CA certificate"));
}

TEST_F(HttpsPostTest, Refused_AndUnresolvable) {
  // A port nothing listens on: bound, then closed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  HttpsTarget t;
  t.host = kHost;
  t.port = ntohs(addr.sin_port);
  t.path = "/status";
  t.ca_file = cert_.ca;
  absl::StatusOr<HttpAnswer> a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("Connection refused"));
  t.host = "nowhere.invalid";
  a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("does not resolve"));
}

// A server that takes the request and never answers: the post ends at its
// deadline (a lower bound only: no upper bound that a loaded machine could
// break), and Cancel ends one with a long deadline.
TEST_F(HttpsPostTest, Slow_TimesOut_OrIsCancelled) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kSilent);
  ASSERT_NE(server, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<HttpAnswer> a =
      poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Milliseconds(500));
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(a.status())) << a.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  server.reset();  // lets its silent connection go.

  server = Serve(FakeTrainerServer::Mode::kSilent);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<HttpAnswer> b;
  std::thread post(
      [&] { b = poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Hours(1)); });
  while (server->requests().empty()) absl::SleepFor(absl::Milliseconds(10));
  poster_->Cancel();
  post.join();
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsCancelled(b.status())) << b.status();
  // Cancelled until Reset.
  EXPECT_TRUE(absl::IsCancelled(
      poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Hours(1)).status()));
  poster_->Reset();
  server.reset();
  server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Seconds(30)).ok());
}

// Runs `post` on a thread of its own and says whether it returned within
// `wait` (a generous bound: it fails only for a post that blocks); when it
// did not, `unblock` ends what it blocks on, so that the test fails
// instead of hanging.
bool ReturnsWithin(absl::Duration wait, const std::function<void()>& post,
                   const std::function<void()>& unblock) {
  absl::Notification done;
  std::thread t([&] {
    post();
    done.Notify();
  });
  const bool in_time = done.WaitForNotificationWithTimeout(wait);
  if (!in_time) unblock();
  t.join();
  return in_time;
}

// A CA path that names a FIFO (or a device) is refused at once: opening a
// FIFO blocks until a writer comes, and the sender's thread stuck there
// would hold the agent's exit forever (Stop joins it).
TEST_F(HttpsPostTest, CaFileAFifo_RefusedAtOnce) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  const std::string fifo = root_.path() + "/ca.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  HttpsTarget t = Target(*server);
  t.ca_file = fifo;
  absl::StatusOr<HttpAnswer> a;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(30), [&] { a = poster_->Post(t, Bearer(kToken), kBody, absl::Hours(1)); },
      [&] { close(open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)); }));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("cannot load the CA certificate"));
  EXPECT_THAT(a.status().message(), HasSubstr("not a regular file"));
  EXPECT_TRUE(server->requests().empty());
  // A device is no CA file either, and the trust store is not used instead.
  t.ca_file = "/dev/zero";
  a = poster_->Post(t, Bearer(kToken), kBody, absl::Seconds(30));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("not a regular file"));
  EXPECT_TRUE(server->requests().empty());
}

// A resolver that does not answer: Cancel (the agent exiting) ends the post
// at once, not after the request's timeout (5 s in the agent), and a post
// is bounded by its own deadline even when the resolver ignores it.
TEST_F(HttpsPostTest, HungResolver_CancelAndDeadlineEndThePost) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  resolver_->Hang(kHost);
  absl::StatusOr<HttpAnswer> a;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(30),
      [&] { a = poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Milliseconds(200)); },
      [&] { resolver_->Release(); }));
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(a.status())) << a.status();

  // That lookup is still out: the next post fails at once, starting no
  // second thread behind the hung resolver.
  a = poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Hours(1));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("an earlier lookup has not answered yet"));
  EXPECT_EQ(resolver_->asked().size(), 1u);

  absl::StatusOr<std::unique_ptr<OpenSslPoster>> other = OpenSslPoster::Create(resolver_);
  ASSERT_TRUE(other.ok());
  absl::StatusOr<HttpAnswer> b;
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(30),
      [&] {
        std::thread cancel([&] {
          while (resolver_->asked().size() < 2) absl::SleepFor(absl::Milliseconds(5));
          (*other)->Cancel();
        });
        b = (*other)->Post(Target(*server), Bearer(kToken), kBody, absl::Hours(1));
        cancel.join();
      },
      [&] { resolver_->Release(); }));
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsCancelled(b.status())) << b.status();
  other->reset();  // its lookup's thread outlives it.
  // Once the resolver answers, posts go through again.
  resolver_->Release();
  absl::StatusOr<HttpAnswer> c;
  for (int i = 0; i < 3000; ++i) {
    c = poster_->Post(Target(*server), Bearer(kToken), kBody, absl::Seconds(30));
    if (c.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->status, 200);
}

// The agent's exit with a lookup that never answers: the sender's Stop
// (the request in flight cancelled, then the final send within 1 s)
// returns, and nothing reaches the server.
TEST_F(HttpsPostTest, Sender_HungResolver_StopReturns) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  resolver_->Hang(kHost);
  absl::StatusOr<std::optional<TrainerEndpoint>> endpoint = EndpointFromEnv(Env(*server));
  ASSERT_TRUE(endpoint.ok() && endpoint->has_value()) << endpoint.status();
  SenderOptions options;
  options.endpoint = **endpoint;
  TrainerStatusSender sender(options, poster_.get(), Clock::Monotonic());
  sender.Start();
  agent::AgentStatus s;
  s.node_rank = 0;
  s.state = agent::RoundState::kRunning;
  agent::WorkerProgress p;
  p.line = "step=200 total_steps=1000";
  p.updated = Clock::Monotonic()->Now();
  s.progress.push_back(p);
  sender.Update(s);
  while (resolver_->asked().empty()) absl::SleepFor(absl::Milliseconds(5));
  s.state = agent::RoundState::kDone;  // the job succeeded: a final send is due.
  sender.Update(s);
  EXPECT_TRUE(ReturnsWithin(
      absl::Seconds(30), [&] { sender.Stop(absl::Seconds(1)); }, [&] { resolver_->Release(); }));
  EXPECT_TRUE(server->requests().empty());
  resolver_->Release();
}

TEST(ParseHttpAnswer, StatusLineAndBody) {
  absl::StatusOr<HttpAnswer> a =
      ParseHttpAnswer("HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 422);
  EXPECT_EQ(a->body, "{}");
  EXPECT_FALSE(ParseHttpAnswer("SSH-2.0-OpenSSH_9.2\r\n").ok());
  EXPECT_FALSE(ParseHttpAnswer("HTTP/1.1 99 x\r\n\r\n").ok());
  EXPECT_FALSE(ParseHttpAnswer("").ok());
}

// The sender over the real client, from the pod's variables: what it sends
// is what Trainer takes; a 5xx gets one warning.
TEST_F(HttpsPostTest, Sender_FromThePodsVariables_TrainerTakesIt) {
  std::unique_ptr<FakeTrainerServer> server = Serve(FakeTrainerServer::Mode::kTrainer);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::optional<TrainerEndpoint>> endpoint = EndpointFromEnv(Env(*server));
  ASSERT_TRUE(endpoint.ok() && endpoint->has_value()) << endpoint.status();
  SenderOptions options;
  options.endpoint = **endpoint;
  SimulatedClock clock;
  TrainerStatusSender sender(options, poster_.get(), &clock);
  agent::AgentStatus s;
  s.node_rank = 0;
  s.state = agent::RoundState::kRunning;
  agent::WorkerProgress p;
  p.line = "step=200 total_steps=1000 loss=0.31 lr=1e-4 pid=4242";
  p.updated = clock.Now();
  s.progress.push_back(p);
  sender.Update(s);
  sender.Step();
  clock.Advance(absl::Seconds(10));
  s.progress[0].line = "step=300 total_steps=1000 loss=0.29 lr=1e-4 pid=4242";
  s.progress[0].updated = clock.Now();
  sender.Update(s);
  sender.Step();
  std::vector<testing::RecordedRequest> got = server->requests();
  ASSERT_EQ(got.size(), 2u);
  for (const testing::RecordedRequest& r : got) {
    EXPECT_EQ(r.answered, 200) << r.reason << "\n" << r.body;
  }
  EXPECT_THAT(got[1].body, HasSubstr(R"("progressPercentage":30,"estimatedRemainingSeconds":70,)"));
  EXPECT_EQ(sender.stats().sent, 2);
  EXPECT_EQ(sender.stats().warnings, 0);

  std::unique_ptr<FakeTrainerServer> down =
      Serve(FakeTrainerServer::Mode::kFixedStatus, /*fixed=*/500);
  ASSERT_NE(down, nullptr);
  options.endpoint = **EndpointFromEnv(Env(*down));
  TrainerStatusSender failing(options, poster_.get(), &clock);
  failing.Update(s);
  for (int i = 0; i < 3; ++i) {
    clock.Advance(failing.Step() - clock.Now());
  }
  EXPECT_EQ(down->requests().size(), 3u);
  EXPECT_EQ(failing.stats().failed, 3);
  EXPECT_EQ(failing.stats().warnings, 1);
}

}  // namespace
}  // namespace trainlet::kubeflow

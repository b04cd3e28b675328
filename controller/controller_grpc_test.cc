// The controller over real gRPC on 127.0.0.1: N agents as threads.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_root.h"
#include "controller/controller_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/grpc_auth.h"
#include "rendezvous/testing/test_pki.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret";

class ControllerGrpcTest : public ::testing::Test {
 protected:
  void StartHost() {
    ControllerHostOptions o;
    o.tokens = JobTokens::AnyJob(kToken);
    o.listen = {"127.0.0.1", 0};
    o.history.path = root_.path() + "/history.db";
    auto host = ControllerHost::Start(o);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
  }
  std::unique_ptr<v1::Controller::Stub> Stub() const {
    return v1::Controller::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", host_->port()),
                                                       grpc::InsecureChannelCredentials()));
  }
  static grpc::Status Call(v1::Controller::Stub* stub, const v1::HealthReport& r,
                           const std::string& token = kToken) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata(rendezvous::kTokenMetadataKey, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::HealthReportResponse response;
    return stub->Report(&ctx, r, &response);
  }
  static v1::HealthReport Report(const std::string& node, uint64_t inc, uint64_t seq,
                                 uint64_t round) {
    v1::HealthReport r;
    r.set_job_id("job");
    r.set_node_id(node);
    r.set_incarnation(inc);
    r.set_sequence(seq);
    r.set_round(round);
    r.set_state(v1::HealthReport::RUNNING);
    r.set_report_interval_ms(5000);
    return r;
  }
  v1::GetStatusResponse Status(v1::Controller::Stub* stub, grpc::Status* status) const {
    grpc::ClientContext ctx;
    ctx.AddMetadata(rendezvous::kTokenMetadataKey, kToken);
    v1::GetStatusRequest request;
    request.set_job_id("job");
    v1::GetStatusResponse response;
    *status = stub->GetStatus(&ctx, request, &response);
    return response;
  }

  testing::TempRoot root_;
  std::unique_ptr<ControllerHost> host_;
};

TEST_F(ControllerGrpcTest, ManyAgentsAsThreads_AreAllTracked) {
  StartHost();
  constexpr int kAgents = 32;
  constexpr int kReports = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> agents;
  for (int i = 0; i < kAgents; ++i) {
    agents.emplace_back([&, i] {
      auto stub = Stub();
      for (int seq = 1; seq <= kReports; ++seq) {
        v1::HealthReport r = Report(absl::StrCat("pod-", i), 100 + i, seq, seq <= 5 ? 1 : 2);
        r.set_node_rank(i);
        r.mutable_progress()->set_known(true);
        r.mutable_progress()->set_step(seq * 10);
        if (seq == 6) {
          v1::ReportEvent* e = r.add_events();
          e->set_kind(v1::ReportEvent::RESTART);
          e->set_id(1);
          e->set_round(2);
          e->set_cause("worker 0 on pod-3 killed by signal 9");
        }
        if (!Call(stub.get(), r).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : agents) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto stub = Stub();
  grpc::Status s;
  v1::GetStatusResponse status = Status(stub.get(), &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(status.summary().nodes(), kAgents);
  EXPECT_EQ(status.summary().nodes_fresh(), kAgents);
  EXPECT_EQ(status.summary().round(), 2u);
  EXPECT_EQ(status.summary().restarts(), 1);
  EXPECT_EQ(status.summary().progress_step(), kReports * 10);
  ASSERT_EQ(status.nodes_size(), kAgents);
  EXPECT_EQ(status.nodes(0).report().node_id(), "pod-0");
  EXPECT_EQ(status.nodes(kAgents - 1).report().node_rank(), kAgents - 1);
  EXPECT_EQ(host_->core().stats().reports, kAgents * kReports);
}

TEST_F(ControllerGrpcTest, WrongOrMissingToken_IsUnauthenticated) {
  StartHost();
  auto stub = Stub();
  grpc::Status s = Call(stub.get(), Report("pod-0", 1, 1, 1), "wrong");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("wrong job token"));
  s = Call(stub.get(), Report("pod-0", 1, 1, 1), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("this controller requires one"));
  EXPECT_EQ(host_->core().stats().jobs, 0);
}

TEST_F(ControllerGrpcTest, InvalidReport_IsInvalidArgumentAndUnknownJobNotFound) {
  StartHost();
  auto stub = Stub();
  v1::HealthReport r = Report("pod-0", 1, 1, 1);
  r.set_incarnation(0);
  grpc::Status s = Call(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("incarnation"));
  // Larger than the server reads at all.
  r = Report("pod-0", 1, 1, 1);
  r.set_hang_evidence(std::string(100 * 1024, 'x'));
  EXPECT_EQ(Call(stub.get(), r).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  Status(stub.get(), &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Writes `reports` on one ReportStream, half-closes it, and returns the
// stream's status and the count the controller says it accepted.
grpc::Status Stream(v1::Controller::Stub* stub, const std::vector<v1::HealthReport>& reports,
                    const std::string& token, uint64_t* accepted) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata(rendezvous::kTokenMetadataKey, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::HealthReportResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::HealthReport>> writer =
      stub->ReportStream(&ctx, &response);
  for (const v1::HealthReport& r : reports) {
    if (!writer->Write(r)) break;  // the controller ended the stream.
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  *accepted = response.accepted();
  return s;
}

TEST_F(ControllerGrpcTest, ReportStream_EveryReportCountedAndTheAnswerSaysHowMany) {
  StartHost();
  auto stub = Stub();
  std::vector<v1::HealthReport> reports;
  for (int seq = 1; seq <= 20; ++seq) reports.push_back(Report("pod-0", 7, seq, 1));
  uint64_t accepted = 0;
  grpc::Status s = Stream(stub.get(), reports, kToken, &accepted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(accepted, 20u);
  EXPECT_EQ(host_->core().stats().reports, 20);
}

TEST_F(ControllerGrpcTest, ReportStream_WrongToken_EndsItUnauthenticatedBeforeAnyReport) {
  StartHost();
  auto stub = Stub();
  uint64_t accepted = 0;
  grpc::Status s = Stream(stub.get(), {Report("pod-0", 7, 1, 1)}, "wrong", &accepted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("wrong job token"));
  EXPECT_EQ(host_->core().stats().jobs, 0);
}

TEST_F(ControllerGrpcTest, ReportStream_ARefusedReportEndsTheStreamWithItsStatus) {
  StartHost();
  auto stub = Stub();
  std::vector<v1::HealthReport> reports;
  for (int seq = 1; seq <= 3; ++seq) reports.push_back(Report("pod-0", 7, seq, 1));
  reports[2].set_incarnation(0);  // invalid: refused.
  for (int seq = 4; seq <= 6; ++seq) reports.push_back(Report("pod-0", 7, seq, 1));
  uint64_t accepted = 0;
  grpc::Status s = Stream(stub.get(), reports, kToken, &accepted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("incarnation"));
  // The two before it were accepted; nothing after it was read.
  EXPECT_EQ(host_->core().stats().reports, 2);
  // A report larger than the server reads ends the stream too.
  reports = {Report("pod-0", 7, 7, 1)};
  reports[0].set_hang_evidence(std::string(100 * 1024, 'x'));
  s = Stream(stub.get(), reports, kToken, &accepted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(host_->core().stats().reports, 2);
}

TEST_F(ControllerGrpcTest, ControllerRestart_KeepsHistory) {
  StartHost();
  {
    auto stub = Stub();
    ASSERT_TRUE(Call(stub.get(), Report("pod-0", 1, 1, 1)).ok());
    v1::HealthReport r = Report("pod-0", 1, 2, 2);
    r.set_last_failure("local worker 1 exited with code 3");
    ASSERT_TRUE(Call(stub.get(), r).ok());
  }
  host_.reset();
  StartHost();
  auto stub = Stub();
  grpc::Status s;
  v1::GetStatusResponse status = Status(stub.get(), &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(status.summary().state(), v1::JobSummary::STALE);
  EXPECT_EQ(status.summary().restarts(), 1);
  ASSERT_EQ(status.history_size(), 3);
  EXPECT_EQ(status.history(1).cause(), "local worker 1 exited with code 3");

  grpc::ClientContext ctx;
  ctx.AddMetadata(rendezvous::kTokenMetadataKey, kToken);
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).job_id(), "job");
}

TEST_F(ControllerGrpcTest, ReportBetween60And64KiB_IsResourceExhaustedAsDocumented) {
  StartHost();
  auto stub = Stub();
  v1::HealthReport r = Report("pod-0", 1, 1, 1);
  r.set_hang_evidence(std::string(16 * 1024, 'e'));
  for (int i = 0; i < 16; ++i) {
    v1::ReportEvent* e = r.add_events();
    e->set_kind(v1::ReportEvent::PERIODIC);
    e->set_cause(std::string(1000, 'c'));
  }
  for (int i = 0; i < 1024; ++i) {
    v1::WorkerHealth* w = r.add_workers();
    w->set_local_rank(i);
    w->set_rank(i);
    w->set_pid(100000 + i);
    w->set_state(v1::WorkerHealth::RUNNING);
  }
  int gpu = 0;
  while (r.ByteSizeLong() < 62 * 1024) {
    v1::GpuReport* g = r.add_gpus();
    g->set_index(gpu++);
    g->set_reason(std::string(200, 'g'));
  }
  ASSERT_GT(r.ByteSizeLong(), 60u * 1024);
  ASSERT_LT(r.ByteSizeLong(), 64u * 1024);
  grpc::Status s = Call(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("report: at most 61440 bytes"));
  uint64_t accepted = 0;
  s = Stream(stub.get(), {r}, kToken, &accepted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ControllerGrpcTest, DamagedDatabase_IsMovedAsideAndTheControllerStartsEmpty) {
  const std::string path = root_.Write("history.db", std::string(8192, 'x'));
  ControllerHostOptions o;
  o.listen = {"127.0.0.1", 0};
  o.history.path = path;
  o.db_required = true;
  auto refused = ControllerHost::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr(path));

  o.db_required = false;
  auto host = ControllerHost::Start(o);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->core().stats().jobs, 0);
  // The damaged file is kept beside the new one.
  int damaged = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root_.path())) {
    if (entry.path().filename().string().rfind("history.db.damaged-", 0) == 0) ++damaged;
  }
  EXPECT_EQ(damaged, 1);
}

TEST_F(ControllerGrpcTest, JobScopedTokens_OneTeamCannotWriteOrReadAnothersJobs) {
  ControllerHostOptions o;
  o.listen = {"127.0.0.1", 0};
  auto tokens = JobTokens::Parse("admin\njobs=team-a-* tok-a\njobs=team-b-* tok-b\n", "test");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  o.tokens = *tokens;
  auto host = ControllerHost::Start(o);
  ASSERT_TRUE(host.ok()) << host.status();
  host_ = std::move(*host);
  auto stub = Stub();
  v1::HealthReport a = Report("pod-0", 1, 1, 1);
  a.set_job_id("team-a-train");
  v1::HealthReport b = Report("pod-0", 2, 1, 1);
  b.set_job_id("team-b-train");
  ASSERT_TRUE(Call(stub.get(), a, "tok-a").ok());
  ASSERT_TRUE(Call(stub.get(), b, "tok-b").ok());
  // Team A's token writing team B's job: refused, naming the scope.
  b.set_sequence(2);
  grpc::Status s = Call(stub.get(), b, "tok-a");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("for jobs team-a-*, not job team-b-train"));
  uint64_t accepted = 0;
  s = Stream(stub.get(), {a, b}, "tok-a", &accepted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(host_->core().GetStatus("team-b-train")->nodes(0).report().sequence(), 1u);
  // Reading: a team lists and reads its own jobs only; the admin all.
  auto list = [&](const std::string& token) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(rendezvous::kTokenMetadataKey, token);
    v1::ListJobsResponse jobs;
    EXPECT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
    std::vector<std::string> ids;
    for (const auto& j : jobs.jobs()) ids.push_back(j.job_id());
    return ids;
  };
  EXPECT_THAT(list("tok-a"), ::testing::ElementsAre("team-a-train"));
  EXPECT_THAT(list("admin"), ::testing::ElementsAre("team-a-train", "team-b-train"));
  grpc::ClientContext ctx;
  ctx.AddMetadata(rendezvous::kTokenMetadataKey, "tok-a");
  v1::GetStatusRequest request;
  request.set_job_id("team-b-train");
  v1::GetStatusResponse response;
  EXPECT_EQ(stub->GetStatus(&ctx, request, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Call(stub.get(), a, "tok-c").error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// A forger with the job's token (or none, when the controller has none)
// tries every incarnation the controller shows it, in GetStatus and in its
// refusals, to write another node's row: a DONE with exit code 1 and a
// sequence far ahead, which would have hidden the real agent's reports.
TEST_F(ControllerGrpcTest, Forger_LearnsNoIncarnationToWriteAnotherNodesRowWith) {
  StartHost();
  auto stub = Stub();
  constexpr uint64_t kReal = 0x1a2b3c4d5e6f7081;
  ASSERT_TRUE(Call(stub.get(), Report("pod-1", kReal, 1, 1)).ok());
  std::set<uint64_t> learnt;
  auto learn = [&](const std::string& text) {
    static const std::regex hex("[0-9a-f]{16}");
    for (std::sregex_iterator m(text.begin(), text.end(), hex), end; m != end; ++m) {
      learnt.insert(std::stoull(m->str(), nullptr, 16));
    }
  };
  grpc::Status s;
  v1::GetStatusResponse status = Status(stub.get(), &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  for (const v1::NodeStatus& n : status.nodes()) learnt.insert(n.report().incarnation());
  // Refusals: a made-up incarnation, then (once one is fenced) an old one.
  s = Call(stub.get(), Report("pod-1", 0xbad, 1, 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  learn(s.error_message());
  for (uint64_t inc : learnt) {
    v1::HealthReport forged = Report("pod-1", inc, uint64_t{1} << 40, 1);
    forged.set_state(v1::HealthReport::DONE);
    forged.set_exit_code(1);
    s = Call(stub.get(), forged);
    learn(s.error_message());
  }
  EXPECT_EQ(learnt.count(kReal), 0u) << "the controller handed out the row's incarnation";
  // The real agent's next report is taken; the row is its own.
  ASSERT_TRUE(Call(stub.get(), Report("pod-1", kReal, 2, 1)).ok());
  status = Status(stub.get(), &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(status.nodes_size(), 1);
  EXPECT_EQ(status.nodes(0).report().sequence(), 2u);
  EXPECT_EQ(status.nodes(0).report().state(), v1::HealthReport::RUNNING);
  EXPECT_EQ(status.summary().state(), v1::JobSummary::ACTIVE);
  // What the views show is the part the agent's log shows (inc=1a2b3c4d).
  EXPECT_EQ(status.nodes(0).report().incarnation() >> 32, kReal >> 32);
}

TEST(ControllerMessages, ClientCertificateRefusals_NameTheController) {
  auto pki = rendezvous::testing::TestPki::Create();
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto tls = (*pki)->IssueConfig("controller", "ca", {"IP:127.0.0.1"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto stranger = (*pki)->IssueConfig("stranger", "other-ca", {"DNS:stranger"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  auto peers = rendezvous::PeerVerifier::Create(
      tls->ca_pem, Clock::Real(), rendezvous::PeerVerifier::kMaxRemembered, "controller");
  ASSERT_TRUE(peers.ok()) << peers.status();
  absl::Status none = (*peers)->Verify("", "");
  EXPECT_THAT(none.message(), HasSubstr("this controller uses mutual TLS"));
  absl::Status wrong = (*peers)->Verify(stranger->cert_pem, "");
  EXPECT_THAT(wrong.message(), HasSubstr("a CA in the controller's --tls-ca"));
  EXPECT_THAT(wrong.message(), ::testing::Not(HasSubstr("coordinator")));
}

}  // namespace
}  // namespace trainlet::controller

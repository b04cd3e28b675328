#include "rendezvous/in_process_client.h"

#include <optional>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

class InProcessClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.job_id = "job";
    o.min_nodes = 1;
    o.max_nodes = 1;
    o.last_call = absl::Milliseconds(500);
    o.heartbeat_timeout = absl::Seconds(5);
    o.min_nodes_timeout = absl::Minutes(5);
    o.clock = &clock_;
    core_ = std::make_unique<Coordinator>(o);
    client_ = std::make_unique<InProcessRendezvousClient>(core_.get(), "127.0.0.1");
  }

  v1::JoinRequest Req() const {
    v1::JoinRequest r;
    r.mutable_member()->set_node_id("solo");
    r.mutable_member()->set_incarnation(7);
    r.set_job_id("job");
    r.set_protocol_version(kProtocolVersion);
    r.set_rank_hint(0);
    r.set_local_world_size(2);
    r.set_master_port(29500);
    return r;
  }

  v1::Assignment JoinOk() {
    std::optional<absl::StatusOr<v1::Assignment>> got;
    client_->Join(Req(), absl::Minutes(1), [&](absl::StatusOr<v1::Assignment> a) { got = a; });
    EXPECT_TRUE(got.has_value()) << "a one-node round closes at the join";
    EXPECT_TRUE(got->ok()) << got->status();
    return got->value();
  }

  v1::ReportRequest Report(const v1::Assignment& a, v1::ReportRequest::State state) const {
    v1::ReportRequest r;
    r.mutable_member()->set_node_id("solo");
    r.mutable_member()->set_incarnation(7);
    r.set_job_id("job");
    r.set_round(a.round());
    r.set_state(state);
    return r;
  }

  SimulatedClock clock_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<InProcessRendezvousClient> client_;
};

TEST_F(InProcessClientTest, Join_OneNodeRound_AnsweredWithThePeerAddressAsMaster) {
  const v1::Assignment a = JoinOk();
  EXPECT_EQ(a.node_rank(), 0);
  EXPECT_EQ(a.world_size(), 2);
  EXPECT_EQ(a.master_addr(), "127.0.0.1");
  EXPECT_EQ(a.master_port(), 29500);
}

TEST_F(InProcessClientTest, Join_Rejected_AnsweredInlineWithTheCoordinatorsError) {
  v1::JoinRequest r = Req();
  r.set_protocol_version(0);
  std::optional<absl::StatusOr<v1::Assignment>> got;
  client_->Join(r, absl::Minutes(1), [&](absl::StatusOr<v1::Assignment> a) { got = a; });
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got->status().message(), HasSubstr("protocol 0"));
}

TEST_F(InProcessClientTest, Watch_VerdictThenEndOnce_ReportReachesTheCore) {
  const v1::Assignment a = JoinOk();
  std::vector<v1::Directive> directives;
  std::vector<absl::Status> ends;
  v1::WatchRequest w;
  w.mutable_member()->set_node_id("solo");
  w.mutable_member()->set_incarnation(7);
  w.set_job_id("job");
  w.set_round(a.round());
  std::unique_ptr<WatchStream> stream = client_->Watch(
      w, [&](const v1::Directive& d) { directives.push_back(d); },
      [&](const absl::Status& s) { ends.push_back(s); });
  int handled = 0;
  client_->SetReportResponseHandler([&](const v1::ReportResponse&) { ++handled; });
  std::vector<absl::Status> answers;
  client_->Report(Report(a, v1::ReportRequest::RUNNING),
                  [&](const absl::Status& s) { answers.push_back(s); });
  client_->Report(Report(a, v1::ReportRequest::SUCCEEDED),
                  [&](const absl::Status& s) { answers.push_back(s); });
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  EXPECT_TRUE(answers[1].ok()) << answers[1];
  EXPECT_EQ(handled, 2);
  ASSERT_FALSE(directives.empty());
  EXPECT_TRUE(directives.back().has_job_finished()) << directives.back().DebugString();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_TRUE(ends[0].ok()) << ends[0];
  EXPECT_TRUE(client_->Flush(absl::ZeroDuration()));
  stream.reset();  // after the end: no second on_end
  EXPECT_EQ(ends.size(), 1u);
}

TEST_F(InProcessClientTest, Watch_Cancelled_EndsOnceWithCancelledAndNothingAfter) {
  const v1::Assignment a = JoinOk();
  std::vector<absl::Status> ends;
  int directives = 0;
  v1::WatchRequest w;
  w.mutable_member()->set_node_id("solo");
  w.mutable_member()->set_incarnation(7);
  w.set_job_id("job");
  w.set_round(a.round());
  std::unique_ptr<WatchStream> stream = client_->Watch(
      w, [&](const v1::Directive&) { ++directives; },
      [&](const absl::Status& s) { ends.push_back(s); });
  stream->Cancel();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].code(), absl::StatusCode::kCancelled);
  // The coordinator's later verdict reaches nobody.
  const int before = directives;
  core_->Shutdown("test over");
  EXPECT_EQ(directives, before);
  EXPECT_EQ(ends.size(), 1u);
}

}  // namespace
}  // namespace trainlet::rendezvous

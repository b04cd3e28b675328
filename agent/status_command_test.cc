#include "agent/status_command.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusCommand, FormatJobs_OneLinePerJob) {
  v1::ListJobsResponse jobs;
  v1::JobSummary* j = jobs.add_jobs();
  j->set_job_id("llama-70b");
  j->set_state(v1::JobSummary::ACTIVE);
  j->set_round(3);
  j->set_nodes(4);
  j->set_nodes_fresh(3);
  j->set_restarts(2);
  j->set_progress_step(1200);
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  j->set_last_report_unix_ms(absl::ToUnixMillis(now - absl::Seconds(4)));
  const std::string text = FormatJobs(jobs, now);
  EXPECT_THAT(text, HasSubstr("llama-70b"));
  EXPECT_THAT(text, HasSubstr("ACTIVE"));
  EXPECT_THAT(text, HasSubstr("3/4"));
  EXPECT_THAT(text, HasSubstr("1200"));
  EXPECT_THAT(text, HasSubstr("4s ago"));
  EXPECT_THAT(FormatJobs({}, now), HasSubstr("no jobs"));
}

TEST(StatusCommand, FormatJobStatus_NodesAndHistoryEscaped) {
  v1::GetStatusResponse s;
  s.mutable_summary()->set_job_id("job");
  s.mutable_summary()->set_state(v1::JobSummary::STALE);
  v1::NodeStatus* n = s.add_nodes();
  n->mutable_report()->set_node_id("pod-0");
  n->mutable_report()->set_node_rank(0);
  n->mutable_report()->set_state(v1::HealthReport::RUNNING);
  n->mutable_report()->add_gpus()->set_fatal(true);
  n->set_stale(true);
  v1::HistoryEntry* e = s.add_history();
  e->set_kind(v1::HistoryEntry::RESTART);
  e->set_round(2);
  e->set_node_id("pod-1");
  e->set_cause("worker exited\x1b[31m with code 3\n");
  const std::string text = FormatJobStatus(s);
  EXPECT_THAT(text, HasSubstr("RUNNING (stale)"));
  EXPECT_THAT(text, HasSubstr("1, 1 fatal"));
  EXPECT_THAT(text, HasSubstr("RESTART"));
  EXPECT_THAT(text, HasSubstr("with code 3"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
}

TEST(StatusCommand, Unreachable_IsExit69AndUsageIs64) {
  std::ostringstream out, err;
  EXPECT_EQ(RunStatusCommand({"--controller=127.0.0.1:1", "--timeout=300ms"}, {}, out, err), 69);
  EXPECT_THAT(err.str(), HasSubstr("127.0.0.1:1"));
  std::ostringstream out2, err2;
  EXPECT_EQ(RunStatusCommand({"a", "b"}, {}, out2, err2), 64);
  EXPECT_THAT(err2.str(), HasSubstr("one JOB at most"));
}

}  // namespace
}  // namespace trainlet::agent
